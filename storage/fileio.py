"""The one small interface through which `storage/` touches files.

`FileIO` is a thin layer over `os`; tests substitute `tests.faulty_io.FaultyFileIO`
to make any call fail with any errno on its n-th use (SQLite's I/O-error testing, docs/design.md
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
from collections.abc import Iterator
from contextvars import ContextVar
from pathlib import Path

from storage import failpoints
from storage.files import TEMP_SUFFIX, capped_name


class ReadWouldWait(Exception):
    """A read under `reads_must_not_wait` would have waited for the disk (its bytes are
    not all in the page cache, or the file system cannot say), or the caller's budget
    of work ran out: do it again where waiting is allowed. Not an OSError: nothing
    failed."""


_READS_MUST_NOT_WAIT: ContextVar[bool] = ContextVar("tidelog_reads_must_not_wait", default=False)


@contextlib.contextmanager
def reads_must_not_wait() -> Iterator[None]:
    """Within this block (this thread or task), `FileIO.pread` serves only bytes in the
    page cache and raises `ReadWouldWait` otherwise: the event loop may then read
    without ever blocking on the disk (preadv2's RWF_NOWAIT)."""
    token = _READS_MUST_NOT_WAIT.set(True)
    try:
        yield
    finally:
        _READS_MUST_NOT_WAIT.reset(token)


def _pread_cached(fd: int, size: int, position: int) -> bytes:
    buffer = bytearray(size)
    try:
        got = os.preadv(fd, [buffer], position, os.RWF_NOWAIT)
    except OSError as exc:  # EAGAIN: not all cached; EOPNOTSUPP and others: cannot tell
        raise ReadWouldWait(f"{size} bytes at {position} are not all cached") from exc
    if got < size:  # the end of the file, or a page not cached: a waiting read tells which
        raise ReadWouldWait(f"{size} bytes at {position}: a short read")
    return bytes(buffer)


class FileIO:
    """Real file operations. Every method may raise OSError (and `pread`, under
    `reads_must_not_wait`, ReadWouldWait)."""

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
        if _READS_MUST_NOT_WAIT.get():
            return _pread_cached(fd, size, position)
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

    def write_atomic(
        self, path: Path, data: bytes, *, failpoint: str = "checkpoint", sync: bool = True
    ) -> None:
        """Replace `path` with `data`: write a temp file, fsync, rename, fsync the directory.

        A crash at any step leaves either the old or the new content under `path`.
        `sync=False` skips both fsyncs, for a file whose loss or tearing by a power
        cut its reader detects and survives (a producer snapshot: CRC, then an older
        one); the caller makes it durable later with `fsync_file` and `fsync_dir`.
        """
        temp = path.with_name(capped_name(path.name, TEMP_SUFFIX))
        failpoints.hit(f"{failpoint}.before_write")
        try:
            fd = self.open(temp, create=True)
            try:
                self.ftruncate(fd, 0)
                self.write_all(fd, data, 0)
                if sync:
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
        if sync:
            self.fsync_dir(path.parent)

    def fsync_file(self, path: Path) -> None:
        """fsync a file by name (one written earlier with `write_atomic(sync=False)`)."""
        fd = self.open(path, writable=False)
        try:
            self.fsync(fd)
        finally:
            self.close(fd)
