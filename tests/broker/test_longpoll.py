"""AppendNotifier: long-polling fetches woken by real log appends, never by polling."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.longpoll import AppendNotifier
from protocol.batch import encode_batch
from storage.manager import LogManager


@pytest.fixture
def manager(tmp_path: Path) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data")
    m.open()
    m.create_topic("t", 2)
    yield m
    m.close()


def _batch() -> bytes:
    return encode_batch([(b"k", b"v", (), None)], now_ms=int(time.time() * 1000))


async def test_append_on_the_event_loop_wakes_the_waiter(manager: LogManager) -> None:
    notifier = AppendNotifier()
    plog = manager.get_log("t", 0)
    woken: list[bool] = []
    async with trio.open_nursery() as nursery:

        async def fetcher() -> None:
            with notifier.subscribe([plog]) as sub:
                woken.append(await sub.wait_until(trio.current_time() + 3600))

        nursery.start_soon(fetcher)
        await trio.testing.wait_all_tasks_blocked()
        assert notifier.waiting_count() == 1
        plog.append(_batch())
    assert woken == [True]
    assert notifier.waiting_count() == 0


async def test_append_from_a_worker_thread_wakes_the_waiter(manager: LogManager) -> None:
    notifier = AppendNotifier()
    logs = [manager.get_log("t", 0), manager.get_log("t", 1)]
    with notifier.subscribe(logs) as sub:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(trio.to_thread.run_sync, logs[1].append, _batch())
            assert await sub.wait_until(trio.current_time() + 3600)


async def test_an_append_between_read_and_wait_is_not_lost(manager: LogManager) -> None:
    notifier = AppendNotifier()
    plog = manager.get_log("t", 0)
    with notifier.subscribe([plog]) as sub:
        # "read" found nothing; the append lands before the fetch starts waiting
        plog.append(_batch())
        assert await sub.wait_until(trio.current_time() + 3600)


async def test_deadline_without_append(
    manager: LogManager, autojump_clock: trio.testing.MockClock
) -> None:
    notifier = AppendNotifier()
    with notifier.subscribe([manager.get_log("t", 0)]) as sub:
        start = trio.current_time()
        assert not await sub.wait_until(start + 30)
        assert trio.current_time() - start == pytest.approx(30)


async def test_appends_to_other_logs_do_not_wake(
    manager: LogManager, autojump_clock: trio.testing.MockClock
) -> None:
    notifier = AppendNotifier()
    other = manager.get_log("t", 1)
    woken: list[Any] = []
    with notifier.subscribe([manager.get_log("t", 0)]) as sub, notifier.subscribe([other]):
        other.append(_batch())
        woken.append(await sub.wait_until(trio.current_time() + 5))
    assert woken == [False]


async def test_rearmed_after_each_wake(manager: LogManager) -> None:
    notifier = AppendNotifier()
    plog = manager.get_log("t", 0)
    with notifier.subscribe([plog]) as sub:
        plog.append(_batch())
        assert await sub.wait_until(trio.current_time() + 3600)
        assert not sub.event.is_set()
        plog.append(_batch())
        assert await sub.wait_until(trio.current_time() + 3600)


async def test_close_wakes_everyone_now_and_later(manager: LogManager) -> None:
    notifier = AppendNotifier()
    plog = manager.get_log("t", 0)
    results: list[bool] = []
    async with trio.open_nursery() as nursery:

        async def fetcher() -> None:
            with notifier.subscribe([plog]) as sub:
                results.append(await sub.wait_until(trio.current_time() + 3600))

        nursery.start_soon(fetcher)
        nursery.start_soon(fetcher)
        await trio.testing.wait_all_tasks_blocked()
        notifier.close()
    assert results == [True, True]
    with notifier.subscribe([plog]) as sub:
        assert await sub.wait_until(trio.current_time() + 3600)


async def test_one_listener_per_log_however_many_waiters(manager: LogManager) -> None:
    notifier = AppendNotifier()
    plog = manager.get_log("t", 0)
    calls: list[object] = []
    plog.add_append_listener(calls.append)
    for _ in range(5):
        with notifier.subscribe([plog]):
            pass
    # our own listener plus exactly one of the notifier's
    assert plog._listeners.count(notifier._on_append) == 1
