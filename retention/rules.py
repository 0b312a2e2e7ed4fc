"""Kafka's segment-deletion rules as small pure functions of segment metadata.

The rules follow `UnifiedLog.deleteOldSegments` (Kafka 3.5-3.9, see
docs/retention.md "The rules") boundary for boundary:

- log start offset: a segment may go when the *next* segment's base offset is
  <= the log start offset (so it holds nothing readable);
- size: walking from the oldest segment, a segment may go only if the log stays
  >= `retention.bytes` without it (a log of exactly `retention.bytes` keeps all);
- time: a segment may go when `now - largest timestamp > retention.ms` (strict),
  the largest timestamp being the file's mtime when the segment has none;
- every rule is also subject to the high-watermark guard (`hw >= upper bound`,
  the upper bound being the next segment's base, or the log end offset for the
  last segment), never removes an empty last segment, and the walk stops at the
  first segment that may not go (no skipping: a log stays a contiguous suffix).

The rules are applied as three passes in the order log start, size, time when
`cleanup.policy` contains `delete`, only the log-start pass otherwise; each pass
sees the log left by the previous one. Nothing here touches files or clocks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Protocol

NO_TIMESTAMP = -1
"""What a segment reports as its largest timestamp when it holds no timestamps."""

POLICY_DELETE = "delete"
POLICY_COMPACT = "compact"


class SegmentMeta(Protocol):
    """The metadata the rules read; `storage.segment.SegmentInfo` has this shape."""

    @property
    def base_offset(self) -> int: ...
    @property
    def next_offset(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    @property
    def largest_timestamp_ms(self) -> int: ...
    @property
    def mtime_ms(self) -> int: ...
    @property
    def is_active(self) -> bool: ...


class RetentionConfig(Protocol):
    """Anything with the retention fields of `storage.config.LogConfig`."""

    @property
    def retention_ms(self) -> int: ...
    @property
    def retention_bytes(self) -> int: ...
    @property
    def cleanup_policy(self) -> frozenset[str]: ...


class DeleteReason(StrEnum):
    """Why a segment is deleted; the values are the `reason` of logs and metrics."""

    START_OFFSET = "start_offset"
    SIZE = "size"
    TIME = "time"


@dataclass(frozen=True, slots=True)
class RetentionSettings:
    """The config values the rules need, frozen so one pass sees one config.

    `segment_ms` and `segment_bytes` do not change any verdict; explain uses them
    to say when an active segment will roll.
    """

    retention_ms: int
    retention_bytes: int
    cleanup_policy: frozenset[str]
    segment_ms: int | None = None
    segment_bytes: int | None = None

    @classmethod
    def from_config(cls, config: RetentionConfig) -> RetentionSettings:
        return cls(
            retention_ms=config.retention_ms,
            retention_bytes=config.retention_bytes,
            cleanup_policy=frozenset(config.cleanup_policy),
            segment_ms=getattr(config, "segment_ms", None),
            segment_bytes=getattr(config, "segment_bytes", None),
        )

    @property
    def deletes(self) -> bool:
        """Size and time retention apply only when the policy contains `delete`."""
        return POLICY_DELETE in self.cleanup_policy

    @property
    def time_limited(self) -> bool:
        return self.deletes and self.retention_ms >= 0

    @property
    def size_limited(self) -> bool:
        return self.deletes and self.retention_bytes >= 0


# -- single predicates ---------------------------------------------------------------


def segment_timestamp_ms(segment: SegmentMeta) -> int:
    """The timestamp time retention compares: the largest record timestamp, or the
    file's mtime when the segment holds none (Kafka's `LogSegment.largestTimestamp`)."""
    ts = segment.largest_timestamp_ms
    return ts if ts >= 0 else segment.mtime_ms


def log_start_breached(next_base_offset: int | None, log_start_offset: int) -> bool:
    """True when everything in the segment lies below the log start offset."""
    return next_base_offset is not None and next_base_offset <= log_start_offset


def time_breached(timestamp_ms: int, now_ms: int, retention_ms: int) -> bool:
    """True when the segment's newest timestamp is strictly older than retention.ms.

    A timestamp in the future gives a negative age and is never breached.
    """
    return retention_ms >= 0 and now_ms - timestamp_ms > retention_ms


def size_excess_bytes(total_bytes: int, retention_bytes: int) -> int | None:
    """How many bytes the log may shed and stay >= retention.bytes.

    None when size retention does not apply: unlimited, or the log is below the limit.
    """
    if retention_bytes < 0 or total_bytes < retention_bytes:
        return None
    return total_bytes - retention_bytes


def size_breached(excess_bytes: int, segment_bytes: int) -> bool:
    """True when deleting the segment keeps the log >= retention.bytes."""
    return excess_bytes - segment_bytes >= 0


def high_watermark_allows(upper_bound_offset: int, high_watermark: int) -> bool:
    """Only data below the high watermark may be deleted: `hw >= upper bound`."""
    return high_watermark >= upper_bound_offset


def upper_bound_offset(segments: Sequence[SegmentMeta], index: int) -> int:
    """The next segment's base offset, or the log end offset for the last segment."""
    if index + 1 < len(segments):
        return segments[index + 1].base_offset
    return segments[index].next_offset


def is_empty_last(segments: Sequence[SegmentMeta], index: int) -> bool:
    """An empty last segment is never deleted: it is where the next append goes."""
    return index == len(segments) - 1 and segments[index].size_bytes == 0


def next_base_offset(segments: Sequence[SegmentMeta], index: int) -> int | None:
    return segments[index + 1].base_offset if index + 1 < len(segments) else None


# -- the walk ----------------------------------------------------------------------


def deletable_count(
    segments: Sequence[SegmentMeta],
    start: int,
    high_watermark: int,
    predicate: Callable[[int], bool],
) -> int:
    """How many segments from `start` on may go: the walk stops at the first that may not.

    `predicate(index)` is evaluated only after the high-watermark guard passes (as in
    Kafka, so a stateful size predicate counts only segments that got that far).
    """
    count = 0
    for index in range(start, len(segments)):
        if not high_watermark_allows(upper_bound_offset(segments, index), high_watermark):
            break
        if not predicate(index) or is_empty_last(segments, index):
            break
        count += 1
    return count


def log_start_pass(
    segments: Sequence[SegmentMeta], start: int, log_start_offset: int, high_watermark: int
) -> int:
    if start + 1 >= len(segments) or segments[start + 1].base_offset > log_start_offset:
        return 0  # the walk's first step fails: the common case, decided without the walk
    return deletable_count(
        segments,
        start,
        high_watermark,
        lambda i: log_start_breached(next_base_offset(segments, i), log_start_offset),
    )


def size_pass(
    segments: Sequence[SegmentMeta], start: int, retention_bytes: int, high_watermark: int
) -> int:
    total_bytes = sum(s.size_bytes for s in segments[start:])
    found = size_excess_bytes(total_bytes, retention_bytes)
    if found is None:
        return 0
    excess = found

    def predicate(index: int) -> bool:
        nonlocal excess
        if size_breached(excess, segments[index].size_bytes):
            excess -= segments[index].size_bytes
            return True
        return False

    return deletable_count(segments, start, high_watermark, predicate)


def time_pass(
    segments: Sequence[SegmentMeta],
    start: int,
    retention_ms: int,
    now_ms: int,
    high_watermark: int,
) -> int:
    if retention_ms < 0 or start >= len(segments):
        return 0
    if not time_breached(segment_timestamp_ms(segments[start]), now_ms, retention_ms):
        return 0  # the walk's first step fails: the common case, decided without the walk
    return deletable_count(
        segments,
        start,
        high_watermark,
        lambda i: time_breached(segment_timestamp_ms(segments[i]), now_ms, retention_ms),
    )


@dataclass(frozen=True, slots=True)
class DeletionPlan:
    """The oldest segments to delete, by reason, in the order they are applied.

    `roll_first` is set when every segment may go: the log rolls a new empty
    segment first so it keeps its end offset (Kafka's `deleteSegments`).
    """

    start_offset_count: int
    size_count: int
    time_count: int
    roll_first: bool

    @property
    def total(self) -> int:
        return self.start_offset_count + self.size_count + self.time_count

    def steps(self) -> list[tuple[DeleteReason, int]]:
        """(reason, count) for each pass that deletes something, oldest segments first."""
        steps = [
            (DeleteReason.START_OFFSET, self.start_offset_count),
            (DeleteReason.SIZE, self.size_count),
            (DeleteReason.TIME, self.time_count),
        ]
        return [(reason, count) for reason, count in steps if count > 0]


NOTHING_TO_DELETE = DeletionPlan(0, 0, 0, roll_first=False)


def plan_deletion(
    segments: Sequence[SegmentMeta],
    settings: RetentionSettings,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
) -> DeletionPlan:
    """Apply the passes in Kafka's order; each sees the segments the previous one left."""
    if not segments:
        return NOTHING_TO_DELETE
    by_start = log_start_pass(segments, 0, log_start_offset, high_watermark)
    by_size = by_time = 0
    if settings.size_limited:
        by_size = size_pass(segments, by_start, settings.retention_bytes, high_watermark)
    if settings.time_limited:
        by_time = time_pass(
            segments, by_start + by_size, settings.retention_ms, now_ms, high_watermark
        )
    total = by_start + by_size + by_time
    if total == 0:
        return NOTHING_TO_DELETE
    return DeletionPlan(by_start, by_size, by_time, roll_first=total == len(segments))
