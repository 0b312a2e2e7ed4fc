"""Which part of a log is clean, which is cleanable, and which log to clean first.

Pure arithmetic over segment metadata (Kafka's `LogCleanerManager.cleanableOffsets`,
`calculateCleanableBytes`, `maxCompactionDelay` and `grabFilthiestCompactedLog`), so
every boundary can be tested without a file:

- the *clean* section ends at the cleaner checkpoint (reset to the log start offset
  when it is out of range);
- the *cleanable* section ends at the first uncleanable offset: the active segment,
  the high watermark, and the first segment still inside `min.compaction.lag.ms`,
  aligned down to a segment start (a segment is cleaned whole or not at all);
- dirty ratio = cleanable bytes / (clean + cleanable bytes).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

__all__ = [
    "CleanableRange",
    "LogToClean",
    "SegmentView",
    "choose_filthiest",
    "cleanable_range",
    "is_eligible",
    "max_compaction_delay_ms",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class SegmentView:
    """What the cleaner needs to know about one segment, in log order.

    `first_batch_timestamp_ms` is the max timestamp of the segment's first batch
    (Kafka's `getFirstBatchTimestamp`), -1 when the segment is empty or unknown.
    """

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    first_batch_timestamp_ms: int = -1
    is_active: bool = False


@dataclass(frozen=True, slots=True)
class CleanableRange:
    """The clean and cleanable sections of one log, as Kafka measures them.

    `checkpoint_reset` says the stored checkpoint was out of range and replaced by the
    log start offset (the caller rewrites the checkpoint then).
    """

    first_dirty_offset: int
    first_uncleanable_offset: int
    clean_bytes: int
    cleanable_bytes: int
    checkpoint_reset: bool

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def dirty_ratio(self) -> float:
        """Cleanable / (clean + cleanable); 0 for a log with nothing to measure."""
        total = self.total_bytes
        return self.cleanable_bytes / total if total else 0.0


def _segment_index_of(segments: Sequence[SegmentView], offset: int) -> int:
    """Index of the segment containing `offset` (the last one whose base <= offset), or 0."""
    found = 0
    for i, segment in enumerate(segments):
        if segment.base_offset <= offset:
            found = i
        else:
            break
    return found


def cleanable_range(
    segments: Sequence[SegmentView],
    *,
    log_start_offset: int,
    log_end_offset: int,
    high_watermark: int,
    checkpoint: int | None,
    now_ms: int,
    min_compaction_lag_ms: int,
) -> CleanableRange:
    """Measure the clean and cleanable sections of a log (segments in offset order).

    The last segment must be the active one; it is never cleanable.
    """
    if not segments:
        return CleanableRange(log_start_offset, log_start_offset, 0, 0, checkpoint is not None)
    reset = checkpoint is None or not (log_start_offset <= checkpoint <= log_end_offset)
    first_dirty = log_start_offset if reset else checkpoint
    assert first_dirty is not None
    active = segments[-1]
    bound = min(high_watermark, active.base_offset)
    first = _segment_index_of(segments, first_dirty)
    if min_compaction_lag_ms > 0:
        too_recent_ms = now_ms - min_compaction_lag_ms
        for segment in segments[first:-1]:
            if segment.largest_timestamp_ms > too_recent_ms:
                bound = min(bound, segment.base_offset)
                break
    first_uncleanable_dirty = max(first_dirty, bound)
    # Align down to the start of the segment containing it: a segment is cleaned whole.
    aligned = active.base_offset
    if first_uncleanable_dirty < active.base_offset:
        aligned = segments[_segment_index_of(segments, first_uncleanable_dirty)].base_offset
    clean_bytes = sum(s.size_bytes for s in segments if s.base_offset < first_dirty)
    cleanable_bytes = sum(
        s.size_bytes for s in segments[first:] if s.base_offset < aligned and not s.is_active
    )
    return CleanableRange(
        first_dirty_offset=first_dirty,
        first_uncleanable_offset=aligned,
        clean_bytes=clean_bytes,
        cleanable_bytes=cleanable_bytes,
        checkpoint_reset=reset and checkpoint is not None,
    )


def max_compaction_delay_ms(
    segments: Sequence[SegmentView],
    *,
    first_dirty_offset: int,
    now_ms: int,
    max_compaction_lag_ms: int,
) -> int:
    """How long past `max.compaction.lag.ms` the oldest dirty record is (0 if not).

    Looks at the first-batch timestamps (> 0 only) of the dirty, non-active segments.
    A positive delay forces a cleaning whatever the dirty ratio.
    """
    first = _segment_index_of(segments, first_dirty_offset)
    stamps = [
        s.first_batch_timestamp_ms
        for s in segments[first:]
        if not s.is_active and s.first_batch_timestamp_ms > 0
    ]
    if not stamps:
        return 0
    clean_until_ms = now_ms - max(max_compaction_lag_ms, 0)
    earliest = min(stamps)
    return clean_until_ms - earliest if earliest < clean_until_ms else 0


@dataclass(frozen=True, slots=True)
class LogToClean(Generic[T]):
    """A candidate log with its measured sections; `log` is whatever the caller tracks."""

    log: T
    range: CleanableRange
    compaction_delay_ms: int
    min_cleanable_dirty_ratio: float

    @property
    def dirty_ratio(self) -> float:
        return self.range.dirty_ratio

    @property
    def needs_compaction_now(self) -> bool:
        return self.compaction_delay_ms > 0


def is_eligible(candidate: LogToClean[T]) -> bool:
    """Kafka's gate: forced by max lag with something to clean, or ratio strictly above min."""
    if candidate.range.total_bytes == 0:
        return False
    forced = candidate.needs_compaction_now and candidate.range.cleanable_bytes > 0
    return forced or candidate.dirty_ratio > candidate.min_cleanable_dirty_ratio


def choose_filthiest(candidates: Sequence[LogToClean[T]]) -> LogToClean[T] | None:
    """The eligible candidate with the largest dirty ratio (first one on ties), or None."""
    best: LogToClean[T] | None = None
    for candidate in candidates:
        if is_eligible(candidate) and (best is None or candidate.dirty_ratio > best.dirty_ratio):
            best = candidate
    return best
