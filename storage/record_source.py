"""What a read hands the network layer: whole batches, already cut and fenced.

Storage finds, cuts and fences the batches of a read (storage.read_plan); the network
layer only sends them. Small reads are `bytes`. A large one is a `RecordSource`: its
length and record count, its bytes on demand (`read`), and, when it lies in a local
file, the `(fd, position, length)` that `sendfile` takes. A source that is not a local
file (a tiered segment) answers `file_span()` with None and is sent from `read()`.

`FileSpan` is the local-file source: a duplicate of the segment file's descriptor, so
the segment may be closed, renamed or deleted before the answer is sent. Broker-wide
at most MAX_OPEN_SPANS are open at once (then reads copy the bytes instead).

Thread safety: a source is used by one request at a time; the span count is locked.
"""

from __future__ import annotations

import os
import threading
import weakref

from protocol.api_types import LocalRecords
from protocol.batch import BOTH_LAYOUTS

__all__ = ["MAX_OPEN_SPANS", "FileSpan", "RecordSource", "open_span_count"]

# Segment descriptors held by spans not yet sent, broker-wide: 16 queued answers of
# many partitions must not exhaust the process's descriptors (then reads copy again).
MAX_OPEN_SPANS = 256


class RecordSource:
    """Whole batches of one read, ready to send as they are (a plain base class, not
    an ABC: the fetch path's `isinstance` checks stay cheap)."""

    __slots__ = ()

    length: int
    record_count: int
    # The layouts of its batches, a bitmask of `1 << magic` (protocol.batch's
    # TIDELOG_BATCHES, KAFKA_BATCHES): a reader converts only what it must.
    layouts: int = BOTH_LAYOUTS

    def __len__(self) -> int:
        return self.length

    def read(self) -> bytes:
        """The records themselves (for a stream that is not a socket, or a converter);
        OSError if they cannot be read."""
        raise NotImplementedError

    def close(self) -> None:
        """Release what the source holds; safe to call more than once."""
        raise NotImplementedError

    def file_span(self) -> tuple[int, int, int] | None:
        """(fd, position, length) for `sendfile`, or None: send `read()` instead."""
        return None

    def local_records(self) -> LocalRecords | None:
        """Where a client on this host may read the records itself, or None."""
        return None


_spans_lock = threading.Lock()
_open_spans = 0


def _span_closed() -> None:
    global _open_spans
    with _spans_lock:
        _open_spans -= 1


def _reserve_span() -> bool:
    global _open_spans
    with _spans_lock:
        if _open_spans >= MAX_OPEN_SPANS:
            return False
        _open_spans += 1
        return True


def open_span_count() -> int:
    """Spans whose descriptor is still open (tests, and a leak would show here)."""
    return _open_spans


def _close_fd(fd: int) -> None:
    try:
        os.close(fd)
    finally:
        _span_closed()


class FileSpan(RecordSource):
    """`length` bytes at `position` of a local segment file, through a descriptor the
    span owns: closed by `close()`, or when the span is dropped unsent. Made by
    `FileSpan.of`, which counts it in MAX_OPEN_SPANS."""

    __slots__ = (
        "__weakref__",
        "_finalizer",
        "fd",
        "layouts",
        "length",
        "path",
        "position",
        "record_count",
    )

    def __init__(
        self,
        fd: int,
        position: int,
        length: int,
        record_count: int,
        path: str = "",
        layouts: int = BOTH_LAYOUTS,
    ) -> None:
        self.fd, self.position, self.length = fd, position, length
        self.record_count, self.layouts = record_count, layouts
        self.path = path  # the segment file's absolute path, for local reads
        self._finalizer = weakref.finalize(self, _close_fd, fd)

    @classmethod
    def of(
        cls,
        fd: int,
        position: int,
        length: int,
        record_count: int,
        path: str = "",
        layouts: int = BOTH_LAYOUTS,
    ) -> FileSpan | None:
        """A span over a duplicate of `fd`; None when MAX_OPEN_SPANS are open already
        or the descriptor cannot be duplicated (the caller copies the bytes instead)."""
        if not _reserve_span():
            return None
        try:
            own_fd = os.dup(fd)
        except OSError:
            _span_closed()
            return None
        return cls(own_fd, position, length, record_count, path, layouts)

    def close(self) -> None:
        self._finalizer()

    def file_span(self) -> tuple[int, int, int]:
        return self.fd, self.position, self.length

    def local_records(self) -> LocalRecords:
        """Where the records lie, for a client on this host that reads the segment file
        itself (docs/protocol.md §9, local reads); the inode identifies the file even if
        the path is renamed or replaced before the client opens it."""
        stat = os.fstat(self.fd)
        return {
            "path": os.path.abspath(self.path),
            "device": stat.st_dev,
            "inode": stat.st_ino,
            "position": self.position,
            "length": self.length,
            "record_count": self.record_count,
        }

    def read(self) -> bytes:
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"segment file shorter than the span ({len(data)} < {self.length})")
        return data
