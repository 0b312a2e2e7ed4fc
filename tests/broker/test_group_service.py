"""The group coordinator's driver (broker/group_service.py) with the real handlers, a
real BrokerContext over a real LogManager, and the `__consumer_offsets` log on disk.

Requests go through the schema layer and the dispatch table, as the msgpack codec
sends them; `serve()` runs in the test's nursery and ticks on the wall clock (or on
a clock the test moves, for offsets retention).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig
from broker.context import BrokerContext
from broker.dispatch import handler_for
from broker.groupcommit import GroupCommitter
from broker.longpoll import AppendNotifier
from broker.metrics import BrokerMetrics
from protocol.offsets_schema import OFFSETS_TOPIC
from protocol.schemas import validate_request_body, validate_response_body
from storage.manager import LogManager

SESSION_MS = 600
GROUP_PROPS = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 100,
}


@dataclass
class MovableClock:
    """The broker's wall clock, which a test may push forward."""

    offset_ms: int = 0

    def __call__(self) -> int:
        return int(time.time() * 1000) + self.offset_ms


def _context(
    data_dir: Path, nursery: trio.Nursery, clock: Callable[[], int], **props: Any
) -> BrokerContext:
    config = BrokerConfig.from_props({**GROUP_PROPS, **props}, data_dir=data_dir)
    manager = LogManager(config.data_dir, config.log_config, clock_ms=clock)
    manager.open()
    return BrokerContext(
        config=config,
        manager=manager,
        notifier=AppendNotifier(),
        committer=GroupCommitter(nursery),
        metrics=BrokerMetrics("test"),
        clock_ms=clock,
    )


@pytest.fixture
def clock() -> MovableClock:
    return MovableClock()


@pytest.fixture
async def ctx(
    tmp_path: Path, nursery: trio.Nursery, clock: MovableClock
) -> AsyncIterator[BrokerContext]:
    context = _context(tmp_path / "data", nursery, clock)
    await nursery.start(context.groups.serve)
    try:
        yield context
    finally:
        context.groups.close()
        context.manager.close()


async def api(ctx: BrokerContext, name: str, body: dict[str, Any]) -> dict[str, Any]:
    """Validate, run the handler, and check the answer against the response schema."""
    answer = await handler_for(name)(ctx, validate_request_body(name, body))
    assert isinstance(answer, dict)
    validate_response_body(name, answer)
    return answer


def _join_body(member_id: str, protocols: list[tuple[str, bytes]]) -> dict[str, Any]:
    return {
        "group": "g",
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [{"name": n, "metadata": m} for n, m in protocols],
        "session_timeout_ms": SESSION_MS,
        "rebalance_timeout_ms": 5_000,
        "client_id": "test",
    }


async def join(
    ctx: BrokerContext, member_id: str = "", protocols: list[tuple[str, bytes]] | None = None
) -> dict[str, Any]:
    """A member's join, rejoining once with the id a MEMBER_ID_REQUIRED answer gives."""
    protocols = protocols or [("range", b"meta")]
    answer = await api(ctx, "join_group", _join_body(member_id, protocols))
    if answer["error"] == "MEMBER_ID_REQUIRED":
        assert not member_id and answer["member_id"]
        answer = await api(ctx, "join_group", _join_body(answer["member_id"], protocols))
    return answer


async def sync(
    ctx: BrokerContext, joined: dict[str, Any], plan: dict[str, bytes] | None = None
) -> dict[str, Any]:
    body = {
        "group": "g",
        "member_id": joined["member_id"],
        "generation": joined["generation"],
        "assignments": [{"member_id": m, "assignment": a} for m, a in (plan or {}).items()],
    }
    return await api(ctx, "sync_group", body)


async def heartbeat(ctx: BrokerContext, joined: dict[str, Any]) -> str | None:
    body = {"group": "g", "member_id": joined["member_id"], "generation": joined["generation"]}
    return (await api(ctx, "heartbeat", body))["error"]


async def join_together(ctx: BrokerContext, *member_ids: str) -> list[dict[str, Any]]:
    answers: list[dict[str, Any]] = [{} for _ in member_ids]
    async with trio.open_nursery() as n:
        for index, member_id in enumerate(member_ids):

            async def one(index: int = index, member_id: str = member_id) -> None:
                answers[index] = await join(ctx, member_id)

            n.start_soon(one)
    return answers


async def two_member_group(ctx: BrokerContext) -> tuple[dict[str, Any], dict[str, Any]]:
    """A alone (generation 1), then B joins and A rejoins: generation 2, Stable."""
    first = await join(ctx)
    assert first["error"] is None and first["generation"] == 1
    assert (await sync(ctx, first, {first["member_id"]: b"all"}))["assignment"] == b"all"
    second_id = (await api(ctx, "join_group", _join_body("", [("range", b"meta")])))["member_id"]

    async def b_joins() -> None:
        results[1] = await join(ctx, second_id)

    results: list[dict[str, Any]] = [{}, {}]
    async with trio.open_nursery() as n:
        n.start_soon(b_joins)
        # A learns of the rebalance by its heartbeat, then rejoins.
        with trio.fail_after(5):
            while await heartbeat(ctx, first) is None:
                await trio.sleep(0.01)
        results[0] = await join(ctx, first["member_id"])
    a, b = results
    assert a["generation"] == b["generation"] == 2
    leader, follower = (a, b) if a["leader"] == a["member_id"] else (b, a)
    plan = {leader["member_id"]: b"p0", follower["member_id"]: b"p1"}
    async with trio.open_nursery() as n:
        synced: dict[str, bytes] = {}

        async def sync_one(joined: dict[str, Any], with_plan: bool) -> None:
            answer = await sync(ctx, joined, plan if with_plan else None)
            assert answer["error"] is None, answer
            synced[joined["member_id"]] = answer["assignment"]

        n.start_soon(sync_one, follower, False)  # waits for the leader's assignment
        n.start_soon(sync_one, leader, True)
    assert synced == plan
    return leader, follower


async def test_two_members_join_sync_and_are_described(ctx: BrokerContext) -> None:
    leader, follower = await two_member_group(ctx)
    assert {m["member_id"] for m in leader["members"]} == {
        leader["member_id"],
        follower["member_id"],
    }
    assert follower["members"] == []  # only the leader sees the members
    [described] = (await api(ctx, "describe_groups", {"groups": ["g"]}))["groups"]
    assert (described["state"], described["generation"], described["protocol"]) == (
        "Stable",
        2,
        "range",
    )
    assignments = {m["member_id"]: m["assignment"] for m in described["members"]}
    assert assignments == {leader["member_id"]: b"p0", follower["member_id"]: b"p1"}
    listed = (await api(ctx, "list_groups", {}))["groups"]
    assert listed == [{"group": "g", "state": "Stable", "protocol_type": "consumer"}]


async def test_a_member_that_stops_heartbeating_is_removed(ctx: BrokerContext) -> None:
    leader, follower = await two_member_group(ctx)
    # Only the leader heartbeats; the follower's session expires and a rebalance starts.
    with trio.fail_after(10):
        while (error := await heartbeat(ctx, leader)) is None:
            await trio.sleep(0.05)
    assert error == "REBALANCE_IN_PROGRESS"
    rejoined = await join(ctx, leader["member_id"])
    assert rejoined["generation"] == 3
    assert [m["member_id"] for m in rejoined["members"]] == [leader["member_id"]]
    assert await heartbeat(ctx, follower) == "UNKNOWN_MEMBER_ID"


async def test_commits_are_fenced_by_generation(ctx: BrokerContext) -> None:
    await api(ctx, "create_topic", {"topic": "t", "partitions": 2})
    leader, follower = await two_member_group(ctx)

    def commit(joined: dict[str, Any], generation: int, offset: int) -> dict[str, Any]:
        return {
            "group": "g",
            "generation": generation,
            "member_id": joined["member_id"],
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": offset}]}],
        }

    ok = await api(ctx, "commit_offsets", commit(leader, 2, 10))
    assert ok["topics"][0]["partitions"][0]["error"] is None
    stale = await api(ctx, "commit_offsets", commit(follower, 1, 99))
    part = stale["topics"][0]["partitions"][0]
    assert part["error"] == "ILLEGAL_GENERATION" and "group g" in part["message"]
    # Without a generation (outside group management) while the group has members.
    outsider = await api(ctx, "commit_offsets", commit({"member_id": ""}, -1, 98))
    assert outsider["topics"][0]["partitions"][0]["error"] == "UNKNOWN_MEMBER_ID"
    fetched = await api(ctx, "fetch_offsets", {"group": "g"})
    assert fetched["topics"][0]["partitions"] == [
        {"partition": 0, "offset": 10, "metadata": "", "error": None, "message": None}
    ]


async def test_leave_then_delete(ctx: BrokerContext) -> None:
    leader, follower = await two_member_group(ctx)
    refused = (await api(ctx, "delete_groups", {"groups": ["g", "nope"]}))["groups"]
    assert [(g["group"], g["error"]) for g in refused] == [
        ("g", "NON_EMPTY_GROUP"),
        ("nope", "GROUP_ID_NOT_FOUND"),
    ]
    left = await api(
        ctx,
        "leave_group",
        {"group": "g", "members": [{"member_id": m["member_id"]} for m in (leader, follower)]},
    )
    assert left["error"] is None and [m["error"] for m in left["members"]] == [None, None]
    [described] = (await api(ctx, "describe_groups", {"groups": ["g"]}))["groups"]
    assert described["state"] == "Empty" and described["members"] == []
    deleted = (await api(ctx, "delete_groups", {"groups": ["g"]}))["groups"]
    assert deleted == [{"group": "g", "error": None, "message": None}]
    [gone] = (await api(ctx, "describe_groups", {"groups": ["g"]}))["groups"]
    assert gone["state"] == "Dead"


async def test_group_and_offsets_survive_a_restart(
    tmp_path: Path, nursery: trio.Nursery, clock: MovableClock
) -> None:
    data_dir = tmp_path / "data"
    first = _context(data_dir, nursery, clock)
    await nursery.start(first.groups.serve)
    await api(first, "create_topic", {"topic": "t", "partitions": 2})
    leader, follower = await two_member_group(first)
    commit = {
        "group": "g",
        "generation": 2,
        "member_id": follower["member_id"],
        "topics": [{"topic": "t", "partitions": [{"partition": 1, "offset": 7, "metadata": "m"}]}],
    }
    assert (await api(first, "commit_offsets", commit))["topics"][0]["partitions"][0][
        "error"
    ] is None
    first.groups.close()
    first.manager.close()

    again = _context(data_dir, nursery, clock)
    await nursery.start(again.groups.serve)
    try:
        [described] = (await api(again, "describe_groups", {"groups": ["g"]}))["groups"]
        assert (described["state"], described["generation"]) == ("Stable", 2)
        assert {m["member_id"]: m["assignment"] for m in described["members"]} == {
            leader["member_id"]: b"p0",
            follower["member_id"]: b"p1",
        }
        # The members carry on in their generation; sessions restarted with the broker.
        assert await heartbeat(again, leader) is None
        fetched = await api(again, "fetch_offsets", {"group": "g"})
        assert fetched["topics"][0]["partitions"][0]["offset"] == 7
        assert fetched["topics"][0]["partitions"][0]["metadata"] == "m"
        stats = again.groups.statistics()
        assert stats.malformed_records == 0 and stats.loaded_records >= 3
    finally:
        again.groups.close()
        again.manager.close()


async def test_offsets_of_an_empty_group_expire_after_retention(
    tmp_path: Path, nursery: trio.Nursery, clock: MovableClock
) -> None:
    data_dir = tmp_path / "data"
    props = {"offsets.retention.minutes": 1, "offsets.retention.check.interval.ms": 50}
    first = _context(data_dir, nursery, clock, **props)
    await nursery.start(first.groups.serve)
    await api(first, "create_topic", {"topic": "t", "partitions": 1})
    commit = {
        "group": "g",
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": 5}]}],
    }
    await api(first, "commit_offsets", commit)
    await trio.sleep(0.2)  # several retention checks: nothing is old enough yet
    assert (await api(first, "fetch_offsets", {"group": "g"}))["topics"] != []
    clock.offset_ms += 61_000
    with trio.fail_after(5):
        while (await api(first, "fetch_offsets", {"group": "g"}))["topics"]:
            await trio.sleep(0.05)
    assert (await api(first, "list_groups", {}))["groups"] == []
    first.groups.close()
    first.manager.close()

    # The expiry was written (tombstones): a restart does not bring the offsets back.
    again = _context(data_dir, nursery, clock, **props)
    try:
        assert (await api(again, "fetch_offsets", {"group": "g"}))["topics"] == []
        assert OFFSETS_TOPIC in again.manager.topics()
    finally:
        again.manager.close()


async def test_a_join_answered_after_the_client_left_is_dropped(ctx: BrokerContext) -> None:
    first = await join(ctx)
    await sync(ctx, first, {first["member_id"]: b"x"})
    second_id = (await api(ctx, "join_group", _join_body("", [("range", b"m")])))["member_id"]
    with trio.move_on_after(0.2):  # B gives up waiting (its connection closed)
        await join(ctx, second_id)
    # A rejoins; the join phase completes with both, and B's answer goes nowhere.
    rejoined = await join(ctx, first["member_id"])
    assert rejoined["generation"] == 2
    assert {m["member_id"] for m in rejoined["members"]} == {first["member_id"], second_id}
