"""The retention pass: apply the pure rules to every partition of a log manager.

Synchronous and free of trio: the broker's scheduler calls `RetentionTask.run_once`
every `log.retention.check.interval.ms` in a worker thread. The rules read only
metadata the logs keep in memory (`segments_info()`, offsets, config), so a pass
over thousands of idle partitions costs no file reads.

Invariants:
- The config is read from each log at every pass, so `alter_configs` changes to
  retention settings apply at the next tick without a restart.
- Only immutable segments are judged and deleted. When every segment may go, the
  log rolls first and the plan is made again on the rolled log: a record appended
  between the first look and the roll is then judged too, and the fresh active
  segment is never deleted (a log always keeps its end offset).
- Work per pass is bounded (`MAX_SEGMENTS_DELETED_PER_PASS`); a pass that runs out
  of budget remembers where it stopped and the next one starts there, so no
  partition starves.
- An idle partition costs no system call: its segment metadata is reused while
  its fingerprint is unchanged (`RetentionTask._nothing_to_delete`), and every
  deletion is decided again on fresh metadata.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import structlog

from protocol.clock import wall_clock_ms
from retention.explain import RetentionExplanation, explain_retention
from retention.rules import (
    DeleteReason,
    DeletionPlan,
    RetentionConfig,
    RetentionSettings,
    SegmentMeta,
    plan_deletion,
)

MAX_SEGMENTS_DELETED_PER_PASS = 1000
"""Each deletion renames three files under the log's lock; a bounded tick keeps a
worker thread and the logs' locks free for appends and flushes; the rest waits
for the next tick."""

SETTINGS_CACHE_MAX_ENTRIES = 4096
"""Bound on cached settings (a config object is replaced on every alter_configs)."""

logger = structlog.get_logger("tidelog.retention")


class RetentionLog(Protocol):
    """What retention needs from `storage.log.Log` (see docs/internals.md)."""

    @property
    def config(self) -> RetentionConfig: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def segment_count(self) -> int: ...
    @property
    def size_bytes(self) -> int: ...
    def segments_info(self) -> Sequence[SegmentMeta]: ...
    def roll(self) -> object: ...
    def delete_oldest_segments(self, count: int, reason: str) -> Sequence[SegmentMeta]: ...


class RetentionManager(Protocol):
    """What retention needs from `storage.manager.LogManager`."""

    def topics(self) -> list[str]: ...
    def partition_count(self, name: str) -> int: ...
    def get_log(self, topic: str, partition: int) -> RetentionLog: ...


@dataclass(frozen=True, slots=True)
class Deletion:
    """Segments one rule removed from one partition in one pass."""

    topic: str
    partition: int
    reason: DeleteReason
    segments: int
    size_bytes: int
    base_offsets: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class PassResult:
    """What one pass did; `budget_exhausted` means the next pass resumes the walk."""

    partitions_checked: int
    deletions: tuple[Deletion, ...]
    budget_exhausted: bool
    failures: int
    duration_s: float

    @property
    def segments_deleted(self) -> int:
        return sum(d.segments for d in self.deletions)

    @property
    def bytes_deleted(self) -> int:
        return sum(d.size_bytes for d in self.deletions)


@dataclass(frozen=True, slots=True)
class RetentionStatistics:
    """Totals since start, for metrics: per (topic, reason) segments and bytes deleted."""

    passes: int
    failures: int
    deleted_segments: dict[tuple[str, str], int] = field(default_factory=dict)
    deleted_bytes: dict[tuple[str, str], int] = field(default_factory=dict)
    last_pass_duration_s: float | None = None


@dataclass(frozen=True, slots=True)
class _CachedMetadata:
    log: RetentionLog
    fingerprint: tuple[int, int, int, int]
    segments: Sequence[SegmentMeta]


def log_settings(log: RetentionLog) -> RetentionSettings:
    return RetentionSettings.from_config(log.config)


def explain_log(log: RetentionLog, now_ms: int) -> RetentionExplanation:
    """Every segment's verdict for one partition, as the next pass would judge it."""
    return explain_retention(
        log.segments_info(), log_settings(log), log.log_start_offset, log.high_watermark, now_ms
    )


def plan_log(log: RetentionLog, now_ms: int) -> tuple[Sequence[SegmentMeta], DeletionPlan]:
    segments = log.segments_info()
    plan = plan_deletion(
        segments, log_settings(log), log.log_start_offset, log.high_watermark, now_ms
    )
    return segments, plan


def apply_retention(
    log: RetentionLog, topic: str, partition: int, now_ms: int, max_segments: int
) -> list[Deletion]:
    """Delete what the rules allow from one log, at most `max_segments` segments."""
    segments, plan = plan_log(log, now_ms)
    if plan.total == 0 or max_segments <= 0:
        return []
    if plan.roll_first:
        log.roll()
        segments, plan = plan_log(log, now_ms)
    # Never the last segment: it may take appends while we work (roll first instead).
    budget = min(max_segments, len(segments) - 1)
    deletions: list[Deletion] = []
    for reason, count in plan.steps():
        count = min(count, budget)
        if count <= 0:
            break
        removed = log.delete_oldest_segments(count, reason.value)
        budget -= len(removed)
        deletion = Deletion(
            topic=topic,
            partition=partition,
            reason=reason,
            segments=len(removed),
            size_bytes=sum(s.size_bytes for s in removed),
            base_offsets=tuple(s.base_offset for s in removed),
        )
        deletions.append(deletion)
        logger.info(
            "retention_deleted_segments",
            topic=topic,
            partition=partition,
            reason=reason.value,
            segments=deletion.segments,
            bytes=deletion.size_bytes,
            base_offsets=list(deletion.base_offsets),
            log_start_offset=log.log_start_offset,
        )
    return deletions


class RetentionTask:
    """Runs retention passes over a log manager, remembering where a bounded pass stopped.

    Not thread-safe: one pass at a time (the scheduler never overlaps runs of a task).
    """

    def __init__(
        self,
        manager: RetentionManager,
        *,
        clock_ms: Callable[[], int] | None = None,
        max_segments_per_pass: int = MAX_SEGMENTS_DELETED_PER_PASS,
        skip: Callable[[RetentionLog], bool] | None = None,
    ) -> None:
        """`skip(log)`: logs another task retains (tiered storage's, which must not
        delete a segment before its upload finished; broker/tiered)."""
        self._skip = skip
        if max_segments_per_pass < 1:
            raise ValueError(f"max_segments_per_pass must be >= 1, got {max_segments_per_pass}")
        self._manager = manager
        self._clock_ms = clock_ms or wall_clock_ms
        self._max_segments = max_segments_per_pass
        self._resume_at: tuple[str, int] | None = None
        self._metadata: dict[tuple[str, int], _CachedMetadata] = {}
        # Settings per config object: a topic's partitions share one frozen config.
        self._settings: dict[int, tuple[RetentionConfig, RetentionSettings]] = {}
        self._passes = 0
        self._failures = 0
        self._deleted_segments: dict[tuple[str, str], int] = {}
        self._deleted_bytes: dict[tuple[str, str], int] = {}
        self._last_duration_s: float | None = None

    def partitions(self) -> list[tuple[str, int]]:
        """Every (topic, partition), in a stable order, starting where the last pass stopped."""
        keys = [
            (topic, p)
            for topic in sorted(self._manager.topics())
            for p in range(self._manager.partition_count(topic))
        ]
        if self._resume_at is None:
            return keys
        start = next((i for i, key in enumerate(keys) if key >= self._resume_at), 0)
        return keys[start:] + keys[:start]

    def run_once(self, now_ms: int | None = None) -> PassResult:
        """One retention pass; never raises for one bad partition (it is logged, counted)."""
        started = time.perf_counter()
        now_ms = self._clock_ms() if now_ms is None else now_ms
        budget = self._max_segments
        deletions: list[Deletion] = []
        checked = failures = 0
        exhausted = False
        self._resume_at = None
        seen: dict[tuple[str, int], _CachedMetadata] = {}
        for key in self.partitions():
            topic, partition = key
            checked += 1
            try:
                log = self._manager.get_log(topic, partition)
                if self._skip is not None and self._skip(log):
                    continue
                if self._nothing_to_delete(key, log, now_ms, seen):
                    continue
                seen.pop(key, None)  # it is about to change
                done = apply_retention(log, topic, partition, now_ms, budget)
            except Exception:
                # A topic deleted mid-pass, or a storage error on one partition.
                failures += 1
                logger.exception("retention_failed", topic=topic, partition=partition)
                continue
            budget -= sum(d.segments for d in done)
            deletions.extend(done)
            if budget <= 0:
                # This partition may have more to delete: the next pass starts here.
                self._resume_at = (topic, partition)
                exhausted = True
                break
        # Partitions a bounded pass did not reach keep their entries; gone ones drop out.
        self._metadata = {**self._metadata, **seen} if exhausted else seen
        result = PassResult(
            partitions_checked=checked,
            deletions=tuple(deletions),
            budget_exhausted=exhausted,
            failures=failures,
            duration_s=time.perf_counter() - started,
        )
        self._record(result)
        logger.info(
            "retention_pass_finished",
            partitions=checked,
            segments_deleted=result.segments_deleted,
            bytes_deleted=result.bytes_deleted,
            failures=failures,
            budget_exhausted=exhausted,
            duration_s=round(result.duration_s, 6),
        )
        return result

    def _nothing_to_delete(
        self,
        key: tuple[str, int],
        log: RetentionLog,
        now_ms: int,
        seen: dict[tuple[str, int], _CachedMetadata],
    ) -> bool:
        """Decide the common idle case without a syscall.

        A log's segment metadata is reused while its fingerprint (end offset, start
        offset, segment count, size) is unchanged: closed segments are immutable and
        an append, roll, truncation, cleaning or deletion changes the fingerprint.
        The fingerprint is read before the metadata, so cached metadata is never
        older than its fingerprint. Deciding to delete always re-reads fresh
        metadata (`apply_retention`).
        """
        fingerprint = (log.log_end_offset, log.log_start_offset, log.segment_count, log.size_bytes)
        cached = self._metadata.get(key)
        if cached is None or cached.log is not log or cached.fingerprint != fingerprint:
            cached = _CachedMetadata(log, fingerprint, log.segments_info())
        seen[key] = cached
        plan = plan_deletion(
            cached.segments,
            self._settings_for(log),
            log.log_start_offset,
            log.high_watermark,
            now_ms,
        )
        return plan.total == 0

    def _settings_for(self, log: RetentionLog) -> RetentionSettings:
        """Holding the config itself keeps its id from being reused while cached."""
        config = log.config
        cached = self._settings.get(id(config))
        if cached is not None and cached[0] is config:
            return cached[1]
        if len(self._settings) >= SETTINGS_CACHE_MAX_ENTRIES:
            self._settings.clear()
        settings = RetentionSettings.from_config(config)
        self._settings[id(config)] = (config, settings)
        return settings

    def _record(self, result: PassResult) -> None:
        self._passes += 1
        self._failures += result.failures
        self._last_duration_s = result.duration_s
        for d in result.deletions:
            key = (d.topic, d.reason.value)
            self._deleted_segments[key] = self._deleted_segments.get(key, 0) + d.segments
            self._deleted_bytes[key] = self._deleted_bytes.get(key, 0) + d.size_bytes

    def statistics(self) -> RetentionStatistics:
        return RetentionStatistics(
            passes=self._passes,
            failures=self._failures,
            deleted_segments=dict(self._deleted_segments),
            deleted_bytes=dict(self._deleted_bytes),
            last_pass_duration_s=self._last_duration_s,
        )
