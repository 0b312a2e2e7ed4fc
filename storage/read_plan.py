"""A located read made into what the network layer sends: whole batches, fenced.

`Segment.extent` says where a read lies: bytes [position, stop) of one segment that
begin with the batch holding the offset, and whether they end on a batch boundary
(`whole`). Here that range becomes the answer: `bytes` for a small read, a
`storage.record_source.FileSpan` (sent with `sendfile`) for a large one. `cut` is the
one cut to whole batches and the one place a read fences damage: a header walk
(storage.scan) over bytes already read, or over the file's headers alone for a span;
a header that cannot be valid fences the segment there (`Segment.fence`) and the
answer stops before it; damage at the read's first batch raises CorruptMessage.

A segment that is not a local file (a tiered one) answers with a `RecordSource` of its
own; nothing above storage walks or cuts batches.

Thread safety: as `Segment`'s readers: positional reads of a size seen under the
log's lock; fencing is serialised by `Segment.fence`.
"""

from __future__ import annotations

from protocol.batch import F_MAGIC, F_RECORD_COUNT
from storage.fileio import ReadWouldWait
from storage.record_source import FileSpan, RecordSource
from storage.scan import Pread, SegmentScan
from storage.segment import Segment
from storage.segment_walk import culprit

__all__ = ["HEADER_SCAN_BYTES", "SENDFILE_MIN_BYTES", "cut", "read_bytes", "read_records"]

# Reads shorter than this are copied into the answer: two thread hops and a
# sendfile cost more than copying 64 KiB.
SENDFILE_MIN_BYTES = 64 * 1024
# A span's batch headers are walked with reads of this size while batches are small;
# after a batch bigger than a quarter of it, the next header is read alone.
HEADER_SCAN_BYTES = 64 * 1024


def read_bytes(segment: Segment, position: int, stop: int, whole: bool) -> tuple[bytes, int]:
    """The whole batches of bytes [position, stop) of `segment`, read into memory, and
    the layouts they are in (a bitmask: `protocol.batch.TIDELOG_BATCHES`, ...; more
    bits than there are layouts is allowed, fewer never).

    Headers outside `verified_bytes` are walked (one struct read per batch); bytes
    this process appended or already walked are served as they are."""
    if stop == position:
        return b"", 0
    data = segment.pread(stop - position, position)
    if whole and stop <= segment.verified_bytes:
        return data, segment.layouts
    length, _, layouts = cut(segment, position, stop, whole, data=data)
    return (data if length == len(data) else data[:length]), layouts


def read_records(
    segment: Segment, position: int, stop: int, whole: bool, *, max_batches: int | None = None
) -> tuple[bytes | RecordSource, int]:
    """The whole batches of [position, stop), and their layouts: read when small, else
    a span of the file found from headers only (the bytes when no span can be had).
    More than `max_batches` headers to walk raise ReadWouldWait before anything is
    built."""
    if stop - position < SENDFILE_MIN_BYTES:
        return read_bytes(segment, position, stop, whole)
    length, count, layouts = cut(segment, position, stop, whole, max_batches=max_batches)
    span = (
        FileSpan.of(segment.fd, position, length, count, str(segment.log_path), layouts)
        if length >= SENDFILE_MIN_BYTES
        else None
    )
    return (segment.pread(length, position) if span is None else span), layouts


def cut(
    segment: Segment,
    position: int,
    stop: int,
    whole: bool,
    *,
    data: bytes | None = None,
    max_batches: int | None = None,
) -> tuple[int, int, int]:
    """(bytes, records, layouts) of the whole, plausible batches from `position` up to
    `stop` (layouts: the bitmask of `1 << magic` of the batches walked).

    Walks `data` (the bytes of [position, stop), already read) or, without it, the
    file's headers: a block of small batches at a time, one header alone after a big
    batch (an 8 MiB answer of 110 KB batches reads ~4 KB). A header that cannot be
    (wrong magic, a length below the minimum, a cut at `stop` when `whole`) is damage:
    fenced, and the answer ends before it. Raises CorruptMessage for damage at
    `position`, ReadWouldWait past `max_batches` batches, OSError for I/O errors.
    """
    pread: Pread
    if data is None:
        pread, block = segment.pread, HEADER_SCAN_BYTES
    else:
        view = memoryview(data)
        pread, block = (lambda size, at: view[at - position : at - position + size]), len(data)
    scan = SegmentScan(pread, position, stop, block_bytes=block, whole=whole)
    records = layouts = 0
    for walked, batch in enumerate(scan, 1):
        if max_batches is not None and walked > max_batches:
            raise ReadWouldWait(f"more than {max_batches} batch headers to walk")
        fields = batch.fields
        records += fields[F_RECORD_COUNT]
        layouts |= 1 << fields[F_MAGIC]
    if scan.problem is None:
        if position <= segment.verified_bytes < scan.position:
            segment.layouts |= layouts
            segment.verified_bytes = scan.position
        return scan.position - position, records, layouts
    previous = scan.previous
    segment.fence(culprit(segment, previous, scan.position), scan.problem)
    fence = scan.position if segment.fence_position is None else segment.fence_position
    if fence <= position:
        raise segment.fenced_error(f"byte {position}")
    if fence == scan.position:
        return fence - position, records, layouts
    if previous is not None and fence == previous.position:  # the batch before is damaged
        return fence - position, records - previous.fields[F_RECORD_COUNT], layouts
    return cut(segment, position, fence, True)  # fenced lower meanwhile: walk up to it
