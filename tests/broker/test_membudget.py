"""The broker-wide memory budget (queued.max.request.bytes): who waits, who does not."""

from __future__ import annotations

import trio
import trio.testing

from broker.membudget import (
    GRANT_MIN_BYTES,
    SMALL_REQUEST_BYTES,
    TRIM_AFTER_CONNECTIONS,
    TRIM_AFTER_FREED_BYTES,
    TRIM_MIN_INTERVAL_S,
    MemoryBudget,
)

MIB = 1024 * 1024


async def test_a_large_request_waits_until_room_is_released() -> None:
    budget = MemoryBudget(8 * MIB)
    budget.charge(6 * MIB)
    got = trio.Event()

    async def reader() -> None:
        await budget.acquire(4 * MIB)
        got.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reader)
        await trio.testing.wait_all_tasks_blocked()
        assert not got.is_set()  # muted: 6 + 4 > 8
        budget.release(3 * MIB)
        await got.wait()
    assert budget.used_bytes == 7 * MIB
    assert budget.statistics().waits == 1


async def test_small_requests_and_a_lone_oversized_one_never_wait() -> None:
    budget = MemoryBudget(2 * MIB)
    budget.charge(2 * MIB)
    with trio.move_on_after(5) as scope:
        await budget.acquire(SMALL_REQUEST_BYTES)  # a neighbour's small request
    assert not scope.cancelled_caught
    budget.release(2 * MIB + SMALL_REQUEST_BYTES)
    await budget.acquire(10 * MIB)  # alone, anything fits
    assert budget.used_bytes == 10 * MIB
    assert budget.room() == 0


async def test_a_connection_holding_answers_waits_while_one_holding_nothing_is_served() -> None:
    """Issue 38 #5: peers that never read hold answers; a consumer that reads (holding
    nothing) is granted room at once even when the budget is full, while a holder waits
    until the budget is below capacity less the reserve."""
    budget = MemoryBudget(8 * MIB)
    budget.charge(8 * MIB)  # answers nobody reads
    assert await budget.grant(0, 8 * MIB) == GRANT_MIN_BYTES  # full: a small grant, no wait
    budget.release(GRANT_MIN_BYTES, freed=False)
    granted: list[int] = []

    async def holder() -> None:
        granted.append(await budget.grant(MIB // 4, 8 * MIB))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(holder)
        await trio.testing.wait_all_tasks_blocked()
        assert not granted
        budget.release(budget.reserve_bytes)  # down to capacity - reserve: still waits
        await trio.testing.wait_all_tasks_blocked()
        assert not granted
        budget.release(MIB)
    assert granted == [budget.share_bytes - MIB // 4]  # its share less what it holds
    assert budget.statistics().waits == 1


async def test_grants_are_bounded_by_the_share_and_reserved_so_they_add_up() -> None:
    budget = MemoryBudget(64 * MIB)
    first = await budget.grant(0, 55 * MIB)
    assert first == budget.share_bytes == 8 * MIB
    with budget.granted(first):
        assert budget.room() == first  # what the fetch reads within
    assert budget.room() == 64 * MIB - first
    assert (
        await budget.grant(budget.share_bytes - MIB, 55 * MIB) == MIB
    )  # its share less what it holds
    grants = [await budget.grant(0, 55 * MIB) for _ in range(7)]
    assert budget.used_bytes == 64 * MIB  # concurrent grants never overlap
    assert grants[-1] == 7 * MIB


def test_releases_never_trim_and_the_task_trims_at_most_every_interval() -> None:
    """A trim hands back pages the next requests fault in again: it waits for the
    `memory-trim` task, which trims once enough was freed, usage is low, and the
    last trim is `TRIM_MIN_INTERVAL_S` old."""
    budget = MemoryBudget(64 * MIB)
    for _ in range(4):
        budget.charge(TRIM_AFTER_FREED_BYTES)
        budget.release(TRIM_AFTER_FREED_BYTES)
    assert budget.statistics().trims == 0  # four times the threshold released
    assert budget.trim_if_due(now=100.0)
    assert budget.statistics().trims == 1
    budget.charge(TRIM_AFTER_FREED_BYTES)
    budget.release(TRIM_AFTER_FREED_BYTES)
    assert not budget.trim_if_due(now=100.0 + TRIM_MIN_INTERVAL_S / 2)  # too soon
    assert budget.trim_if_due(now=100.0 + TRIM_MIN_INTERVAL_S)
    assert not budget.trim_if_due(now=200.0)  # nothing freed since
    assert budget.statistics().trims == 2


def test_no_trim_while_the_budget_is_in_use_or_little_was_freed() -> None:
    budget = MemoryBudget(64 * MIB)
    budget.charge(TRIM_AFTER_FREED_BYTES // 2)
    budget.release(TRIM_AFTER_FREED_BYTES // 2)
    assert not budget.trim_if_due(now=100.0)  # half the threshold
    budget.charge(TRIM_AFTER_FREED_BYTES)
    budget.release(TRIM_AFTER_FREED_BYTES // 2, freed=False)  # a reservation never filled
    assert not budget.trim_if_due(now=100.0)
    budget.charge(TRIM_AFTER_FREED_BYTES)  # in use again: 96 MiB of 64
    budget.release(TRIM_AFTER_FREED_BYTES // 2)
    assert budget.used_bytes > budget.capacity_bytes // 4
    assert not budget.trim_if_due(now=100.0)
    budget.release(budget.used_bytes)
    assert budget.trim_if_due(now=100.0)


def test_a_churn_of_ended_connections_makes_a_trim_due() -> None:
    """Short connections (refused TLS peers) free little budget each but leave their
    buffers in cycles and the heap fragmented: enough of them ending is due a trim."""
    budget = MemoryBudget(64 * MIB)
    for _ in range(TRIM_AFTER_CONNECTIONS - 1):
        budget.abandon(0)
    assert not budget.trim_if_due(now=100.0)
    budget.abandon(0)
    assert budget.trim_if_due(now=100.0)
    assert not budget.trim_if_due(now=100.0 + TRIM_MIN_INTERVAL_S)  # none ended since


async def test_a_grant_is_no_larger_than_the_answer_asked_for() -> None:
    """A consumer asking for 1 MiB (long-polling, say) reserves 1 MiB, not its share."""
    budget = MemoryBudget(64 * MIB)
    assert await budget.grant(0, MIB) == MIB
    assert await budget.grant(0, 100) == 100  # under the floor too
