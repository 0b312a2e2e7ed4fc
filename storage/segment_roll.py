"""When the active segment must roll before it takes a chunk: Kafka's rules
(`LogSegment.shouldRoll`), checked once per append under the log's lock.

Apart from storage.segment because it is policy over a segment's state (its
size, first-batch time, jitter, index room), not something the file does; the
per-segment jitter is drawn when the segment is made (`random_jitter_ms`, kept
beside `Segment.create`).
"""

from __future__ import annotations

from storage.config import INT_MAX, LogConfig
from storage.segment import Segment

__all__ = ["should_roll", "time_waited_ms"]


def should_roll(
    segment: Segment,
    config: LogConfig,
    *,
    chunk_bytes: int,
    chunk_max_timestamp: int,
    chunk_last_offset: int,
    now_ms: int,
) -> str | None:
    """Why `segment` must roll before taking the chunk, or None."""
    if segment.size == 0:
        return None  # an empty segment takes any chunk; rolling it would recreate itself
    if segment.size > config.segment_bytes - chunk_bytes:
        return "size"
    if time_waited_ms(segment, now_ms, chunk_max_timestamp) > (
        config.max_segment_ms - segment.roll_jitter_ms
    ):
        return "time"
    if segment.offset_index.is_full():
        return "offset_index_full"
    if segment.time_index.is_full():
        return "time_index_full"
    if chunk_last_offset - segment.base_offset > INT_MAX:
        return "relative_offset_overflow"
    return None


def time_waited_ms(segment: Segment, now_ms: int, timestamp: int) -> int:
    """Record time since the first batch, or wall time since creation without one."""
    if segment.rolling_based_timestamp >= 0:
        return timestamp - segment.rolling_based_timestamp
    return now_ms - segment.created_ms
