"""The one small interface through which `storage/` touches files.

`FileIO` is a thin layer over `os`; tests substitute `FaultyFileIO` to make any
call fail with any errno on its n-th use (SQLite's I/O-error testing, DESIGN.md
"Durability"). Memory maps of index files are the single exception: numpy maps
them by path, and their sizes are set through this interface.

Thread safety: the methods keep no state (FileIO); positional reads and writes
(`pread`/`pwrite`) never share a file offset, so concurrent readers are safe.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import threading
from dataclasses import dataclass
from pathlib import Path

from storage import failpoints
from storage.files import TEMP_SUFFIX, capped_name


class FileIO:
    """Real file operations. Every method may raise OSError."""

    def open(
        self, path: Path, *, create: bool = False, writable: bool = True, exclusive: bool = False
    ) -> int:
        """Open a file; `exclusive` creates it and fails (FileExistsError) if it exists."""
        flags = (os.O_RDWR if writable else os.O_RDONLY) | os.O_CLOEXEC
        if create:
            flags |= os.O_CREAT
        if exclusive:
            flags |= os.O_CREAT | os.O_EXCL
        return os.open(path, flags, 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> int:
        return os.pwrite(fd, data, position)

    def pread(self, fd: int, size: int, position: int) -> bytes:
        return os.pread(fd, size, position)

    def fsync(self, fd: int) -> None:
        os.fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def file_size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def rename(self, source: Path, target: Path) -> None:
        os.replace(source, target)

    def unlink(self, path: Path) -> None:
        os.unlink(path)

    def mkdir(self, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)

    def rmtree(self, path: Path) -> None:
        shutil.rmtree(path)

    def fsync_dir(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    # Helpers built only on the primitives above, so faults reach them too.

    def write_all(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write every byte at `position` (pwrite may be short on some file systems)."""
        view = memoryview(data)
        while view:
            written = self.pwrite(fd, view, position)
            if written <= 0:
                raise OSError(errno.EIO, "pwrite wrote nothing")
            position += written
            view = view[written:]

    def read_file(self, path: Path) -> bytes:
        fd = self.open(path, writable=False)
        try:
            size = self.file_size(fd)
            return self.pread(fd, size, 0)
        finally:
            self.close(fd)

    def write_atomic(self, path: Path, data: bytes, *, failpoint: str = "checkpoint") -> None:
        """Replace `path` with `data`: write a temp file, fsync, rename, fsync the directory.

        A crash at any step leaves either the old or the new content under `path`.
        """
        temp = path.with_name(capped_name(path.name, TEMP_SUFFIX))
        failpoints.hit(f"{failpoint}.before_write")
        try:
            fd = self.open(temp, create=True)
            try:
                self.ftruncate(fd, 0)
                self.write_all(fd, data, 0)
                self.fsync(fd)
            finally:
                self.close(fd)
            failpoints.hit(f"{failpoint}.before_rename")
            self.rename(temp, path)
        except OSError:
            # Do not leave a half-written temp file holding space (on a full disk above all).
            with contextlib.suppress(OSError):
                self.unlink(temp)
            raise
        failpoints.hit(f"{failpoint}.after_rename")
        self.fsync_dir(path.parent)


@dataclass(slots=True)
class Fault:
    """Fail `op` with `errno_code` on its `nth` matching call (1-based), and after if persistent."""

    op: str
    errno_code: int
    nth: int = 1
    persistent: bool = False
    path_contains: str | None = None
    seen: int = 0


class FaultyFileIO(FileIO):
    """FileIO that fails chosen calls: a fake of the OS for tests, not a mock of Tidelog.

    Faults match an operation name (`pwrite`, `fsync`, `pread`, `ftruncate`, `open`,
    `rename`, `unlink`, `fsync_dir`) and optionally a substring of the path. Short
    writes: `short_write_bytes` makes the next pwrite write only that many bytes.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.faults: list[Fault] = []
        self.calls: dict[str, int] = {}
        self._paths: dict[int, str] = {}
        self.short_write_bytes: int | None = None

    def fail(
        self,
        op: str,
        errno_code: int = errno.EIO,
        *,
        nth: int = 1,
        persistent: bool = False,
        path_contains: str | None = None,
    ) -> None:
        with self._lock:
            self.faults.append(Fault(op, errno_code, nth, persistent, path_contains))

    def clear(self) -> None:
        with self._lock:
            self.faults.clear()

    def _check(self, op: str, path: str) -> None:
        with self._lock:
            self.calls[op] = self.calls.get(op, 0) + 1
            for fault in self.faults:
                if fault.op != op:
                    continue
                if fault.path_contains is not None and fault.path_contains not in path:
                    continue
                fault.seen += 1
                if fault.seen == fault.nth or (fault.persistent and fault.seen > fault.nth):
                    raise OSError(fault.errno_code, f"injected {op} fault", path)

    def open(
        self, path: Path, *, create: bool = False, writable: bool = True, exclusive: bool = False
    ) -> int:
        self._check("open", str(path))
        fd = super().open(path, create=create, writable=writable, exclusive=exclusive)
        with self._lock:
            self._paths[fd] = str(path)
        return fd

    def close(self, fd: int) -> None:
        with self._lock:
            self._paths.pop(fd, None)
        super().close(fd)

    def _path(self, fd: int) -> str:
        with self._lock:
            return self._paths.get(fd, "")

    def pwrite(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> int:
        self._check("pwrite", self._path(fd))
        short = self.short_write_bytes
        if short is not None:
            self.short_write_bytes = None
            return super().pwrite(fd, memoryview(data)[:short], position)
        return super().pwrite(fd, data, position)

    def pread(self, fd: int, size: int, position: int) -> bytes:
        self._check("pread", self._path(fd))
        return super().pread(fd, size, position)

    def fsync(self, fd: int) -> None:
        self._check("fsync", self._path(fd))
        super().fsync(fd)

    def ftruncate(self, fd: int, size: int) -> None:
        self._check("ftruncate", self._path(fd))
        super().ftruncate(fd, size)

    def rename(self, source: Path, target: Path) -> None:
        self._check("rename", str(source))
        super().rename(source, target)

    def unlink(self, path: Path) -> None:
        self._check("unlink", str(path))
        super().unlink(path)

    def fsync_dir(self, path: Path) -> None:
        self._check("fsync_dir", str(path))
        super().fsync_dir(path)
