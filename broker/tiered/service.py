"""Tiered storage on the broker: Kafka's RemoteLogManager, on the trio scheduler.

`TieredStorage.run_once` is the `remote-log-manager` task, every
`remote.log.manager.task.interval.ms` (after `log.initial.task.delay.ms`, like
retention). For each partition of a topic with `remote.storage.enable=true`, in
parallel:

1. the first time (and after a failure, until it succeeds): `RemotePartition.open`,
   which restarts from the manifest (orphans swept, deletions resumed, log start
   restored);
2. uploads: every eligible segment, oldest first (`RemotePartition.next_candidate`),
   at most `remote.log.manager.copier.thread.pool.size` segments broker-wide at once
   (a `trio.CapacityLimiter`), the bytes through one `TokenBucket` of
   `remote.log.manager.copy.max.bytes.per.second`;
3. total retention (`retention.*`, delete-records): remote segments deleted, the log
   start offset raised across both tiers (retention.tiered.plan_remote_deletion);
4. local retention (`local.retention.*`): local copies of uploaded segments deleted
   (retention.tiered.plan_local_deletion).

Every step blocks (files, boto3) and runs in a worker thread: the copy threads under
the copier limiter, the rest under `tidelog.remote.storage.threads`; the event loop
never waits on the store. A failing partition backs off exponentially
(`remote.log.manager.task.retry.backoff.ms` doubling up to `...backoff.max.ms`) and
is counted; other partitions carry on, and local data is served throughout.

The broker's retention task skips tiered topics (broker/housekeeping.py): their
local segments are deleted here only, after their upload finished.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from broker.config import BrokerConfig
from broker.logging import get_logger
from protocol.errors import TidelogError
from protocol.settings import INT64_MAX
from retention.rules import RetentionSettings
from retention.tiered import (
    local_settings,
    plan_local_deletion,
    plan_remote_deletion,
    total_segments,
)
from storage.checkpoint import read_checkpoint
from storage.fileio import FileIO
from storage.files import LOG_START_OFFSET_CHECKPOINT
from storage.log import Log
from storage.manager import LogManager
from storage.remote import BlockingObjectStore, RemoteStorageError, partition_prefix
from storage.remote.manifest import RemoteSegment
from storage.remote.partition import RemotePartition
from storage.remote.throttle import TokenBucket, UploadStopped

__all__ = ["TieredStatistics", "TieredStorage"]

logger = get_logger(component="tiered")

MAX_UPLOADS_PER_TICK = 64
"""Segments one partition uploads per run; the rest waits for the next run, so one
partition with a long backlog does not hold its task for hours."""


@dataclass(frozen=True, slots=True)
class TieredStatistics:
    """For broker/metrics.py (broker/tiered/metrics.py names the series)."""

    partitions: int
    segments_pending_upload: int
    bytes_pending_upload: int
    upload_lag_ms: int  # age of the oldest rolled segment not yet uploaded (0: none)
    segments_uploaded: int
    bytes_uploaded: int
    upload_errors: dict[str, int] = field(default_factory=dict)  # by error kind
    remote_segments_deleted: int = 0
    local_segments_deleted: int = 0
    remote_segments: int = 0
    remote_bytes: int = 0
    partitions_failing: int = 0
    throttled_s: float = 0.0


@dataclass
class _Backoff:
    failures: int = 0
    retry_at_s: float = 0.0


class TieredStorage:
    """The tiered partitions of one LogManager and their remote tier."""

    def __init__(
        self,
        manager: LogManager,
        config: BrokerConfig,
        store: BlockingObjectStore,
        *,
        clock_ms: Callable[[], int],
        io: FileIO | None = None,
    ) -> None:
        self.manager = manager
        self.config = config
        self.store = store
        self.clock_ms = clock_ms
        self.io = io or FileIO()
        self.copiers = trio.CapacityLimiter(config.remote_log_manager_copier_thread_pool_size)
        self.store_threads = trio.CapacityLimiter(config.tidelog_remote_storage_threads)
        rate = config.remote_log_manager_copy_max_bytes_per_second
        self.bucket = TokenBucket(None if rate >= INT64_MAX else rate)
        self._partitions: dict[tuple[str, int], RemotePartition] = {}
        self._opened: set[tuple[str, int]] = set()
        self._backoff: dict[tuple[str, int], _Backoff] = {}
        self._uploaded_segments = 0
        self._uploaded_bytes = 0
        self._errors: dict[str, int] = {}
        self._remote_deleted = 0
        self._local_deleted = 0
        self._pending: dict[tuple[str, int], _Pending] = {}

    # ---- the task --------------------------------------------------------------

    def tiered_logs(self) -> list[Log]:
        return [log for log in self.manager.all_logs() if log.config.remote_storage_enable]

    async def run_once(self) -> None:
        """One pass over every tiered partition (see the module docstring)."""
        logs = self.tiered_logs()
        live = {(log.topic, log.partition) for log in logs}
        gone = [k for k in self._partitions if k not in live]  # deleted topics
        for key in gone:
            self._partitions.pop(key)
            self._opened.discard(key)
            self._pending.pop(key, None)
            self._backoff.pop(key, None)
        async with trio.open_nursery() as nursery:
            for key in gone:
                nursery.start_soon(self._delete_partition_objects, key)
            for log in logs:
                nursery.start_soon(self._tend, log)

    async def _delete_partition_objects(self, key: tuple[str, int]) -> None:
        """A deleted topic's partition: its objects go too (Kafka deletes them). A topic
        created again under the name finds strays instead, which its open() deletes."""
        if key in self._partitions:
            return  # created again meanwhile: its open() sweeps
        prefix = partition_prefix(self.store.settings.prefix, *key)

        def delete() -> int:
            found = self.store.list(prefix)
            self.store.delete(o.key for o in found)
            return len(found)

        try:
            count = await trio.to_thread.run_sync(delete, limiter=self.store_threads)
        except RemoteStorageError as exc:
            logger.warning("tiered_topic_objects_left", topic=key[0], partition=key[1],
                           error=str(exc))  # fmt: skip
            return
        logger.info("tiered_topic_objects_deleted", topic=key[0], partition=key[1], objects=count)

    def load_all(self) -> None:
        """Every tiered partition's local manifest, and the log start offsets it
        restores (blocking: a worker thread, before the broker serves)."""
        starts = read_checkpoint(self.io, self.manager.data_dir / LOG_START_OFFSET_CHECKPOINT)
        for log in self.tiered_logs():
            try:
                self.partition(log).load(starts.get((log.topic, log.partition)))
            except (RemoteStorageError, OSError, ValueError) as exc:
                logger.error(
                    "tiered_manifest_unreadable",
                    topic=log.topic,
                    partition=log.partition,
                    error=str(exc),
                )

    def stop(self) -> None:
        """Make uploads in progress give up at their next chunk (a shutdown)."""
        self.bucket.stop()

    def partition(self, log: Log) -> RemotePartition:
        key = (log.topic, log.partition)
        found = self._partitions.get(key)
        if found is None or found.log is not log:
            found = RemotePartition(log, self.store, io=self.io, clock_ms=self.clock_ms)
            self._partitions[key] = found
            self._opened.discard(key)
        return found

    async def _tend(self, log: Log) -> None:
        key = (log.topic, log.partition)
        backoff = self._backoff.setdefault(key, _Backoff())
        if trio.current_time() < backoff.retry_at_s:
            return
        part = self.partition(log)
        try:
            if key not in self._opened:
                await trio.to_thread.run_sync(part.open, limiter=self.store_threads)
                self._opened.add(key)
            await self._upload_all(part)
            await trio.to_thread.run_sync(self.apply_retention, part, limiter=self.store_threads)
            await trio.to_thread.run_sync(part.sync_remote_manifest, limiter=self.store_threads)
        except UploadStopped:
            return
        except (RemoteStorageError, OSError, TidelogError, ValueError) as exc:
            self._failed(key, backoff, exc)
            return
        backoff.failures, backoff.retry_at_s = 0, 0.0

    def _failed(self, key: tuple[str, int], backoff: _Backoff, exc: Exception) -> None:
        kind = exc.kind.value if isinstance(exc, RemoteStorageError) else type(exc).__name__
        self._errors[kind] = self._errors.get(kind, 0) + 1
        backoff.failures += 1
        first_s = self.config.remote_log_manager_task_retry_backoff_ms / 1000
        max_s = self.config.remote_log_manager_task_retry_backoff_max_ms / 1000
        wait_s = min(max_s, first_s * 2 ** min(backoff.failures - 1, 30))
        backoff.retry_at_s = trio.current_time() + wait_s
        logger.warning(
            "tiered_partition_failed",
            topic=key[0],
            partition=key[1],
            error=str(exc),
            kind=kind,
            failures=backoff.failures,
            retry_in_s=round(wait_s, 3),
        )

    async def _upload_all(self, part: RemotePartition) -> None:
        for _ in range(MAX_UPLOADS_PER_TICK):
            candidate = part.next_candidate()
            if candidate is None:
                return
            uploaded = await trio.to_thread.run_sync(
                part.upload, candidate, self.bucket.consume, limiter=self.copiers
            )
            self._uploaded_segments += 1
            self._uploaded_bytes += uploaded.size_bytes

    # ---- retention (blocking: a worker thread) ---------------------------------

    def apply_retention(self, part: RemotePartition, now_ms: int | None = None) -> None:
        """Total retention, then local retention, for one partition."""
        now = self.clock_ms() if now_ms is None else now_ms
        log = part.log
        config = log.config
        part.record_log_start()
        remote = [_as_meta(s) for s in part.manifest.readable()]
        segments = total_segments(remote, log.segments_info(), part.manifest.remote_end_offset)
        plan = plan_remote_deletion(
            segments, RetentionSettings.from_config(config), log.log_start_offset, now
        )
        if plan.total and plan.log_start_offset is not None:
            doomed = part.manifest.readable()[: plan.total]
            reason = plan.plan.steps()[0][0].value if plan.plan.steps() else "retention"
            deleted = part.delete_segments(doomed, reason, log_start_offset=plan.log_start_offset)
            self._remote_deleted += len(deleted)
        local = log.segments_info()
        local_plan = plan_local_deletion(
            local,
            local_settings(
                config.effective_local_retention_ms,
                config.effective_local_retention_bytes,
                frozenset(config.cleanup_policy),
            ),
            log.log_start_offset,
            log.high_watermark,
            part.uploaded_end(local),
            now,
        )
        if local_plan.total:
            reason = "local_start_offset" if local_plan.start_offset_count else "local_retention"
            removed = part.delete_local_copies(local_plan.total, reason)
            self._local_deleted += len(removed)
        self._note_pending(part)

    # ---- statistics ------------------------------------------------------------

    def _note_pending(self, part: RemotePartition) -> None:
        """Cache what the partition has pending (in the worker thread: segment metadata
        costs a stat per segment, which a scrape on the event loop must not pay)."""
        pending = part.pending()
        oldest = min((i.mtime_ms for i in pending if i.mtime_ms > 0), default=None)
        readable = part.manifest.readable()
        self._pending[(part.topic, part.partition)] = _Pending(
            len(pending),
            sum(i.size_bytes for i in pending),
            oldest,
            len(readable),
            sum(s.size_bytes for s in readable),
        )

    def statistics(self) -> TieredStatistics:
        pending = [p for k, p in list(self._pending.items()) if k in self._partitions]
        oldest = min((p.oldest_ms for p in pending if p.oldest_ms is not None), default=None)
        return TieredStatistics(
            partitions=len(self._partitions),
            segments_pending_upload=sum(p.segments for p in pending),
            bytes_pending_upload=sum(p.bytes for p in pending),
            upload_lag_ms=max(0, self.clock_ms() - oldest) if oldest is not None else 0,
            segments_uploaded=self._uploaded_segments,
            bytes_uploaded=self._uploaded_bytes,
            upload_errors=dict(self._errors),
            remote_segments_deleted=self._remote_deleted,
            local_segments_deleted=self._local_deleted,
            remote_segments=sum(p.remote_segments for p in pending),
            remote_bytes=sum(p.remote_bytes for p in pending),
            partitions_failing=sum(1 for b in self._backoff.values() if b.failures),
            throttled_s=self.bucket.throttled_s,
        )


@dataclass(frozen=True, slots=True)
class _Pending:
    segments: int
    bytes: int
    oldest_ms: int | None
    remote_segments: int
    remote_bytes: int


@dataclass(frozen=True, slots=True)
class _RemoteMeta:
    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    mtime_ms: int
    is_active: bool = False


def _as_meta(segment: RemoteSegment) -> _RemoteMeta:
    return _RemoteMeta(
        segment.base_offset,
        segment.next_offset,
        segment.size_bytes,
        segment.max_timestamp_ms,
        segment.updated_ms,
    )
