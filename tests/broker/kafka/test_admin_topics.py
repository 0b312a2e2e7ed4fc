"""CreateTopics, DeleteTopics, DeleteRecords and DescribeCluster adapters, requests and
answers in kafka-python's own bytes (conftest.py). Expected codes and messages are
what Apache Kafka 4.4 answered to the same requests (interop/admin_scenarios.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from kafka.protocol.admin import (
    CreateTopicsRequest,
    DeleteRecordsRequest,
    DeleteTopicsRequest,
    DescribeClusterRequest,
)
from kafka.protocol.metadata import MetadataRequest

from broker.context import BrokerContext
from protocol.batch import encode_batch
from protocol.offsets_schema import OFFSETS_TOPIC
from tests.broker.contexts import NOW_MS, open_context
from tests.broker.kafka.conftest import LISTEN, KafkaRun, admin, run_kafka

CT = CreateTopicsRequest[4].CreatableTopic


def creatable(
    name: str,
    partitions: int = 1,
    factor: int = 1,
    configs: dict[str, str | None] | None = None,
    assignments: list[tuple[int, list[int]]] | None = None,
) -> Any:
    return CT(
        name=name,
        num_partitions=partitions,
        replication_factor=factor,
        assignments=[
            CT.CreatableReplicaAssignment(partition_index=p, broker_ids=b)
            for p, b in assignments or []
        ],
        configs=[CT.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )


async def create(
    kafka: KafkaRun, *topics: Any, version: int = 4, validate_only: bool = False
) -> list[tuple[str, int, str | None]]:
    request = CreateTopicsRequest[version](
        topics=list(topics), timeout_ms=5000, validate_only=validate_only
    )
    response = await kafka(request)
    return [(t.name, t.error_code, getattr(t, "error_message", None)) for t in response.topics]


@pytest.mark.parametrize("version", [2, 3, 4])
async def test_create_topics_creates_with_partitions_and_configs(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    got = await create(
        kafka, creatable("a", 3, 1, {"retention.ms": "1000"}), creatable("b"), version=version
    )
    assert got == [("a", 0, None), ("b", 0, None)]
    assert ctx.manager.partition_count("a") == 3
    assert ctx.manager.topic_overrides("a") == {"retention.ms": "1000"}
    assert ctx.manager.topic_config("a").retention_ms == 1000


async def test_minus_one_takes_the_broker_defaults(tmp_path: Path, nursery: trio.Nursery) -> None:
    ctx = open_context(tmp_path / "d", nursery, {"num.partitions": "4"}, listen=LISTEN)
    try:
        response = await run_kafka(
            ctx, CreateTopicsRequest[4](topics=[creatable("d", -1, -1)], timeout_ms=1000)
        )
        assert response.topics[0].error_code == 0
        assert ctx.manager.partition_count("d") == 4
    finally:
        ctx.manager.close()


async def test_validate_only_checks_and_creates_nothing(
    kafka: KafkaRun, ctx: BrokerContext
) -> None:
    assert await create(kafka, creatable("v", 2), validate_only=True) == [("v", 0, None)]
    assert "v" not in ctx.manager.topics()
    bad = await create(kafka, creatable("v", 1, 1, {"retention.ms": "abc"}), validate_only=True)
    assert bad[0][1] == 40 and "retention.ms" in (bad[0][2] or "")
    await create(kafka, creatable("exists"))
    assert (await create(kafka, creatable("exists"), validate_only=True))[0][1] == 36


@pytest.mark.parametrize(
    ("partitions", "factor", "code", "message"),
    [
        (1, 3, 38, "Unable to replicate the partition 3 time(s)"),
        (1, 0, 38, "Replication factor must be larger than 0, or -1"),
        (1, -2, 38, "Replication factor must be larger than 0, or -1"),
        (0, 1, 37, "Number of partitions was set to an invalid non-positive value."),
        (-5, 1, 37, "Number of partitions was set to an invalid non-positive value."),
    ],
)
async def test_partitions_and_replication_factor_refused_as_kafka(
    kafka: KafkaRun, ctx: BrokerContext, partitions: int, factor: int, code: int, message: str
) -> None:
    [(name, got_code, got_message)] = await create(kafka, creatable("r", partitions, factor))
    assert (name, got_code) == ("r", code)
    assert got_message is not None and got_message.startswith(message)
    assert "r" not in ctx.manager.topics()


async def test_create_errors_as_kafka(kafka: KafkaRun, ctx: BrokerContext) -> None:
    await create(kafka, creatable("t.7"))
    got = await create(
        kafka,
        creatable("t.7"),
        creatable("bad name"),
        creatable(""),
        creatable("x" * 250),
        creatable("t_7"),
        creatable("u", 1, 1, {"retention.ms": "abc"}),
        creatable("u2", 1, 1, {"foo.bar": "1"}),
        creatable("u3", 1, 1, {"retention.ms": None}),
        creatable("__cluster_metadata"),
        creatable(OFFSETS_TOPIC),
    )
    codes = {name[:20]: code for name, code, _ in got}
    assert codes == {
        "t.7": 36,  # TOPIC_ALREADY_EXISTS
        "bad name": 17,  # INVALID_TOPIC_EXCEPTION
        "": 17,
        "x" * 20: 17,
        "t_7": 17,  # collides with t.7 in metric names
        "u": 40,  # INVALID_CONFIG
        "u2": 40,
        "u3": 40,
        "__cluster_metadata": 42,  # INVALID_REQUEST: creation prohibited
        OFFSETS_TOPIC: 42,
    }
    messages = {name: message for name, _, message in got}
    assert messages["t.7"] == "Topic 't.7' already exists."
    assert messages["t_7"] == "Topic 't_7' collides with existing topic: t.7"
    assert "retention.ms" in (messages["u"] or "")
    assert "foo.bar" in (messages["u2"] or "")
    assert messages["u3"] == "Null value not supported for topic configs: retention.ms"
    assert ctx.manager.topics() == ["t.7"]


async def test_duplicate_names_get_one_invalid_request(kafka: KafkaRun, ctx: BrokerContext) -> None:
    got = await create(kafka, creatable("dup"), creatable("ok"), creatable("dup"))
    assert sorted(got) == [("dup", 42, "Duplicate topic name."), ("ok", 0, None)]
    assert ctx.manager.topics() == ["ok"]


async def test_repeated_config_key_last_wins(kafka: KafkaRun, ctx: BrokerContext) -> None:
    topic = creatable("rep")
    topic.configs = [
        CT.CreatableTopicConfig(name="retention.ms", value="1000"),
        CT.CreatableTopicConfig(name="retention.ms", value="2000"),
    ]
    assert await create(kafka, topic) == [("rep", 0, None)]
    assert ctx.manager.topic_overrides("rep") == {"retention.ms": "2000"}


async def test_manual_assignment_on_this_broker(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ok = creatable("m", -1, -1, assignments=[(0, [1]), (1, [1])])
    assert await create(kafka, ok) == [("m", 0, None)]
    assert ctx.manager.partition_count("m") == 2
    other_broker = creatable("m2", -1, -1, assignments=[(0, [2])])
    two_replicas = creatable("m3", -1, -1, assignments=[(0, [1, 1])])
    gap = creatable("m4", -1, -1, assignments=[(1, [1])])
    both = creatable("m5", 2, -1, assignments=[(0, [1])])
    got = await create(kafka, other_broker, two_replicas, gap, both)
    assert [code for _, code, _ in got] == [39, 39, 39, 42]


# --- DeleteTopics -----------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3])
async def test_delete_topics(kafka: KafkaRun, ctx: BrokerContext, version: int) -> None:
    await create(kafka, creatable("gone", 2), creatable("stays"))
    response = await kafka(
        DeleteTopicsRequest[version](topic_names=["gone", "nope", "bad name"], timeout_ms=1000)
    )
    got = {r.name: r.error_code for r in response.responses}
    assert got == {"gone": 0, "nope": 3, "bad name": 3}  # Kafka: unknown, not invalid
    assert ctx.manager.topics() == ["stays"]


async def test_delete_duplicate_names_and_internal_topic(
    kafka: KafkaRun, ctx: BrokerContext
) -> None:
    await create(kafka, creatable("twice"))
    ctx.manager.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact"})
    response = await kafka(
        DeleteTopicsRequest[3](topic_names=["twice", "twice", OFFSETS_TOPIC], timeout_ms=1000)
    )
    got = {r.name: r.error_code for r in response.responses}
    # Tidelog protects its offsets topic (Kafka 4.4 deletes it: docs/kafka.md).
    assert got == {"twice": 42, OFFSETS_TOPIC: 17}
    assert sorted(ctx.manager.topics()) == sorted([OFFSETS_TOPIC, "twice"])


# --- DeleteRecords ----------------------------------------------------------------------


async def produce_ten(ctx: BrokerContext, topic: str, partitions: int = 1) -> None:
    ctx.manager.create_topic(topic, partitions)
    for p in range(partitions):
        ctx.manager.get_log(topic, p).append(
            encode_batch([(None, b"v%d" % i, None, NOW_MS) for i in range(10)])
        )


async def delete_records(
    kafka: KafkaRun, topic: str, parts: list[tuple[int, int]], version: int = 1
) -> list[tuple[int, int, int]]:
    R = DeleteRecordsRequest[version]
    P = R.DeleteRecordsTopic.DeleteRecordsPartition
    response = await kafka(
        R(
            topics=[
                R.DeleteRecordsTopic(
                    name=topic, partitions=[P(partition_index=p, offset=o) for p, o in parts]
                )
            ],
            timeout_ms=1000,
        )
    )
    [t] = response.topics
    assert t.name == topic
    return [(p.partition_index, p.low_watermark, p.error_code) for p in t.partitions]


@pytest.mark.parametrize("version", [0, 1])
async def test_delete_records_moves_the_low_watermark(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    await produce_ten(ctx, "dr", 2)
    assert await delete_records(kafka, "dr", [(0, 3), (1, -1)], version) == [(0, 3, 0), (1, 10, 0)]
    assert ctx.manager.get_log("dr", 0).log_start_offset == 3
    # Below the low watermark: nothing moves, the current one is answered (Kafka: same).
    assert await delete_records(kafka, "dr", [(0, 2)], version) == [(0, 3, 0)]


async def test_delete_records_errors_as_kafka(kafka: KafkaRun, ctx: BrokerContext) -> None:
    await produce_ten(ctx, "dr")
    assert await delete_records(kafka, "dr", [(0, 11), (5, 1)]) == [
        (0, -1, 1),  # OFFSET_OUT_OF_RANGE above the high watermark
        (5, -1, 3),  # UNKNOWN_TOPIC_OR_PARTITION
    ]
    assert await delete_records(kafka, "dr", [(0, -2)]) == [(0, -1, 1)]
    assert await delete_records(kafka, "nope", [(0, 1)]) == [(0, -1, 3)]
    ctx.manager.create_topic("compacted", 1, {"cleanup.policy": "compact"})
    assert await delete_records(kafka, "compacted", [(0, 0)]) == [(0, -1, 44)]  # POLICY_VIOLATION
    assert ctx.manager.get_log("dr", 0).log_start_offset == 0


# --- DescribeCluster --------------------------------------------------------------------


def describe_cluster_request(version: int, operations: bool, endpoint_type: int = 1) -> Any:
    fields: dict[str, Any] = {"include_cluster_authorized_operations": operations}
    if version >= 1:
        fields["endpoint_type"] = endpoint_type
    if version >= 2:
        fields["include_fenced_brokers"] = True
    return DescribeClusterRequest[version](**fields)


@pytest.mark.parametrize("version", [0, 1, 2])
async def test_describe_cluster_names_the_broker_metadata_names(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    response = await kafka(describe_cluster_request(version, False))
    assert (response.error_code, response.controller_id) == (0, 1)
    [broker] = response.brokers
    assert (broker.broker_id, broker.host, broker.port, broker.rack) == (1, *LISTEN, None)
    assert response.authorized_operations is None  # not requested
    metadata = await kafka(MetadataRequest[8](topics=[], allow_auto_topic_creation=False))
    assert response.cluster_id == metadata.cluster_id
    [described] = metadata.brokers
    assert (described.node_id, described.host, described.port) == (1, *LISTEN)
    again = await kafka(describe_cluster_request(version, True))
    assert again.authorized_operations == {5, 7, 8, 9, 10, 11, 12}  # what Kafka answers
    if version >= 2:
        assert again.brokers[0].is_fenced is False


@pytest.mark.parametrize(("endpoint_type", "code"), [(2, 114), (9, 115)])
async def test_describe_cluster_other_endpoint_types(
    kafka: KafkaRun, endpoint_type: int, code: int
) -> None:
    response = await kafka(describe_cluster_request(1, False, endpoint_type))
    assert (response.error_code, response.brokers) == (code, [])


async def test_describe_cluster_follows_node_id_and_advertised_listeners(
    tmp_path: Path, nursery: trio.Nursery
) -> None:
    props = {"node.id": "7", "advertised.listeners": "PLAINTEXT://kafka.example:9999"}
    ctx = open_context(tmp_path / "d", nursery, props, listen=LISTEN)
    try:
        request = DescribeClusterRequest[0](include_cluster_authorized_operations=False)
        response = await run_kafka(ctx, request)
        assert response.controller_id == 7
        [broker] = response.brokers
        assert (broker.broker_id, broker.host, broker.port) == (7, "kafka.example", 9999)
    finally:
        ctx.manager.close()


async def test_the_offsets_topic_is_the_brokers(kafka: KafkaRun, ctx: BrokerContext) -> None:
    """Tidelog keeps __consumer_offsets to itself (docs/kafka.md lists how Kafka differs)."""
    ctx.manager.create_topic(OFFSETS_TOPIC, 1, {"cleanup.policy": "compact"})
    assert (await create(kafka, creatable(OFFSETS_TOPIC)))[0][1] == 36  # TOPIC_ALREADY_EXISTS
    assert await delete_records(kafka, OFFSETS_TOPIC, [(0, 0)]) == [(0, -1, 17)]
    R = admin.IncrementalAlterConfigsRequest[0]
    C = R.AlterConfigsResource.AlterableConfig
    config = C(name="retention.ms", config_operation=0, value="1")
    resource = R.AlterConfigsResource(
        resource_type=2, resource_name=OFFSETS_TOPIC, configs=[config]
    )
    response = await kafka(R(resources=[resource], validate_only=False))
    assert response.responses[0].error_code == 17  # INVALID_TOPIC_EXCEPTION
    assert ctx.manager.topic_overrides(OFFSETS_TOPIC) == {"cleanup.policy": "compact"}


async def test_names_colliding_within_one_request(kafka: KafkaRun, ctx: BrokerContext) -> None:
    """Kafka checks collisions against the topics before the request only."""
    got = await create(kafka, creatable("a.b"), creatable("a_b"))
    assert [(name, code) for name, code, _ in got] == [("a.b", 0), ("a_b", 0)]
    assert ctx.manager.topics() == ["a.b", "a_b"]
    assert (await create(kafka, creatable("a-b"), creatable("a.b")))[1][1] == 36
