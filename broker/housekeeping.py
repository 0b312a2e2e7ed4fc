"""The broker's background log tasks on the scheduler.

`start_log_tasks` schedules, in the broker's nursery (Kafka's LogManager startup):

- `log-retention`: every `log.retention.check.interval.ms`, first after
  `log.initial.task.delay.ms`: `RetentionTask.run_once` in a worker thread.
- `delete-files`: every `FILE_DELETE_CHECK_INTERVAL_MS`: unlink the `.deleted`
  files whose `file.delete.delay.ms` has passed.
- `log-flusher`: every `log.flush.scheduler.interval.ms` (at most
  `FLUSH_CHECK_INTERVAL_MAX_MS`), after the initial delay: fsync the logs whose
  `flush.ms` or `flush.messages` is due.
- `producer-snapshots`: every `PRODUCER_SNAPSHOT_INTERVAL_MS`, from the start: write
  the producer snapshot of each log's newest roll (Kafka writes it inside the roll;
  here the append path only keeps the state, storage.log), so a kill -9 costs at
  most that interval's rolls of rebuild scan.
- `log-checkpoint`: every `log.flush.offset.checkpoint.interval.ms` (or the
  start-offset interval, whichever is smaller), after the initial delay: the
  recovery-point and log-start-offset checkpoints.
- `producer-expiry`: every `producer.id.expiration.check.interval.ms`: forget the
  idempotent producers idle for their topic's `producer.id.expiration.ms`.

Everything that touches files runs in a worker thread (`broker.offload`); the scheduler never
overlaps two runs of one task, so a slow disk delays a task without piling up.
"""

from __future__ import annotations

from collections.abc import Callable

from broker import offload
from broker.config import BrokerConfig
from broker.logging import get_logger
from broker.scheduler import ScheduledTask, Scheduler, TaskFn
from protocol.clock import wall_clock_ms
from retention.task import RetentionTask
from storage.log import Log
from storage.manager import LogManager

logger = get_logger(component="housekeeping")

FILE_DELETE_CHECK_INTERVAL_MS = 500
"""How late a `.deleted` file may be unlinked after its delay; an idle check is one
lock and an empty list."""

PRODUCER_SNAPSHOT_INTERVAL_MS = 1000
"""How long a roll's producer snapshot may wait in memory (no initial delay: a broker
killed in its first seconds should not rebuild from an older one)."""

FLUSH_CHECK_INTERVAL_MAX_MS = 1000
"""Kafka's flush scheduler defaults to "never", which silently ignores a topic's
`flush.ms`; checking at least every second makes the setting mean what it says."""

MS_PER_S = 1000.0

__all__ = [
    "FILE_DELETE_CHECK_INTERVAL_MS",
    "FLUSH_CHECK_INTERVAL_MAX_MS",
    "PRODUCER_SNAPSHOT_INTERVAL_MS",
    "LogTasks",
    "start_log_tasks",
]


class LogTasks:
    """The scheduled work over one LogManager; each method is one task's run."""

    def __init__(
        self,
        manager: LogManager,
        clock_ms: Callable[[], int] = wall_clock_ms,
        *,
        tiered: bool = False,
    ) -> None:
        """`tiered`: remote.log.storage.system.enable; tiered topics' retention is then
        tiered storage's (broker/tiered/service.py), not this task's."""
        self.manager = manager
        self.clock_ms = clock_ms
        skip = _is_tiered if tiered else None
        self.retention = RetentionTask(manager, clock_ms=clock_ms, skip=skip)
        self.files_deleted = 0
        self.scheduled: dict[str, ScheduledTask] = {}

    async def run_retention(self) -> None:
        await offload.to_worker(self.retention.run_once)

    async def delete_due_files(self) -> None:
        removed = await offload.to_worker(self.manager.delete_due_files)
        if removed:
            self.files_deleted += removed
            logger.info("deleted_files_removed", files=removed)

    async def flush_due_logs(self) -> None:
        # One check per log (a lock each): thousands of partitions stay off the event loop.
        await offload.to_worker(_flush_due, list(self.manager.all_logs()), self.clock_ms())

    async def write_producer_snapshots(self) -> None:
        await offload.to_worker(_write_pending_snapshots, list(self.manager.all_logs()))

    async def write_checkpoints(self) -> None:
        await offload.to_worker(self.manager.write_checkpoints)

    async def expire_producers(self) -> None:
        await offload.to_worker(_expire_producers, self.manager.all_logs(), self.clock_ms())


def _is_tiered(log: object) -> bool:
    config = getattr(log, "config", None)
    return bool(getattr(config, "remote_storage_enable", False))


def _flush_due(logs: list[Log], now_ms: int) -> None:
    for log in logs:
        try:
            if log.flush_needed(now_ms):
                log.flush()
        except Exception:
            # A poisoned partition refuses writes until restart; others still flush.
            logger.exception("scheduled_flush_failed", topic=log.topic, partition=log.partition)


def _write_pending_snapshots(logs: list[Log]) -> None:
    for log in logs:
        try:
            log.write_pending_snapshot()
        except Exception:  # logged; the snapshot waits for the next run or a flush
            logger.exception(
                "producer_snapshot_task_failed", topic=log.topic, partition=log.partition
            )


def _expire_producers(logs: list[Log], now_ms: int) -> None:
    removed = sum(log.remove_expired_producers(now_ms) for log in logs)
    if removed:
        logger.info("producers_expired", producers=removed)


def _schedule(
    scheduler: Scheduler,
    name: str,
    fn: TaskFn,
    delay_ms: int,
    period_ms: int,
) -> ScheduledTask:
    """Kafka's convention: a period <= 0 means run once."""
    if period_ms <= 0:
        return scheduler.schedule_once(name, fn, delay_ms / MS_PER_S)
    return scheduler.schedule(name, fn, delay_ms / MS_PER_S, period_ms / MS_PER_S)


def start_log_tasks(
    scheduler: Scheduler,
    manager: LogManager,
    config: BrokerConfig,
    *,
    clock_ms: Callable[[], int] = wall_clock_ms,
) -> LogTasks:
    """Schedule retention, delayed deletion, flush and checkpoint tasks (see the table)."""
    tasks = LogTasks(manager, clock_ms, tiered=config.remote_log_storage_system_enable)
    delay_ms = config.log_initial_task_delay_ms
    retention_ms = config.log_retention_check_interval_ms
    schedule = tasks.scheduled
    schedule["log-retention"] = _schedule(
        scheduler, "log-retention", tasks.run_retention, delay_ms, retention_ms
    )
    schedule["delete-files"] = _schedule(
        scheduler, "delete-files", tasks.delete_due_files, 0, FILE_DELETE_CHECK_INTERVAL_MS
    )
    flush_ms = min(config.log_flush_scheduler_interval_ms, FLUSH_CHECK_INTERVAL_MAX_MS)
    schedule["log-flusher"] = _schedule(
        scheduler, "log-flusher", tasks.flush_due_logs, delay_ms, max(flush_ms, 1)
    )
    schedule["producer-snapshots"] = _schedule(
        scheduler,
        "producer-snapshots",
        tasks.write_producer_snapshots,
        PRODUCER_SNAPSHOT_INTERVAL_MS,
        PRODUCER_SNAPSHOT_INTERVAL_MS,
    )
    checkpoint_ms = min(
        config.log_flush_offset_checkpoint_interval_ms,
        config.log_flush_start_offset_checkpoint_interval_ms,
    )
    schedule["log-checkpoint"] = _schedule(
        scheduler, "log-checkpoint", tasks.write_checkpoints, delay_ms, checkpoint_ms
    )
    expiry_ms = config.producer_id_expiration_check_interval_ms
    schedule["producer-expiry"] = _schedule(
        scheduler, "producer-expiry", tasks.expire_producers, expiry_ms, expiry_ms
    )
    logger.info(
        "log_tasks_scheduled",
        retention_check_interval_ms=retention_ms,
        initial_delay_ms=delay_ms,
        flush_check_interval_ms=flush_ms,
        checkpoint_interval_ms=checkpoint_ms,
    )
    return tasks
