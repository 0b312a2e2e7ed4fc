"""Fetch answers whose records go from the segment file to the socket with `sendfile`.

A fetch answer used to be read from the segment (`pread`, a copy), cut to whole
batches (a second copy), encoded into the frame (a third) and sent (a fourth, into
the kernel), each into freshly faulted-in pages. Here a large read becomes a
`RecordSpan`: a descriptor of the segment file, a position and a length, found by
reading batch headers only. The answer is framed around it
(`protocol.framing.encode_frame_parts`: the same bytes as `encode_frame`, with each
span's records left out), and `send_parts` hands
the records to `os.sendfile` in bursts from a worker thread: page cache to socket, no
copy in user space; a cold read blocks that thread, never the event loop, and the
waits for a slow reader happen on the event loop, holding no thread.

Where a read lies comes from storage (`Log.locate`: the same checks and errors as
`Log.read`); this module only decides between copying and a span, and sends.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import trio

from broker import offload
from protocol.api_types import LocalRecords
from protocol.batch import F_RECORD_COUNT, HEADER, HEADER_SIZE
from protocol.errors import CorruptMessage
from storage.fileio import ReadWouldWait
from storage.log import Extent, Log
from storage.scan import SegmentScan
from storage.segment import BatchPosition

# Reads shorter than this are copied into the answer: two thread hops and a
# sendfile cost more than copying 64 KiB.
SENDFILE_MIN_BYTES = 64 * 1024
# Segment descriptors held by spans not yet sent, broker-wide: 16 queued answers of
# many partitions must not exhaust the process's descriptors (then reads copy again).
MAX_OPEN_SPANS = 256
# Batch headers are walked with reads of this size while batches are small; after a
# batch bigger than a quarter of it, the next header is read alone.
HEADER_SCAN_BYTES = 64 * 1024


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


class RecordSpan:
    """Whole batches of one segment file: `length` bytes at `position` of `fd`.

    `fd` is a duplicate owned by the span (the segment may be closed or deleted
    before the answer is sent); it is closed by `close()`, or when the span is
    dropped unsent. Made by `RecordSpan.of`, which counts it in MAX_OPEN_SPANS.
    """

    __slots__ = (
        "__weakref__",
        "_finalizer",
        "fd",
        "length",
        "path",
        "position",
        "record_count",
    )

    def __init__(
        self, fd: int, position: int, length: int, record_count: int, path: str = ""
    ) -> None:
        self.fd, self.position, self.length = fd, position, length
        self.record_count = record_count
        self.path = path  # the segment file's absolute path, for local reads
        self._finalizer = weakref.finalize(self, _close_fd, fd)

    @classmethod
    def of(
        cls, fd: int, position: int, length: int, record_count: int, path: str = ""
    ) -> RecordSpan | None:
        """A span over a duplicate of `fd`; None when MAX_OPEN_SPANS are open already
        or the descriptor cannot be duplicated (the caller copies the bytes instead)."""
        if not _reserve_span():
            return None
        try:
            own_fd = os.dup(fd)
        except OSError:
            _span_closed()
            return None
        return cls(own_fd, position, length, record_count, path)

    def __len__(self) -> int:
        return self.length

    def close(self) -> None:
        self._finalizer()

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
        """The records themselves (for a stream that is not a socket)."""
        data = os.pread(self.fd, self.length, self.position)
        if len(data) != self.length:
            raise OSError(f"segment file shorter than the span ({len(data)} < {self.length})")
        return data


@dataclass(frozen=True, slots=True)
class Located:
    """What `Log.read` answers, with the records as bytes or as a span of the file."""

    records: bytes | RecordSpan
    high_watermark: int
    log_start_offset: int


def locate_records(
    plog: Log,
    offset: int,
    max_bytes: int,
    *,
    min_one: bool = True,
    max_batches: int | None = None,
) -> Located:
    """`Log.read(offset, max_bytes, min_one=)`, with a large answer as a `RecordSpan`.

    Same batches, same errors (`Log.locate` checks the range and the fences):
    OffsetOutOfRange outside [log start, high watermark], CorruptMessage for a fenced
    range, StorageError for I/O errors. With `max_batches`, a span whose header walk
    would pass more batches raises ReadWouldWait before building anything (the event
    loop's budget; see `broker.handlers.fetch`).
    """
    located = plog.locate(offset, max_bytes, min_one=min_one)
    extent = located.extent
    records = b"" if extent is None else _records(extent, max_batches)
    return Located(records, located.high_watermark, located.log_start_offset)


def _records(extent: Extent, max_batches: int | None = None) -> bytes | RecordSpan:
    """The extent's whole batches: read when small, else a span found from headers only."""
    if extent.stop - extent.position < SENDFILE_MIN_BYTES:
        return extent.read()
    length, count = _whole_batches(extent, extent.position, extent.stop, max_batches)
    span = (
        RecordSpan.of(extent.fd, extent.position, length, count, str(extent.path))
        if length >= SENDFILE_MIN_BYTES
        else None
    )
    return extent.pread(length, extent.position) if span is None else span


def _whole_batches(
    extent: Extent, position: int, stop: int, max_batches: int | None = None
) -> tuple[int, int]:
    """(bytes, records) of the whole batches from `position` up to byte `stop`.

    Reads headers only: a block of small batches at a time, or one header alone
    after a big batch, so an 8 MiB answer of 110 KB batches reads ~4 KB. A header
    that cannot be (wrong magic, a length below the minimum, or past the segment's
    end when the extent reaches it) is damage: the segment is fenced there (see
    `Segment.fence`) and the answer stops before it; damage at `position` raises
    CorruptMessage. More than `max_batches` batches raise ReadWouldWait.
    """
    scan = SegmentScan(
        extent.pread, position, stop, block_bytes=HEADER_SCAN_BYTES, whole=extent.whole
    )
    records = 0
    for walked, batch in enumerate(scan, 1):
        if max_batches is not None and walked > max_batches:
            raise ReadWouldWait(f"more than {max_batches} batch headers to walk")
        records += batch.fields[F_RECORD_COUNT]
    if scan.problem is not None:
        previous = scan.previous
        before = (
            None if previous is None else BatchPosition(previous.position, previous.size, 0, 0, 0)
        )
        return _fenced(extent, before, scan.position, position, records)
    return scan.position - position, records


def _fenced(
    extent: Extent, previous: BatchPosition | None, bad: int, position: int, records: int
) -> tuple[int, int]:
    """Fence the segment at the damage a header walk found; (bytes, records) before it."""
    segment = extent.segment
    at = segment.culprit(previous, bad)
    segment.fence(at, "a batch header a fetch walked into cannot be valid")
    if at <= position:
        raise CorruptMessage(f"{extent.path}: the batch at byte {position} is damaged (fenced)")
    if at < bad and previous is not None:  # the previous batch is the damaged one
        records -= HEADER.unpack_from(extent.pread(HEADER_SIZE, previous.position))[F_RECORD_COUNT]
    return at - position, records


# --- framing ------------------------------------------------------------------

# Parts of one frame, in order: bytes as they are, spans sent from their file (a
# frame without spans is bytes only: a large one's header and body).
FrameParts = list[bytes] | list[bytes | RecordSpan]


def spans_of_fetch(body: Mapping[str, Any]) -> list[RecordSpan]:
    """The spans of a fetch response body, in the order they are encoded."""
    topics = body.get("topics")
    if not isinstance(topics, list):
        return []
    return [
        part["records"]
        for topic in topics
        if isinstance(topic, dict)
        for part in topic.get("partitions", ())
        if isinstance(part, dict) and isinstance(part.get("records"), RecordSpan)
    ]


def memory_bytes(parts: FrameParts) -> int:
    """Bytes the parts hold in memory (spans stay in the page cache)."""
    return sum(len(part) for part in parts if isinstance(part, bytes))


def close_parts(parts: FrameParts) -> None:
    for part in parts:
        if isinstance(part, RecordSpan):
            part.close()


# --- sending --------------------------------------------------------------------


async def send_parts(stream: trio.abc.SendStream, parts: FrameParts, timeout_s: float) -> None:
    """Send a frame's parts in order, spans with `sendfile`.

    Raises trio.BrokenResourceError if the peer is gone, trio.TooSlowError if it
    reads nothing for `timeout_s`. Every span is closed, sent or not.
    """
    sock = getattr(stream, "socket", None)
    try:
        for part in parts:
            if isinstance(part, bytes):
                with trio.fail_after(timeout_s):
                    await stream.send_all(part)
            elif sock is None:
                data = await offload.to_worker(part.read)
                with trio.fail_after(timeout_s):
                    await stream.send_all(data)
            else:
                await _sendfile(sock, part, timeout_s)
    finally:
        close_parts(parts)


async def _sendfile(sock: trio.socket.SocketType, span: RecordSpan, timeout_s: float) -> None:
    """`span` to the socket: bursts of `sendfile` in a worker thread (a cold page-cache
    read blocks that thread, not the event loop), and the waits for the peer to read
    on the event loop (a slow peer holds no thread)."""
    position, end = span.position, span.position + span.length
    while position < end:
        try:
            sent = await offload.to_worker(
                _sendfile_burst, sock.fileno(), span.fd, position, end - position
            )
        except OSError as exc:
            raise trio.BrokenResourceError(f"sendfile failed: {exc}") from exc
        if sent < 0:
            raise trio.BrokenResourceError("segment file shorter than the answer")
        position += sent
        if position < end:
            with trio.fail_after(timeout_s):
                await trio.lowlevel.wait_writable(sock.fileno())


def _sendfile_burst(sock_fd: int, file_fd: int, position: int, count: int) -> int:
    """Send from the file until done or the socket buffer is full; the bytes sent, or
    -1 if the file ended first (runs in a worker thread)."""
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(sock_fd, file_fd, position + sent, count - sent)
        except BlockingIOError:
            return sent
        if n == 0:
            return -1
        sent += n
    return sent
