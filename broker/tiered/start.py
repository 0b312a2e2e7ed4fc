"""Starting tiered storage with the broker: the store client, the manifests, the task."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import trio

from broker.config import BrokerConfig
from broker.logging import get_logger
from broker.metrics import BrokerMetrics, Sample
from broker.scheduler import Scheduler
from broker.tiered.runner import settings_with_credentials
from broker.tiered.service import TieredStatistics, TieredStorage
from storage.manager import LogManager
from storage.remote import BlockingObjectStore

__all__ = ["start_tiered_storage", "tiered_samples"]

logger = get_logger(component="tiered")
MS_PER_S = 1000.0


async def start_tiered_storage(
    scheduler: Scheduler,
    manager: LogManager,
    config: BrokerConfig,
    metrics: BrokerMetrics,
    clock_ms: Callable[[], int],
) -> TieredStorage | None:
    """With remote.log.storage.system.enable: load every tiered partition's manifest
    (restoring log start offsets) and schedule `remote-log-manager`; else None."""
    settings = config.remote_store_settings
    if settings is None:
        tiered = [log for log in manager.all_logs() if log.config.remote_storage_enable]
        if tiered:
            logger.warning(
                "tiered_topics_without_remote_storage",
                partitions=len(tiered),
                hint="remote.log.storage.system.enable=false: their older records in the "
                "object store are not served and their local segments follow retention.*",
            )
        return None
    settings = settings_with_credentials(settings, config.tidelog_remote_storage_credentials_file)
    store = await trio.to_thread.run_sync(BlockingObjectStore, settings)
    service = TieredStorage(manager, config, store, clock_ms=clock_ms)
    await trio.to_thread.run_sync(service.load_all)
    scheduler.schedule(
        "remote-log-manager",
        service.run_once,
        config.log_initial_task_delay_ms / MS_PER_S,
        config.remote_log_manager_task_interval_ms / MS_PER_S,
    )
    metrics.add_statistics_source(lambda: tiered_samples(service.statistics()))
    logger.info(
        "tiered_storage_started",
        endpoint=settings.endpoint or "aws",
        bucket=settings.bucket,
        prefix=settings.prefix,
        partitions=len(service.tiered_logs()),
    )
    return service


def tiered_samples(stats: TieredStatistics) -> Iterator[Sample]:
    """The upload series (docs/observability.md)."""
    yield Sample("tidelog_remote_partitions", "gauge", "Partitions of tiered topics.",
                 stats.partitions)  # fmt: skip
    yield Sample(
        "tidelog_remote_upload_pending_segments",
        "gauge",
        "Rolled segments of tiered topics not yet in the object store.",
        stats.segments_pending_upload,
    )
    yield Sample(
        "tidelog_remote_upload_pending_bytes",
        "gauge",
        "Bytes of rolled segments not yet in the object store.",
        stats.bytes_pending_upload,
    )
    yield Sample(
        "tidelog_remote_upload_lag_seconds",
        "gauge",
        "Age of the oldest rolled segment not yet uploaded (0: none waits).",
        stats.upload_lag_ms / MS_PER_S,
    )
    yield Sample("tidelog_remote_uploaded_segments", "counter", "Segments uploaded.",
                 stats.segments_uploaded)  # fmt: skip
    yield Sample("tidelog_remote_uploaded_bytes", "counter", "Segment bytes uploaded.",
                 stats.bytes_uploaded)  # fmt: skip
    for kind, count in sorted(stats.upload_errors.items()):
        yield Sample(
            "tidelog_remote_errors",
            "counter",
            "Failed uploads, remote deletions and sweeps, by error kind.",
            count,
            (("kind", kind),),
        )
    yield Sample(
        "tidelog_remote_partitions_failing",
        "gauge",
        "Tiered partitions whose last remote step failed (backing off).",
        stats.partitions_failing,
    )
    yield Sample("tidelog_remote_deleted_segments", "counter",
                 "Remote segments deleted by retention.* or delete-records.",
                 stats.remote_segments_deleted)  # fmt: skip
    yield Sample("tidelog_remote_local_deleted_segments", "counter",
                 "Local copies of uploaded segments deleted by local.retention.*.",
                 stats.local_segments_deleted)  # fmt: skip
    yield Sample("tidelog_remote_segments", "gauge", "Readable segments in the object store.",
                 stats.remote_segments)  # fmt: skip
    yield Sample("tidelog_remote_bytes", "gauge", "Bytes of readable segments in the store.",
                 stats.remote_bytes)  # fmt: skip
    yield Sample("tidelog_remote_upload_throttled_seconds", "counter",
                 "Time uploads waited for remote.log.manager.copy.max.bytes.per.second.",
                 stats.throttled_s)  # fmt: skip
