"""Grouping the segments to recopy so each cleaned segment stays within its limits.

Kafka's `LogCleaner.groupSegmentsBySize`: walk the segments in order; a group takes the
next segment while the group's summed log size stays <= `segment.bytes`, its summed
offset-index and time-index sizes each stay <= `segment.index.bytes`, and its offsets
still fit a 32-bit relative offset from the group's base. Each group becomes one new
segment named after its first segment's base offset. A segment larger than the limits
on its own still forms a group of one (cleaning only ever shrinks it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["GroupableSegment", "group_segments", "index_bytes_estimate"]

# Relative offsets in the offset index are int32.
MAX_RELATIVE_OFFSET = 2**31 - 1
OFFSET_INDEX_ENTRY_BYTES = 8
TIME_INDEX_ENTRY_BYTES = 12


@dataclass(frozen=True, slots=True)
class GroupableSegment:
    """Sizes of one segment as grouping sees them; `next_offset` = next segment's base."""

    base_offset: int
    next_offset: int
    size_bytes: int
    offset_index_bytes: int
    time_index_bytes: int


def index_bytes_estimate(size_bytes: int, index_interval_bytes: int) -> tuple[int, int]:
    """Upper bound of (offset index, time index) bytes for a log of `size_bytes`.

    One entry per `index.interval.bytes` of log, plus the first batch's.
    """
    entries = size_bytes // max(index_interval_bytes, 1) + 1 if size_bytes else 0
    return entries * OFFSET_INDEX_ENTRY_BYTES, entries * TIME_INDEX_ENTRY_BYTES


def group_segments(
    segments: Sequence[GroupableSegment], *, max_segment_bytes: int, max_index_bytes: int
) -> list[list[GroupableSegment]]:
    """Split `segments` (in offset order) into consecutive groups within the limits."""
    groups: list[list[GroupableSegment]] = []
    i = 0
    while i < len(segments):
        first = segments[i]
        group = [first]
        log_bytes = first.size_bytes
        offset_index = first.offset_index_bytes
        time_index = first.time_index_bytes
        i += 1
        while i < len(segments):
            nxt = segments[i]
            if (
                log_bytes + nxt.size_bytes > max_segment_bytes
                or offset_index + nxt.offset_index_bytes > max_index_bytes
                or time_index + nxt.time_index_bytes > max_index_bytes
                or nxt.next_offset - 1 - first.base_offset > MAX_RELATIVE_OFFSET
            ):
                break
            group.append(nxt)
            log_bytes += nxt.size_bytes
            offset_index += nxt.offset_index_bytes
            time_index += nxt.time_index_bytes
            i += 1
        groups.append(group)
    return groups
