"""`FaultyFileIO`: a FileIO whose chosen calls fail, the test double of the OS that
storage's I/O-error tests use (SQLite's I/O-error testing, docs/design.md "Durability").

It lives with the tests, not in `storage/`: product code never fails on purpose.
"""

from __future__ import annotations

import errno
import threading
from dataclasses import dataclass
from pathlib import Path

from storage.fileio import FileIO

__all__ = ["Fault", "FaultyFileIO"]


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
