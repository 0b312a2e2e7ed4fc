"""The scheduler on trio's MockClock: virtual time, no sleeping."""

from __future__ import annotations

import threading

import pytest
import structlog
import trio
import trio.testing

from broker.scheduler import Scheduler


async def test_periodic_task_runs_after_delay_then_every_period(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    times: list[float] = []
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        scheduler.schedule("tick", lambda: times.append(trio.current_time() - start), 5, 2)
        await trio.sleep(11.5)
        scheduler.shutdown()
    assert times == pytest.approx([5, 7, 9, 11])


async def test_once_task_runs_exactly_once(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    times: list[float] = []
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        task = scheduler.schedule_once("once", lambda: times.append(trio.current_time()), 3)
        await trio.sleep(100)
        assert task.done
        assert scheduler.statistics() == []
    assert times == pytest.approx([start + 3])
    assert task.runs == 1


async def test_async_task_is_awaited(autojump_clock: trio.testing.MockClock) -> None:
    finished: list[float] = []

    async def slow() -> None:
        await trio.sleep(1)
        finished.append(trio.current_time())

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        Scheduler(nursery).schedule_once("slow", slow, 0)
    assert finished == pytest.approx([start + 1])


async def test_failing_task_is_logged_by_name_and_keeps_its_schedule(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[float] = []

    def boom() -> None:
        calls.append(trio.current_time())
        raise OSError("disk on fire")

    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        task = scheduler.schedule("retention", boom, 0, 10)
        with structlog.testing.capture_logs() as logs:
            await trio.sleep(25)
        scheduler.shutdown()
    assert len(calls) == 3
    assert task.runs == 3
    assert task.failures == 3
    failures = [e for e in logs if e["event"] == "scheduler_task_failed"]
    assert [e["task"] for e in failures] == ["retention"] * 3
    assert all(e["log_level"] == "error" and e["exc_info"] for e in failures)


async def test_one_failing_task_does_not_disturb_another(
    autojump_clock: trio.testing.MockClock,
) -> None:
    good: list[float] = []

    def bad() -> None:
        raise ValueError("nope")

    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        with structlog.testing.capture_logs():
            scheduler.schedule("bad", bad, 0, 1)
            scheduler.schedule("good", lambda: good.append(trio.current_time()), 0, 1)
            await trio.sleep(4.5)
        scheduler.shutdown()
    assert len(good) == 5


async def test_overrunning_task_never_overlaps_and_does_not_catch_up_in_a_burst(
    autojump_clock: trio.testing.MockClock,
) -> None:
    start = trio.current_time()
    starts: list[float] = []
    running = 0
    max_running = 0

    async def long_run() -> None:
        nonlocal running, max_running
        starts.append(trio.current_time() - start)
        running += 1
        max_running = max(max_running, running)
        # The first run takes 3.5 periods; the others are quick.
        await trio.sleep(3.5 if len(starts) == 1 else 0.1)
        running -= 1

    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        scheduler.schedule("long", long_run, 0, 1)
        await trio.sleep(6.05)
        scheduler.shutdown()
    assert max_running == 1
    # Planned 0, then 1 (missed, runs at 3.5 when the first ends), then fixed rate again.
    assert starts == pytest.approx([0, 3.5, 4.5, 5.5])


async def test_shutdown_cancels_a_running_task_cleanly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered = trio.Event()
    unwound: list[bool] = []

    async def forever() -> None:
        entered.set()
        try:
            await trio.sleep_forever()
        finally:
            unwound.append(True)

    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        task = scheduler.schedule("forever", forever, 0, 1)
        scheduler.schedule("idle", lambda: None, 1000, 1000)
        await entered.wait()
        scheduler.shutdown()
    assert unwound == [True]
    assert task.done
    assert task.failures == 0
    with pytest.raises(RuntimeError, match="shut down"):
        scheduler.schedule_once("late", lambda: None, 0)


async def test_cancelling_the_owning_nursery_stops_every_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    runs: list[float] = []
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        scheduler.schedule("tick", lambda: runs.append(trio.current_time()), 0, 1)
        await trio.sleep(2.5)
        nursery.cancel_scope.cancel()
    assert len(runs) == 3


async def test_cancel_by_name_stops_only_that_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    a: list[float] = []
    b: list[float] = []
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        scheduler.schedule("a", lambda: a.append(0), 0, 1)
        scheduler.schedule("b", lambda: b.append(0), 0, 1)
        await trio.sleep(1.5)
        assert scheduler.cancel("a") == 1
        await trio.sleep(3)
        assert [s.name for s in scheduler.statistics()] == ["b"]
        scheduler.shutdown()
    assert len(a) == 2
    assert len(b) == 5


async def test_a_cancelled_periodic_name_can_be_scheduled_again(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        scheduler.schedule("x", lambda: None, 0, 1)
        with pytest.raises(ValueError, match="already scheduled"):
            scheduler.schedule("x", lambda: None, 0, 1)
        scheduler.cancel("x")
        await trio.sleep(0.5)
        scheduler.schedule("x", lambda: None, 0, 1)
        # One-shot names may repeat, like Kafka's delete-file tasks.
        scheduler.schedule_once("delete-file", lambda: None, 5)
        scheduler.schedule_once("delete-file", lambda: None, 5)
        scheduler.shutdown()


@pytest.mark.parametrize(
    ("delay_s", "period_s"),
    [(-1, 1), (0, 0), (0, -5), (float("nan"), 1), (0, float("inf"))],
    ids=["negative-delay", "zero-period", "negative-period", "nan-delay", "infinite-period"],
)
async def test_invalid_delay_or_period_is_refused(delay_s: float, period_s: float) -> None:
    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        with pytest.raises(ValueError, match="'t'"):
            scheduler.schedule("t", lambda: None, delay_s, period_s)


async def test_statistics_report_runs_failures_and_durations(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flip = [False]

    async def sometimes() -> None:
        await trio.sleep(0.25)
        flip[0] = not flip[0]
        if flip[0]:
            raise RuntimeError("odd run")

    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        with structlog.testing.capture_logs():
            scheduler.schedule("flaky", sometimes, 0, 1)
            await trio.sleep(3.5)
        [stats] = scheduler.statistics()
        scheduler.shutdown()
    assert (stats.name, stats.period_s, stats.runs, stats.failures) == ("flaky", 1, 4, 2)
    assert stats.last_duration_s == pytest.approx(0.25)
    assert not stats.done


async def test_aclose_waits_for_a_run_finishing_in_a_worker_thread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    gate = threading.Event()
    entered = trio.Event()
    thread_done: list[bool] = []
    closed = trio.Event()

    def blocking_work() -> None:
        gate.wait()
        thread_done.append(True)

    async def task_fn() -> None:
        entered.set()
        await trio.to_thread.run_sync(blocking_work)

    async with trio.open_nursery() as nursery:
        scheduler = Scheduler(nursery)
        scheduler.schedule("work", task_fn, 0, 60)
        scheduler.schedule("idle", lambda: None, 30, 60)
        await entered.wait()

        async def close() -> None:
            await scheduler.aclose()
            closed.set()

        nursery.start_soon(close)
        await trio.testing.wait_all_tasks_blocked()
        assert not closed.is_set()  # the thread is still working
        gate.set()
        await closed.wait()
        assert thread_done == [True]
        assert scheduler.statistics() == []
