"""What start-up does to one segment this process did not write: read its metadata,
check its indexes belong to it, and rescan it when they do not or its tail is torn
(Kafka's `LogSegment.recover` and `sanityCheck`, driven by storage.recovery).

Kept apart from storage.segment because it runs once per segment and start, and
trusts nothing the files say: it checks every CRC and offset, rebuilds both indexes
and decides between cutting a torn tail and fencing damage. A segment appended by
this process needs none of it (its batches were validated on produce).
Thread safety: a partition directory is loaded by one thread, before any reader.

After a crash the tail of an active segment may hold a torn batch and its
preallocated indexes entries for bytes that never reached the file: `recover`
rescans and truncates it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from protocol.batch import (
    ANY_LAYOUT,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    HEADER_SIZE,
)
from storage import failpoints
from storage.config import INT_MAX, LogConfig
from storage.fileio import FileIO
from storage.index import CorruptIndexError, index_entry_due
from storage.scan import SegmentScan
from storage.segment import Segment
from storage.segment_walk import iter_batches

__all__ = ["RecoveryResult", "load_metadata", "open_segment", "recover", "sanity_check"]

# How many bytes a recovery scan checks per read: large enough to amortise pread.
RECOVERY_READ_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    bad_position: int | None  # first byte that failed, or None
    reason: str


def open_segment(
    directory: Path, base_offset: int, io: FileIO, config: LogConfig, *, now_ms: int
) -> Segment:
    """Open an existing segment; its indexes are taken as they are (check them after)."""
    segment = Segment.open_existing(directory, base_offset, io, config, now_ms=now_ms)
    load_metadata(segment)
    return segment


def load_metadata(segment: Segment) -> None:
    """next_offset, max timestamp and rolling timestamp from the indexes and a short scan
    from the last offset entry; `tail_is_whole` False when that scan did not end at the
    file's end (recovery rescans the segment)."""
    if segment.size == 0:
        return
    data = segment.pread(ANY_LAYOUT.max_size, 0)
    whole = len(data) >= HEADER_SIZE and len(data) >= ANY_LAYOUT.header_bytes(data)
    first = ANY_LAYOUT.unpack_from(data) if whole else None
    segment.rolling_based_timestamp = first[F_MAX_TIMESTAMP] if first is not None else -1
    base, offset_index, time_index = segment.base_offset, segment.offset_index, segment.time_index
    segment.max_timestamp, segment.offset_of_max_timestamp = time_index.last_entry()
    if time_index.entries == 0:
        segment.offset_of_max_timestamp = -1
    _, start = offset_index.lookup(offset_index.last_offset())
    start = start if start < segment.size else 0
    segment.next_offset = max(segment.next_offset, base)
    end, layouts = start, 0
    for batch in iter_batches(segment, start, segment.size):
        layouts |= 1 << batch.magic
        if batch.base_offset < segment.next_offset or batch.last_offset - base > INT_MAX:
            break  # not the next batch of this segment: recovery rescans from here
        segment.next_offset = batch.last_offset + 1
        end = batch.position + batch.size
        if batch.max_timestamp > segment.max_timestamp:
            segment.max_timestamp = batch.max_timestamp
            segment.offset_of_max_timestamp = batch.last_offset
    segment.tail_is_whole = end == segment.size
    if start == 0 and segment.tail_is_whole:
        segment.verified_bytes, segment.layouts = end, layouts


def sanity_check(segment: Segment, *, thorough: bool) -> None:
    """Raise CorruptIndexError when an index cannot belong to this segment's log.

    The quick form (after a clean shutdown) checks the last entries only, as
    Kafka does; the thorough form checks every entry is in order.
    """
    oi, ti = segment.offset_index, segment.time_index
    for index in (oi, ti):
        if index.misaligned:
            raise CorruptIndexError(f"{index.path}: length is not whole entries")
    if thorough:
        oi.sanity_check(segment.size)
        ti.sanity_check(segment.next_offset)
        return
    if oi.entries:
        last_offset, last_pos = oi.lookup(oi.last_offset())
        if last_offset < segment.base_offset or last_pos >= max(segment.size, 1):
            raise CorruptIndexError(f"{oi.path}: last entry points outside the log")
    if ti.entries:
        last_ts, last_offset = ti.last_entry()
        if last_ts < ti.first_timestamp() or last_offset < segment.base_offset:
            raise CorruptIndexError(f"{ti.path}: entries out of order")


def recover(segment: Segment, config: LogConfig, *, fence_below_offset: int) -> RecoveryResult:
    """Rescan every batch (length, CRC, offsets), rebuild both indexes, handle a bad tail.

    A bad batch at an offset >= `fence_below_offset` (the recovery point) is a
    torn tail: the file is truncated there. One below it held acknowledged,
    flushed data: the segment is fenced from that byte and nothing is cut.
    """
    offset_index, time_index = segment.offset_index, segment.time_index
    offset_index.reset()
    time_index.reset()
    segment.max_timestamp, segment.offset_of_max_timestamp = -1, -1
    segment.rolling_based_timestamp = -1
    segment.fence_position = None
    next_offset, since_entry = segment.base_offset, 0
    layouts = 0
    bad_reason = ""
    file_size = segment.file_size()
    scan = SegmentScan(segment.pread, 0, file_size, block_bytes=RECOVERY_READ_BYTES, crc=True)
    for batch in scan:
        fields = batch.fields
        bad_reason = _misfit(fields, next_offset, segment.base_offset)
        if bad_reason:
            scan.position = batch.position
            break
        last_offset = fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA]
        batch_max_ts = fields[F_MAX_TIMESTAMP]
        layouts |= 1 << fields[F_MAGIC]
        if batch.position == 0:
            segment.rolling_based_timestamp = batch_max_ts
        if batch_max_ts > segment.max_timestamp:
            segment.max_timestamp, segment.offset_of_max_timestamp = batch_max_ts, last_offset
        # Kafka's rebuild rule: an entry when the bytes before this batch since
        # the last entry exceed index.interval.bytes.
        if index_entry_due(since_entry, config.index_interval_bytes):
            if offset_index.is_full() or time_index.entries >= time_index.capacity:
                # The file is shorter than the rebuild (deleted, cut, or written
                # one entry per multi-batch append): grow it as an active index,
                # else the rest of the segment gets no entries. Trimmed at build.
                # (A trimmed time index is "full" one entry early, keeping the
                # slot become_inactive fills: that alone is no reason to grow.)
                segment.resize_indexes(config.segment_index_bytes)
            offset_index.append(last_offset, batch.position)
            time_index.maybe_append(segment.max_timestamp, segment.offset_of_max_timestamp)
            since_entry = 0
        since_entry += batch.size
        next_offset = last_offset + 1
    else:
        bad_reason = scan.problem or ""
    position = scan.position
    segment.bytes_since_last_index_entry = since_entry
    segment.next_offset = next_offset
    segment.verified_bytes, segment.layouts = position, layouts
    segment.size = file_size
    if position >= file_size:
        return RecoveryResult(file_size, 0, next_offset, None, "")
    if next_offset < fence_below_offset:
        segment.fence_position = position
        segment.fence_reason = bad_reason
        return RecoveryResult(position, 0, next_offset, position, bad_reason)
    truncated = segment.truncate_at(position, next_offset, recompute=False)
    failpoints.hit("recovery.after_truncate")
    return RecoveryResult(position, truncated, next_offset, position, bad_reason)


def _misfit(fields: tuple[int, ...], expected_offset: int, base_offset: int) -> str:
    """Why a CRC-valid batch cannot come next in this segment ("" when it can)."""
    base, delta = fields[F_BASE_OFFSET], fields[F_LAST_OFFSET_DELTA]
    if base < expected_offset or delta < 0:
        return f"offset {base} does not follow {expected_offset - 1}"
    if base + delta - base_offset > INT_MAX:
        return f"offset {base + delta} overflows the segment"
    return ""
