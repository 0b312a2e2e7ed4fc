"""The broker's log tasks (broker/housekeeping.py) on the scheduler, over a real
LogManager: trio's MockClock drives the schedule, a fake wall clock drives the logs."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
import trio
import trio.testing

from broker.config import BrokerConfig
from broker.housekeeping import (
    FLUSH_CHECK_INTERVAL_MAX_MS,
    PRODUCER_SNAPSHOT_INTERVAL_MS,
    start_log_tasks,
)
from broker.scheduler import Scheduler
from protocol.batch import encode_batch
from storage.files import RECOVERY_POINT_CHECKPOINT
from storage.manager import LogManager

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
SMALL_SEGMENTS = {"segment.bytes": 200, "segment.index.bytes": 4096}


class WallClock:
    def __init__(self) -> None:
        self.now_ms = NOW_MS

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def wall() -> WallClock:
    return WallClock()


@pytest.fixture
def manager(tmp_path: Path, wall: WallClock) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data", clock_ms=wall)
    m.open()
    yield m
    m.close()


def broker_config(tmp_path: Path, **props: object) -> BrokerConfig:
    return BrokerConfig.from_props(props, data_dir=tmp_path / "data")


def append(manager: LogManager, topic: str, *timestamps: int) -> None:
    log = manager.get_log(topic, 0)
    for ts in timestamps:
        log.append(encode_batch([(b"k", b"v" * 100, None, ts)]))


async def test_retention_runs_after_the_initial_delay_then_every_interval(
    mock_clock: trio.testing.MockClock, tmp_path: Path, manager: LogManager, wall: WallClock
) -> None:
    config = broker_config(
        tmp_path, **{"log.retention.check.interval.ms": 10_000, "log.initial.task.delay.ms": 5_000}
    )
    manager.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    append(manager, "t", NOW_MS - 3 * HOUR_MS, NOW_MS)
    log = manager.get_log("t", 0)
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=wall)
        retention = tasks.scheduled["log-retention"]
        mock_clock.jump(4.9)
        await trio.testing.wait_all_tasks_blocked()
        assert (retention.runs, log.segment_count) == (0, 2)  # within the initial delay
        mock_clock.jump(0.1)
        await retention.wait_runs(1)
        assert retention.last_started_s - start == pytest.approx(5)
        assert log.segment_count == 1
        # New expired data waits for the next tick, one interval later.
        append(manager, "t", NOW_MS)
        wall.now_ms += 2 * HOUR_MS
        mock_clock.jump(9.9)
        await trio.testing.wait_all_tasks_blocked()
        assert retention.runs == 1
        mock_clock.jump(0.1)
        await retention.wait_runs(2)
        assert retention.last_started_s - start == pytest.approx(15)
        # Both remaining records are now 2 h old: the log rolled and lost them both.
        assert (log.log_start_offset, log.log_end_offset, log.segment_count) == (3, 3, 1)
        assert tasks.retention.statistics().passes == 2
        await scheduler.aclose()


async def test_deleted_files_are_unlinked_once_their_delay_passes(
    mock_clock: trio.testing.MockClock, tmp_path: Path, manager: LogManager, wall: WallClock
) -> None:
    config = broker_config(tmp_path, **{"log.initial.task.delay.ms": 0})
    manager.create_topic(
        "t", 1, {"retention.ms": HOUR_MS, "file.delete.delay.ms": 60_000, **SMALL_SEGMENTS}
    )
    append(manager, "t", NOW_MS - 3 * HOUR_MS, NOW_MS)
    directory = manager.get_log("t", 0).directory
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=wall)
        deleter = tasks.scheduled["delete-files"]
        await tasks.scheduled["log-retention"].wait_runs(1)
        await deleter.wait_runs(1)  # the run at t=0 is over; the next is at t=0.5
        assert len(list(directory.glob("*.deleted"))) == 3
        wall.now_ms += 59_999
        mock_clock.jump(0.5)
        await deleter.wait_runs(2)
        assert len(list(directory.glob("*.deleted"))) == 3
        wall.now_ms += 1
        mock_clock.jump(0.5)
        with structlog.testing.capture_logs() as logs:
            await deleter.wait_runs(3)
        assert list(directory.glob("*.deleted")) == []
        assert tasks.files_deleted == 3
        assert [e["files"] for e in logs if e["event"] == "deleted_files_removed"] == [3]
        await scheduler.aclose()


async def test_flush_ms_is_honoured_and_checkpoints_are_written(
    mock_clock: trio.testing.MockClock, tmp_path: Path, manager: LogManager, wall: WallClock
) -> None:
    config = broker_config(
        tmp_path,
        **{"log.initial.task.delay.ms": 0, "log.flush.offset.checkpoint.interval.ms": 3_000},
    )
    manager.create_topic("fast", 1, {"flush.ms": 500})
    manager.create_topic("never", 1, {})
    for topic in ("fast", "never"):
        append(manager, topic, NOW_MS, NOW_MS)
    checkpoint = tmp_path / "data" / RECOVERY_POINT_CHECKPOINT
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=wall)
        flusher, checkpointer = tasks.scheduled["log-flusher"], tasks.scheduled["log-checkpoint"]
        assert flusher.period_s == FLUSH_CHECK_INTERVAL_MAX_MS / 1000
        await flusher.wait_runs(1)
        await checkpointer.wait_runs(1)
        assert manager.get_log("fast", 0).recovery_point == 0  # flush.ms not yet reached
        wall.now_ms += 1_000
        mock_clock.jump(1)
        await flusher.wait_runs(2)
        assert manager.get_log("fast", 0).recovery_point == 2
        assert manager.get_log("never", 0).recovery_point == 0  # flush.ms: never
        assert "fast 0 2" not in checkpoint.read_text()
        mock_clock.jump(2)
        await checkpointer.wait_runs(2)
        assert "fast 0 2" in checkpoint.read_text()
        await scheduler.aclose()


async def test_a_failing_task_is_logged_and_the_others_keep_running(
    mock_clock: trio.testing.MockClock, tmp_path: Path, manager: LogManager, wall: WallClock
) -> None:
    config = broker_config(
        tmp_path,
        **{
            "log.retention.check.interval.ms": 1_000,
            "log.initial.task.delay.ms": 0,
            "log.flush.offset.checkpoint.interval.ms": 1_000,
        },
    )
    # A directory where the checkpoint file goes: every checkpoint write fails.
    (tmp_path / "data" / RECOVERY_POINT_CHECKPOINT).mkdir()
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=wall)
        checkpointer = tasks.scheduled["log-checkpoint"]
        retention = tasks.scheduled["log-retention"]
        with structlog.testing.capture_logs() as logs:
            for runs in (1, 2, 3):
                await checkpointer.wait_runs(runs)
                await retention.wait_runs(runs)
                mock_clock.jump(1)
        assert checkpointer.failures == 3
        assert not checkpointer.done
        failed = [e for e in logs if e["event"] == "scheduler_task_failed"]
        assert [e["task"] for e in failed] == ["log-checkpoint"] * 3
        assert (retention.failures, tasks.retention.statistics().passes) == (0, 3)
        await scheduler.aclose()
    (tmp_path / "data" / RECOVERY_POINT_CHECKPOINT).rmdir()  # let the clean close succeed


async def test_idle_producers_are_forgotten_every_check_interval(
    mock_clock: trio.testing.MockClock, tmp_path: Path, manager: LogManager, wall: WallClock
) -> None:
    config = broker_config(tmp_path, **{"producer.id.expiration.check.interval.ms": 10_000})
    manager.create_topic("t", 1, {"producer.id.expiration.ms": HOUR_MS})
    log = manager.get_log("t", 0)
    log.append(
        encode_batch([(b"k", b"v", None, NOW_MS)], producer_id=3, producer_epoch=0, base_sequence=0)
    )
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=wall)
        expiry = tasks.scheduled["producer-expiry"]
        mock_clock.jump(10)
        await expiry.wait_runs(1)
        assert log.producer_count() == 1  # idle for less than producer.id.expiration.ms
        wall.now_ms += HOUR_MS
        mock_clock.jump(10)
        await expiry.wait_runs(2)
        assert log.producer_count() == 0
        await scheduler.aclose()


async def test_a_rolls_producer_snapshot_is_written_within_a_second_of_the_start(
    mock_clock: trio.testing.MockClock, tmp_path: Path, manager: LogManager, wall: WallClock
) -> None:
    """A roll keeps its producer snapshot in memory (a file creation would be a third of
    the roll's time on the append path); a task writes it within a second, from the
    start (not after log.initial.task.delay.ms: a broker killed early would rebuild more)."""
    config = broker_config(tmp_path, **{"log.initial.task.delay.ms": 60_000})
    manager.create_topic("t", 1, {})
    log = manager.get_log("t", 0)
    log.append(
        encode_batch([(b"k", b"v", None, NOW_MS)], producer_id=3, producer_epoch=0, base_sequence=0)
    )
    log.roll()
    directory = tmp_path / "data" / "t-0"
    assert not list(directory.glob("*.snapshot"))
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        tasks = start_log_tasks(scheduler, manager, config, clock_ms=wall)
        mock_clock.jump(PRODUCER_SNAPSHOT_INTERVAL_MS / 1000)
        await tasks.scheduled["producer-snapshots"].wait_runs(1)
        assert tasks.scheduled["log-flusher"].runs == 0  # still in its initial delay
        assert [p.name for p in directory.glob("*.snapshot")] == ["00000000000000000001.snapshot"]
        assert log.recovery_point == 0  # written, not flushed: flush.ms is "never"
        await scheduler.aclose()
