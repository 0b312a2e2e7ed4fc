"""Time lookups inside one segment: ListOffsets by timestamp and the offset of the
largest timestamp (Kafka's `LogSegment.findOffsetByTimestamp`).

Kept apart from storage.segment because they are the only segment reads that
decode records (the time index and the batch headers only narrow the search;
a batch's per-record timestamps decide), and they serve admin-rate requests,
never the append or fetch path. Callers hold no lock: like every read they see
the segment up to the size it had when they looked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from protocol.batch import (
    KAFKA_MAGIC,
    TIMESTAMP_TYPE_MASK,
    HeaderFields,
    decode_payload,
    max_decompressed_bytes,
)
from protocol.errors import CorruptMessage
from protocol.kafka.errors import KafkaCodecError
from protocol.kafka.validate import decode_batch
from storage.segment import Segment
from storage.segment_walk import BatchPosition, find_batch, iter_batches

__all__ = [
    "find_offset_by_timestamp",
    "first_offset_with_timestamp",
    "max_timestamp_offset",
    "offset_for_timestamp",
]


def offset_for_timestamp(
    segments: Sequence[Segment], timestamp: int, start: int, hw: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after `start` in `segments` with a
    timestamp >= `timestamp` (the time index only narrows where the scan starts).
    OSError for I/O errors."""
    for segment in segments:
        if segment.max_timestamp < timestamp or segment.next_offset <= start:
            continue
        found = find_offset_by_timestamp(segment, timestamp, start, hw)
        if found is not None:
            return found
    return None


def max_timestamp_offset(segments: Sequence[Segment], start: int) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after `start` holding the largest
    timestamp of `segments` (ListOffsets' max timestamp). OSError for I/O errors."""
    best: Segment | None = None
    for segment in segments:
        if segment.next_offset > start and (
            best is None or segment.max_timestamp > best.max_timestamp
        ):
            best = segment
    if best is None or best.max_timestamp < 0 or best.offset_of_max_timestamp < 0:
        return None
    offset = first_offset_with_timestamp(best, best.offset_of_max_timestamp, best.max_timestamp)
    return None if offset is None else (max(offset, start), best.max_timestamp)


def find_offset_by_timestamp(
    segment: Segment, timestamp: int, start_offset: int, end_offset: int
) -> tuple[int, int] | None:
    """First (offset, timestamp) in [start_offset, end_offset) with timestamp >= `timestamp`."""
    _, index_offset = segment.time_index.lookup(timestamp)
    _, position = segment.offset_index.lookup(max(index_offset, start_offset))
    for batch in iter_batches(segment, position, segment.size, segment.fence):
        if batch.base_offset >= end_offset:
            return None
        if batch.max_timestamp < timestamp or batch.last_offset < start_offset:
            continue
        for record_offset, record_ts in _record_times(segment, batch):
            if start_offset <= record_offset < end_offset and record_ts >= timestamp:
                return record_offset, record_ts
    if segment.fence_position is not None:
        # The walk ended at a fenced range the answer may lie in (the segment's
        # timestamps said it holds one): say so, rather than "none" here and a
        # later segment's offset from the caller.
        raise segment.fenced_error(f"timestamp {timestamp}")
    return None


def first_offset_with_timestamp(segment: Segment, offset_hint: int, timestamp: int) -> int | None:
    """Offset of the first record with `timestamp` in the batch holding `offset_hint`."""
    batch = find_batch(segment, offset_hint)
    if batch is None:
        return None
    for record_offset, record_ts in _record_times(segment, batch):
        if record_ts == timestamp:
            return record_offset
    return None


def _record_times(segment: Segment, batch: BatchPosition) -> list[tuple[int, int]]:
    """(offset, timestamp) of each record of one batch (LogAppendTime: the batch's),
    of either layout."""
    data = segment.pread(batch.size, batch.position)
    cap = max_decompressed_bytes(batch.size)
    header: HeaderFields
    records: Sequence[Sequence[Any]]
    if batch.magic == KAFKA_MAGIC:
        try:
            header, records = decode_batch(data, max_decompressed=cap)
        except KafkaCodecError as exc:
            raise CorruptMessage(
                f"{segment.log_path}: batch at byte {batch.position}: {exc.message}"
            ) from exc
    else:
        header, records = decode_payload(data, max_decompressed=cap)
    base, base_ts = header.base_offset, header.base_timestamp
    try:
        if header.attributes & TIMESTAMP_TYPE_MASK:
            return [(base + record[0], batch.max_timestamp) for record in records]
        return [(base + record[0], base_ts + record[1]) for record in records]
    except (TypeError, IndexError) as exc:
        raise CorruptMessage(
            f"{segment.log_path}: batch at byte {batch.position} is malformed"
        ) from exc
