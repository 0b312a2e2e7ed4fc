"""The cleaner manager: which log to clean next, checkpoints, failures and statistics.

Kafka's `LogCleanerManager`, synchronous and thread-safe: any number of cleaner
threads call `clean_one(cleaner)`; each grabs the filthiest eligible compacted log
that no other thread is cleaning, cleans it, and advances the log's entry in
`cleaner-offset-checkpoint` (Kafka's text format, replaced atomically) to the end
of the cleaned range. The broker's scheduler decides when to call it (backing off
`log.cleaner.backoff.ms` when nothing was cleaned) and runs it in worker threads.

A log whose cleaning raises is retried after an exponential backoff; after
`MAX_CONSECUTIVE_FAILURES` failures in a row it is marked uncleanable, reported in
the statistics and skipped until the broker restarts or the log is recreated.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from compaction.choice import (
    LogToClean,
    SegmentView,
    choose_filthiest,
    cleanable_range,
    max_compaction_delay_ms,
)
from compaction.cleaner import Cleaner, CleaningAborted, CleaningResult
from compaction.ports import CleanableLog
from storage import (
    CLEANER_OFFSET_CHECKPOINT,
    LONG_MAX,
    FileIO,
    read_checkpoint,
    write_checkpoint,
)

__all__ = ["MAX_CONSECUTIVE_FAILURES", "CleanerManager", "CleanerStatistics", "LogCleanerState"]

log = structlog.get_logger("tidelog.compaction")

# Failures in a row before a log is marked uncleanable: one transient disk error
# should not disable compaction, a deterministic bug should not loop forever.
MAX_CONSECUTIVE_FAILURES = 3
# Cap of the retry backoff after a failure (ms), so a recovered disk is used again soon.
MAX_FAILURE_BACKOFF_MS = 10 * 60 * 1000

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class LogCleanerState:
    """Per-log figures for metrics: last measured dirty ratio and compaction delay."""

    dirty_ratio: float
    compaction_delay_ms: int
    cleanable_bytes: int
    uncleanable: bool


@dataclass(frozen=True, slots=True)
class CleanerStatistics:
    """A snapshot of the cleaner for metrics and logs (docs/style.md item 11)."""

    cleanings_total: int
    failures_total: int
    aborted_total: int
    bytes_read_total: int
    bytes_written_total: int
    records_kept_total: int
    records_removed_total: int
    max_dirty_ratio: float
    max_compaction_delay_ms: int
    last_map_utilization: float
    last_duration_s: float
    logs: dict[TopicPartition, LogCleanerState]
    uncleanable: tuple[TopicPartition, ...]
    last_result: CleaningResult | None


@dataclass
class _Failures:
    count: int = 0
    retry_at_ms: int = 0


@dataclass
class _Totals:
    cleanings: int = 0
    failures: int = 0
    aborted: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    records_kept: int = 0
    records_removed: int = 0
    last: CleaningResult | None = None
    states: dict[TopicPartition, LogCleanerState] = field(default_factory=dict)


class CleanerManager:
    """Chooses, cleans and checkpoints compacted logs. Thread-safe."""

    def __init__(
        self,
        data_dir: Path,
        logs: Callable[[], Iterable[CleanableLog]],
        *,
        io: FileIO,
        clock_ms: Callable[[], int],
        backoff_ms: int = 15000,
    ) -> None:
        self._checkpoint_path = Path(data_dir) / CLEANER_OFFSET_CHECKPOINT
        self._logs = logs
        self._io = io
        self._clock_ms = clock_ms
        self._backoff_ms = backoff_ms
        self._lock = threading.Lock()
        self._checkpoint_lock = threading.Lock()
        self._checkpoints: dict[TopicPartition, int] = read_checkpoint(io, self._checkpoint_path)
        self._in_progress: set[TopicPartition] = set()
        self._failures: dict[TopicPartition, _Failures] = {}
        self._uncleanable: set[TopicPartition] = set()
        self._totals = _Totals()

    # ---- choosing ---------------------------------------------------------

    def checkpoint(self, topic: str, partition: int) -> int | None:
        with self._lock:
            return self._checkpoints.get((topic, partition))

    def _views(self, current: CleanableLog) -> list[SegmentView]:
        infos = current.segments_info()
        lag_bound = current.config.max_compaction_lag_ms < LONG_MAX
        return [
            SegmentView(
                base_offset=i.base_offset,
                next_offset=i.next_offset,
                size_bytes=i.size_bytes,
                largest_timestamp_ms=i.largest_timestamp_ms,
                first_batch_timestamp_ms=(
                    current.segment_files.first_batch_timestamp_ms(i.base_offset)
                    if lag_bound and not i.is_active
                    else -1
                ),
                is_active=i.is_active,
            )
            for i in infos
        ]

    def measure(self, current: CleanableLog, now_ms: int) -> LogToClean[CleanableLog]:
        """The cleanable range, dirty ratio and compaction delay of one log."""
        key = (current.topic, current.partition)
        segments = self._views(current)
        with self._lock:
            checkpoint = self._checkpoints.get(key)
        measured = cleanable_range(
            segments,
            log_start_offset=current.log_start_offset,
            log_end_offset=current.log_end_offset,
            # Kafka's firstUncleanableOffset: nothing at or past the LSO is cleaned (an
            # open transaction may still abort).
            high_watermark=min(current.high_watermark, current.last_stable_offset),
            checkpoint=checkpoint,
            now_ms=now_ms,
            min_compaction_lag_ms=current.config.min_compaction_lag_ms,
        )
        delay = max_compaction_delay_ms(
            segments,
            first_dirty_offset=measured.first_dirty_offset,
            now_ms=now_ms,
            max_compaction_lag_ms=current.config.max_compaction_lag_ms,
        )
        return LogToClean(current, measured, delay, current.config.min_cleanable_dirty_ratio)

    def grab_filthiest(self, now_ms: int) -> LogToClean[CleanableLog] | None:
        """Choose the dirtiest eligible log and mark it in progress (or None)."""
        candidates = []
        states: dict[TopicPartition, LogCleanerState] = {}
        resets: list[tuple[TopicPartition, int]] = []
        present: set[TopicPartition] = set()
        for current in list(self._logs()):
            key = (current.topic, current.partition)
            present.add(key)
            if not current.config.compacted:
                continue
            with self._lock:
                skip = key in self._in_progress
                failure = self._failures.get(key)
                uncleanable = key in self._uncleanable
            measured = self.measure(current, now_ms)
            states[key] = LogCleanerState(
                measured.dirty_ratio,
                measured.compaction_delay_ms,
                measured.range.cleanable_bytes,
                uncleanable,
            )
            if measured.range.checkpoint_reset:
                resets.append((key, measured.range.first_dirty_offset))
            if skip or uncleanable or (failure is not None and now_ms < failure.retry_at_ms):
                continue
            candidates.append(measured)
        for key, offset in resets:
            log.warning("cleaner_checkpoint_reset", topic=key[0], partition=key[1], offset=offset)
        with self._lock:
            self._totals.states = states
            self._checkpoints.update(dict(resets))
            for stale in set(self._checkpoints) - present:
                del self._checkpoints[stale]
            for stale in self._uncleanable - present:
                self._uncleanable.discard(stale)
            chosen = choose_filthiest(candidates)
            if chosen is not None:
                key = (chosen.log.topic, chosen.log.partition)
                if key in self._in_progress:
                    chosen = None
                else:
                    self._in_progress.add(key)
        if resets:
            self._write_checkpoint()
        return chosen

    # ---- cleaning ---------------------------------------------------------

    def clean_one(self, cleaner: Cleaner) -> CleaningResult | None:
        """Clean the filthiest eligible log with `cleaner`; None when nothing qualified."""
        now_ms = self._clock_ms()
        chosen = self.grab_filthiest(now_ms)
        if chosen is None:
            return None
        current = chosen.log
        key = (current.topic, current.partition)
        bound = log.bind(topic=current.topic, partition=current.partition)
        try:
            result = cleaner.clean(
                current,
                first_dirty_offset=chosen.range.first_dirty_offset,
                first_uncleanable_offset=chosen.range.first_uncleanable_offset,
                now_ms=now_ms,
            )
        except CleaningAborted as exc:
            with self._lock:
                self._in_progress.discard(key)
                self._totals.aborted += 1
            bound.info("cleaning_aborted", reason=str(exc))
            return None
        except Exception as exc:
            self._record_failure(key, now_ms, exc)
            return None
        with self._lock:
            self._in_progress.discard(key)
            self._failures.pop(key, None)
            self._checkpoints[key] = result.end_offset
            totals = self._totals
            totals.cleanings += 1
            totals.bytes_read += result.bytes_read
            totals.bytes_written += result.bytes_written
            totals.records_kept += result.records_kept
            totals.records_removed += result.records_removed
            totals.last = result
        self._write_checkpoint()
        bound.info(
            "log_cleaned",
            first_dirty_offset=result.first_dirty_offset,
            end_offset=result.end_offset,
            map_full=result.map_full,
            dirty_ratio=round(chosen.dirty_ratio, 4),
            compaction_delay_ms=chosen.compaction_delay_ms,
            bytes_read=result.bytes_read,
            bytes_written=result.bytes_written,
            records_kept=result.records_kept,
            records_removed=result.records_removed,
            batches_rewritten=result.batches_rewritten,
            map_utilization=round(result.map_utilization, 4),
            segments_before=result.segments_before,
            segments_after=result.segments_after,
            duration_s=round(result.duration_s, 6),
            throttled_s=round(result.throttled_s, 6),
        )
        return result

    def _record_failure(self, key: TopicPartition, now_ms: int, exc: Exception) -> None:
        with self._lock:
            self._in_progress.discard(key)
            failure = self._failures.setdefault(key, _Failures())
            failure.count += 1
            backoff = min(self._backoff_ms * 2 ** (failure.count - 1), MAX_FAILURE_BACKOFF_MS)
            failure.retry_at_ms = now_ms + backoff
            self._totals.failures += 1
            marked = failure.count >= MAX_CONSECUTIVE_FAILURES
            if marked:
                self._uncleanable.add(key)
        log.error(
            "cleaning_failed",
            topic=key[0],
            partition=key[1],
            error=repr(exc),
            consecutive_failures=failure.count,
            uncleanable=marked,
            retry_in_ms=None if marked else backoff,
        )

    def _write_checkpoint(self) -> None:
        with self._checkpoint_lock:
            with self._lock:
                entries = dict(self._checkpoints)
            write_checkpoint(self._io, self._checkpoint_path, entries)

    # ---- reporting ----------------------------------------------------------

    def uncleanable(self) -> tuple[TopicPartition, ...]:
        with self._lock:
            return tuple(sorted(self._uncleanable))

    def statistics(self) -> CleanerStatistics:
        with self._lock:
            totals = self._totals
            states = dict(totals.states)
            last = totals.last
            return CleanerStatistics(
                cleanings_total=totals.cleanings,
                failures_total=totals.failures,
                aborted_total=totals.aborted,
                bytes_read_total=totals.bytes_read,
                bytes_written_total=totals.bytes_written,
                records_kept_total=totals.records_kept,
                records_removed_total=totals.records_removed,
                max_dirty_ratio=max((s.dirty_ratio for s in states.values()), default=0.0),
                max_compaction_delay_ms=max(
                    (s.compaction_delay_ms for s in states.values()), default=0
                ),
                last_map_utilization=last.map_utilization if last else 0.0,
                last_duration_s=last.duration_s if last else 0.0,
                logs=states,
                uncleanable=tuple(sorted(self._uncleanable)),
                last_result=last,
            )
