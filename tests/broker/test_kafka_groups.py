"""The Kafka group adapters (broker/kafka/groups.py) on requests kafka-python's own
protocol classes encoded, run with a real BrokerContext over a temporary data dir;
the answers are encoded by our codec and decoded again by kafka-python."""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig
from broker.context import BrokerContext, ConnectionState
from broker.dispatch import handler_for
from broker.groupcommit import GroupCommitter
from broker.kafka.call import KafkaCall
from broker.kafka.groups import kafka_client_host
from broker.kafka.registry import KAFKA_HANDLERS
from broker.longpoll import AppendNotifier
from broker.metrics import BrokerMetrics
from harness.kafka_python import kp_class
from protocol.kafka.codec import decode_request, encode_response
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.schemas import validate_request_body
from storage.manager import LogManager

CODE = {name: error.code for name, error in ERRORS_BY_NAME.items()}
JOIN, SYNC, HEARTBEAT, LEAVE = 11, 14, 12, 13
COMMIT, FETCH, FIND, DESCRIBE, LIST, DELETE, OFFSET_DELETE = 8, 9, 10, 15, 16, 42, 47


@pytest.fixture
async def ctx(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[BrokerContext]:
    config = BrokerConfig.from_props(
        {"group.initial.rebalance.delay.ms": 0, "node.id": 7},
        data_dir=tmp_path / "data",
        listen=("127.0.0.1", 9192),
    )
    manager = LogManager(config.data_dir, config.log_config)
    manager.open()
    context = BrokerContext(
        config=config,
        manager=manager,
        notifier=AppendNotifier(),
        committer=GroupCommitter(nursery),
        metrics=BrokerMetrics("test"),
    )
    await nursery.start(context.groups.serve)
    await handler_for("create_topic")(
        context, validate_request_body("create_topic", {"topic": "t", "partitions": 2})
    )
    try:
        yield context
    finally:
        context.groups.close()
        manager.close()


def kp(api_key: int, version: int, **fields: Any) -> Any:
    """A kafka-python request object (its nested classes reached by name)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return kp_class(api_key, True)[version](**fields)


async def run(ctx: BrokerContext, message: Any) -> Any:
    """kafka-python's bytes -> our codec -> the adapter -> our bytes -> kafka-python."""
    message.with_header(correlation_id=5, client_id="kafka-python")
    request = decode_request(bytes(message.encode(header=True, framed=True))[4:])
    conn = ConnectionState(conn_id=1, peer="127.0.0.1:40000")
    answer = await KAFKA_HANDLERS[request.api.key](KafkaCall(ctx, conn, request))
    assert isinstance(answer, dict)
    frame = encode_response(request.api, request.version, 5, answer)
    theirs = kp_class(request.api.key, False)[request.version]
    response = theirs.decode(frame[4:], header=True)
    assert response.header.correlation_id == 5
    return response


def join_request(version: int, member_id: str = "", group: str = "g") -> Any:
    protocol = kp_class(JOIN, True).JoinGroupRequestProtocol(name="range", metadata=b"sub")
    fields: dict[str, Any] = {
        "group_id": group,
        "session_timeout_ms": 10_000,
        "member_id": member_id,
        "protocol_type": "consumer",
        "protocols": [protocol],
    }
    if version >= 1:
        fields["rebalance_timeout_ms"] = 5_000
    return kp(JOIN, version, **fields)


async def stable_member(ctx: BrokerContext, group: str = "g") -> tuple[str, int]:
    """One Kafka member, joined (v5, with MEMBER_ID_REQUIRED) and synced."""
    first = await run(ctx, join_request(5, group=group))
    assert first.error_code == CODE["MEMBER_ID_REQUIRED"] and first.member_id
    joined = await run(ctx, join_request(5, first.member_id, group))
    assert joined.error_code == 0 and joined.leader == joined.member_id
    assert [(m.member_id, m.metadata) for m in joined.members] == [(joined.member_id, b"sub")]
    assignment = kp_class(SYNC, True).SyncGroupRequestAssignment(
        member_id=joined.member_id, assignment=b"plan"
    )
    synced = await run(
        ctx,
        kp(
            SYNC,
            3,
            group_id=group,
            generation_id=joined.generation_id,
            member_id=joined.member_id,
            assignments=[assignment],
        ),
    )
    assert (synced.error_code, synced.assignment) == (0, b"plan")
    return joined.member_id, joined.generation_id


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_find_coordinator_names_this_broker(ctx: BrokerContext, version: int) -> None:
    fields = {"key": "g"} if version == 0 else {"key": "g", "key_type": 0}
    found = await run(ctx, kp(FIND, version, **fields))
    assert (found.error_code, found.node_id, found.host, found.port) == (0, 7, "127.0.0.1", 9192)


async def test_join_sync_heartbeat_and_describe(ctx: BrokerContext) -> None:
    member, generation = await stable_member(ctx)
    beat = await run(
        ctx, kp(HEARTBEAT, 3, group_id="g", generation_id=generation, member_id=member)
    )
    assert beat.error_code == 0
    stale = await run(
        ctx, kp(HEARTBEAT, 0, group_id="g", generation_id=generation + 5, member_id=member)
    )
    assert stale.error_code == CODE["ILLEGAL_GENERATION"]
    unknown = await run(
        ctx, kp(HEARTBEAT, 1, group_id="g", generation_id=generation, member_id="x")
    )
    assert unknown.error_code == CODE["UNKNOWN_MEMBER_ID"]
    [described] = (await run(ctx, kp(DESCRIBE, 4, groups=["g", "nope"]))).groups[:1]
    assert (described.group_state, described.protocol_type, described.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    [m] = described.members
    # Kafka's broker answers Java's InetAddress.toString() of the client's address, and
    # kafka-consumer-groups.sh prints it as is (tests/interop/test_java_tools.py).
    assert (m.member_id, m.client_id, m.client_host) == (member, "kafka-python", "/127.0.0.1")
    assert (m.member_metadata, m.member_assignment) == (b"sub", b"plan")
    listed = await run(ctx, kp(LIST, 2))
    assert [(g.group_id, g.protocol_type) for g in listed.groups] == [("g", "consumer")]


async def test_join_before_v4_needs_no_member_id_round(ctx: BrokerContext) -> None:
    joined = await run(ctx, join_request(3))
    assert joined.error_code == 0 and joined.member_id.startswith("kafka-python-")
    assert joined.generation_id == 1
    v0 = await run(ctx, join_request(0, group="old"))
    assert v0.error_code == 0


async def test_a_kafka_member_and_a_tidelog_member_share_a_group(ctx: BrokerContext) -> None:
    member, _ = await stable_member(ctx)
    native = handler_for("join_group")
    body = {
        "group": "g",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"tidelog-sub"}],
        "session_timeout_ms": 10_000,
    }
    first = await native(ctx, validate_request_body("join_group", body))
    assert first["error"] == "MEMBER_ID_REQUIRED"
    body["member_id"] = first["member_id"]
    answers: dict[str, Any] = {}
    async with trio.open_nursery() as n:

        async def tidelog_joins() -> None:
            answers["tidelog"] = await native(ctx, validate_request_body("join_group", body))

        n.start_soon(tidelog_joins)
        with trio.fail_after(5):  # the Kafka member learns of the rebalance, then rejoins
            while (
                await run(ctx, kp(HEARTBEAT, 3, group_id="g", generation_id=1, member_id=member))
            ).error_code == 0:
                await trio.sleep(0.01)
        answers["kafka"] = await run(ctx, join_request(5, member))
    kafka, tidelog = answers["kafka"], answers["tidelog"]
    assert kafka.generation_id == tidelog["generation"] == 2
    assert kafka.leader == tidelog["leader"] == member  # the older member leads
    assert {m.member_id: m.metadata for m in kafka.members} == {
        member: b"sub",
        first["member_id"]: b"tidelog-sub",
    }


def _commit(
    group: str, generation: int, member: str, offset: int, metadata: str = "", version: int = 7
) -> Any:
    cls = kp_class(COMMIT, True)
    partition = cls.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
        partition_index=1, committed_offset=offset, committed_metadata=metadata
    )
    topic = cls.OffsetCommitRequestTopic(name="t", partitions=[partition])
    return kp(
        COMMIT,
        version,
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[topic],
    )


async def test_offset_commit_is_fenced_and_fetched(ctx: BrokerContext) -> None:
    member, generation = await stable_member(ctx)
    ok = await run(ctx, _commit("g", generation, member, 42, "note"))
    assert ok.topics[0].partitions[0].error_code == 0
    stale = await run(ctx, _commit("g", generation - 1, member, 43))
    assert stale.topics[0].partitions[0].error_code == CODE["ILLEGAL_GENERATION"]
    too_large = await run(ctx, _commit("g", generation, member, 44, "x" * 5000))
    assert too_large.topics[0].partitions[0].error_code == CODE["OFFSET_METADATA_TOO_LARGE"]
    topic = kp_class(FETCH, True).OffsetFetchRequestTopic(name="t", partition_indexes=[0, 1])
    fetched = await run(ctx, kp(FETCH, 5, group_id="g", topics=[topic]))
    got = [
        (p.partition_index, p.committed_offset, p.metadata, p.error_code)
        for p in fetched.topics[0].partitions
    ]
    assert got == [(0, -1, "", 0), (1, 42, "note", 0)]
    everything = await run(ctx, kp(FETCH, 2, group_id="g", topics=None))
    assert [(t.name, [p.committed_offset for p in t.partitions]) for t in everything.topics] == [
        ("t", [42])
    ]


async def test_leave_delete_and_offset_delete(ctx: BrokerContext) -> None:
    member, generation = await stable_member(ctx)
    await run(ctx, _commit("g", generation, member, 9))
    refused = await run(ctx, kp(DELETE, 1, groups_names=["g", "nope"]))
    assert [(r.group_id, r.error_code) for r in refused.results] == [
        ("g", CODE["NON_EMPTY_GROUP"]),
        ("nope", CODE["GROUP_ID_NOT_FOUND"]),
    ]
    cls = kp_class(OFFSET_DELETE, True)
    part = cls.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(partition_index=1)
    drop = kp(
        OFFSET_DELETE,
        0,
        group_id="g",
        topics=[cls.OffsetDeleteRequestTopic(name="t", partitions=[part])],
    )
    assert (await run(ctx, drop)).error_code == CODE["NON_EMPTY_GROUP"]
    left = await run(ctx, kp(LEAVE, 1, group_id="g", member_id=member))
    assert left.error_code == 0
    again = await run(ctx, kp(LEAVE, 1, group_id="g", member_id=member))
    assert again.error_code == CODE["UNKNOWN_MEMBER_ID"]
    assert (await run(ctx, drop)).error_code == 0
    fetched = await run(ctx, kp(FETCH, 5, group_id="g", topics=None))
    assert fetched.topics == []
    deleted = await run(ctx, kp(DELETE, 0, groups_names=["g"]))
    assert [(r.group_id, r.error_code) for r in deleted.results] == [("g", 0)]


async def test_leave_v3_by_several_members(ctx: BrokerContext) -> None:
    member, _ = await stable_member(ctx)
    identity = kp_class(LEAVE, True).MemberIdentity
    left = await run(
        ctx,
        kp(LEAVE, 3, group_id="g", members=[identity(member_id=member), identity(member_id="x")]),
    )
    assert left.error_code == 0
    assert [(m.member_id, m.error_code) for m in left.members] == [
        (member, 0),
        ("x", CODE["UNKNOWN_MEMBER_ID"]),
    ]


@pytest.mark.parametrize(
    ("host", "kafka"),
    [
        ("127.0.0.1", "/127.0.0.1"),
        ("10.1.2.3", "/10.1.2.3"),
        ("::1", "/0:0:0:0:0:0:0:1"),
        ("fe80::ab:1", "/fe80:0:0:0:0:0:ab:1"),
        ("memory", "memory"),
    ],
)
def test_member_hosts_are_written_as_javas_inetaddress(host: str, kafka: str) -> None:
    assert kafka_client_host(host) == kafka


# --- the flexible versions (issue 36) ---------------------------------------------


async def test_find_coordinator_v4_answers_each_key(ctx: BrokerContext) -> None:
    found = await run(ctx, kp(FIND, 4, key_type=0, coordinator_keys=["g", "h"]))
    assert [(c.key, c.error_code, c.node_id, c.port) for c in found.coordinators] == [
        ("g", 0, 7, 9192),
        ("h", 0, 7, 9192),
    ]
    # a transactional id: retriable until the transaction log is loaded, then this broker
    other = await run(ctx, kp(FIND, 6, key_type=1, coordinator_keys=["txn"]))
    assert [(c.key, c.error_code, c.node_id) for c in other.coordinators] == [
        ("txn", CODE["COORDINATOR_NOT_AVAILABLE"], -1)
    ]
    await ctx.transactions.load()
    other = await run(ctx, kp(FIND, 6, key_type=1, coordinator_keys=["txn", ""]))
    assert [(c.key, c.error_code, c.node_id) for c in other.coordinators] == [
        ("txn", 0, 7),
        ("", CODE["INVALID_REQUEST"], -1),
    ]
    share = await run(ctx, kp(FIND, 6, key_type=2, coordinator_keys=["s"]))
    assert share.coordinators[0].error_code == CODE["INVALID_REQUEST"]


async def test_the_latest_group_versions_run_a_member(ctx: BrokerContext) -> None:
    """JoinGroup 9, SyncGroup 5 (its protocol checked), Heartbeat 4, DescribeGroups 6,
    ListGroups 5 with its filters, LeaveGroup 5: Kafka's flexible layouts throughout."""
    protocol = kp_class(JOIN, True).JoinGroupRequestProtocol(name="range", metadata=b"sub")
    fields: dict[str, Any] = {
        "group_id": "g", "session_timeout_ms": 10_000, "rebalance_timeout_ms": 5_000,
        "protocol_type": "consumer", "protocols": [protocol], "reason": "test",
    }  # fmt: skip
    first = await run(ctx, kp(JOIN, 9, member_id="", **fields))
    assert first.error_code == CODE["MEMBER_ID_REQUIRED"]
    joined = await run(ctx, kp(JOIN, 9, member_id=first.member_id, **fields))
    assert (joined.error_code, joined.protocol_type, joined.protocol_name) == (
        0, "consumer", "range",
    )  # fmt: skip
    assignment = kp_class(SYNC, True).SyncGroupRequestAssignment(
        member_id=joined.member_id, assignment=b"plan"
    )
    sync = {"group_id": "g", "generation_id": joined.generation_id,
            "member_id": joined.member_id, "assignments": [assignment]}  # fmt: skip
    wrong = await run(ctx, kp(SYNC, 5, protocol_type="other", protocol_name="range", **sync))
    assert wrong.error_code == CODE["INCONSISTENT_GROUP_PROTOCOL"]
    synced = await run(ctx, kp(SYNC, 5, protocol_type="consumer", protocol_name="range", **sync))
    assert (synced.error_code, synced.protocol_type, synced.protocol_name, synced.assignment) == (
        0, "consumer", "range", b"plan",
    )  # fmt: skip
    beat = await run(
        ctx,
        kp(HEARTBEAT, 4, group_id="g", generation_id=joined.generation_id,
           member_id=joined.member_id),
    )  # fmt: skip
    assert beat.error_code == 0
    described = await run(ctx, kp(DESCRIBE, 6, groups=["g"]))
    assert (described.groups[0].group_state, described.groups[0].error_message) == (
        "Stable",
        None,
    )
    listed = await run(ctx, kp(LIST, 5, states_filter=[], types_filter=[]))
    assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [
        ("g", "Stable", "classic")
    ]
    assert (await run(ctx, kp(LIST, 4, states_filter=["stable"]))).groups
    assert not (await run(ctx, kp(LIST, 4, states_filter=["Empty"]))).groups
    assert not (await run(ctx, kp(LIST, 5, states_filter=[], types_filter=["consumer"]))).groups
    member = kp_class(LEAVE, True).MemberIdentity(
        member_id=joined.member_id, group_instance_id=None, reason="bye"
    )
    left = await run(ctx, kp(LEAVE, 5, group_id="g", members=[member]))
    assert (left.error_code, [m.error_code for m in left.members]) == (0, [0])


async def test_offset_fetch_v8_answers_each_group(ctx: BrokerContext) -> None:
    member, generation = await stable_member(ctx)
    committed = await run(ctx, _commit("g", generation, member, 42, "note", version=9))
    assert committed.topics[0].partitions[0].error_code == 0
    request = kp_class(FETCH, True)
    topic = request.OffsetFetchRequestGroup.OffsetFetchRequestTopics(
        name="t", partition_indexes=[1]
    )
    groups = [
        request.OffsetFetchRequestGroup(group_id="g", topics=[topic]),
        request.OffsetFetchRequestGroup(group_id="other", topics=None),
        request.OffsetFetchRequestGroup(group_id="", topics=None),
    ]
    fetched = await run(ctx, kp(FETCH, 8, groups=groups, require_stable=True))
    answers = {g.group_id: g for g in fetched.groups}
    got = [(p.partition_index, p.committed_offset, p.metadata)
           for p in answers["g"].topics[0].partitions]  # fmt: skip
    assert got == [(1, 42, "note")]
    assert (answers["other"].error_code, answers["other"].topics) == (0, [])
    assert answers[""].error_code == CODE["INVALID_GROUP_ID"]
