"""CreatePartitions, DescribeLogDirs, ElectLeaders, List-/AlterPartitionReassignments,
ListOffsets v7 and ApiVersions' features, requests and answers in kafka-python's own
bytes (conftest.py). Expected codes and messages are what a single-node Apache Kafka
4.4 answered to the same requests (broker/kafka/cluster_admin.py)."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.context import BrokerContext
from broker.kafka.connection import api_versions_answer
from harness.kafka_python import kp_class
from protocol.kafka.codec import encode_response
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import API_VERSIONS
from tests.broker.contexts import open_context
from tests.broker.kafka.conftest import LISTEN, KafkaRun, run_kafka

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

CREATE_PARTITIONS, DESCRIBE_LOG_DIRS, ELECT_LEADERS = 37, 35, 43
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
NOT_NEEDED = KafkaError.ELECTION_NOT_NEEDED.code
UNKNOWN = KafkaError.UNKNOWN_TOPIC_OR_PARTITION.code
BAD_ASSIGNMENT = KafkaError.INVALID_REPLICA_ASSIGNMENT.code


def build(cls: Any, fields: dict[str, Any]) -> Any:
    """A kafka-python message (or nested struct) from plain dicts and lists."""
    out = {}
    for name, value in fields.items():
        field = cls._struct.fields[name] if hasattr(cls, "_struct") else cls.fields[name]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            nested = getattr(cls, field.type_str.removeprefix("[]"))
            value = [build(nested, v) for v in value]
        out[name] = value
    return cls(**out)


async def ask(kafka: KafkaRun, key: int, version: int, **fields: Any) -> Any:
    return await kafka(build(kp_class(key, True)[version], fields))


async def grow(
    kafka: KafkaRun, *topics: tuple[str, int], validate_only: bool = False, version: int = 3
) -> list[tuple[str, int, str | None]]:
    answer = await ask(
        kafka,
        CREATE_PARTITIONS,
        version,
        topics=[{"name": n, "count": c, "assignments": None} for n, c in topics],
        timeout_ms=5000,
        validate_only=validate_only,
    )
    return [(r.name, r.error_code, r.error_message) for r in answer.results]


def batch(value: bytes, timestamp: int = 1_700_000_000_000) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=timestamp, key=b"k", value=value, headers=[])
    return bytes(builder.build())


async def produce(kafka: KafkaRun, topic: str, partition: int, records: bytes) -> Any:
    answer = await ask(
        kafka,
        0,
        7,
        transactional_id=None,
        acks=1,
        timeout_ms=5000,
        topic_data=[{"name": topic, "partition_data": [{"index": partition, "records": records}]}],
    )
    return answer.responses[0].partition_responses[0]


# --- CreatePartitions -----------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2, 3])
async def test_create_partitions_grows_and_serves_the_new_ones_at_once(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    ctx.manager.create_topic("grow", 1)
    assert await grow(kafka, ("grow", 3), version=version) == [("grow", 0, None)]
    metadata = await ask(kafka, 3, 4, topics=[{"name": "grow"}], allow_auto_topic_creation=False)
    assert [p.partition_index for p in metadata.topics[0].partitions] == [0, 1, 2]
    produced = await produce(kafka, "grow", 2, batch(b"new"))
    assert (produced.error_code, produced.base_offset) == (0, 0)
    fetched = await ask(
        kafka, 1, 4, replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20,
        isolation_level=0,
        topics=[{"topic": "grow", "partitions": [
            {"partition": 2, "fetch_offset": 0, "partition_max_bytes": 1 << 20}]}],
    )  # fmt: skip
    part = fetched.responses[0].partitions[0]
    assert (part.error_code, part.high_watermark) == (0, 1) and b"new" in bytes(part.records)


async def test_the_new_count_is_persisted(tmp_path: Path, nursery: trio.Nursery) -> None:
    ctx = open_context(tmp_path / "d", nursery, listen=LISTEN)
    try:
        ctx.manager.create_topic("kept", 2)
        [(_, code, _)] = await grow(lambda r: run_kafka(ctx, r), ("kept", 5))
        assert code == 0
    finally:
        ctx.manager.close()
    again = open_context(tmp_path / "d", nursery, listen=LISTEN)
    try:
        assert again.manager.partition_count("kept") == 5
    finally:
        again.manager.close()


async def test_create_partitions_refused_as_kafka(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("two", 2)
    got = await grow(kafka, ("two", 1), ("nope", 3))
    assert got == [
        ("two", 37, "The topic two currently has 2 partition(s); 1 would not be an increase."),
        ("nope", UNKNOWN, None),
    ]
    assert await grow(kafka, ("two", 2)) == [("two", 37, "Topic already has 2 partition(s).")]
    assert await grow(kafka, ("two", 3), ("two", 4)) == [("two", 42, "Duplicate topic name.")]
    assert await grow(kafka, ("two", 2**31 - 1), validate_only=True) == [
        ("two", 44, "Excessively large number of additional partitions per request.")
    ]
    assert ctx.manager.partition_count("two") == 2


async def test_validate_only_changes_nothing(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("v", 1)
    assert await grow(kafka, ("v", 4), validate_only=True) == [("v", 0, None)]
    assert ctx.manager.partition_count("v") == 1
    assert not (ctx.config.data_dir / "v-1").exists()


@pytest.mark.parametrize(
    ("assignments", "message"),
    [
        ([[1]], None),
        ([[2]], "The manual partition assignment includes broker 2, but no such broker is "
                "registered."),
        ([[1, 1]], "The manual partition assignment includes the broker 1 more than once."),
        ([[]], "The manual partition assignment includes an empty replica list."),
        ([], "Attempted to add 1 additional partition(s), but only 0 assignment(s) were "
             "specified."),
    ],
)  # fmt: skip
async def test_manual_assignments_as_kafka(
    kafka: KafkaRun, ctx: BrokerContext, assignments: list[list[int]], message: str | None
) -> None:
    ctx.manager.create_topic("m", 1)
    answer = await kafka(
        kp_class(CREATE_PARTITIONS, True)[3](
            topics=[
                kp_class(CREATE_PARTITIONS, True)[3].CreatePartitionsTopic(
                    name="m",
                    count=2,
                    assignments=[
                        kp_class(CREATE_PARTITIONS, True)[
                            3
                        ].CreatePartitionsTopic.CreatePartitionsAssignment(broker_ids=b)
                        for b in assignments
                    ],
                )
            ],
            timeout_ms=5000,
            validate_only=False,
        )
    )
    result = answer.results[0]
    assert (result.error_code, result.error_message) == (0 if message is None else 39, message)
    assert ctx.manager.partition_count("m") == (2 if message is None else 1)


# --- DescribeLogDirs ------------------------------------------------------------------


@pytest.mark.parametrize("version", [1, 2, 3, 4])
async def test_describe_log_dirs_sizes_the_partitions_in_the_data_dir(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    ctx.manager.create_topic("sized", 2)
    await produce(kafka, "sized", 1, batch(b"x" * 100))
    answer = await ask(kafka, DESCRIBE_LOG_DIRS, version, topics=None)
    [result] = answer.results
    assert result.error_code == 0
    assert result.log_dir == str(ctx.config.data_dir.absolute())
    sizes = {(t.name, p.partition_index): p for t in result.topics for p in t.partitions}
    assert set(sizes) == {("sized", 0), ("sized", 1)}
    assert sizes[("sized", 0)].partition_size == 0
    assert sizes[("sized", 1)].partition_size == ctx.manager.get_log("sized", 1).size_bytes > 100
    assert all(p.offset_lag == 0 and not p.is_future_key for p in sizes.values())
    if version >= 4:
        assert result.total_bytes >= result.usable_bytes > 0
    named = await ask(
        kafka,
        DESCRIBE_LOG_DIRS,
        version,
        topics=[{"topic": "sized", "partitions": [1, 9]}, {"topic": "nope", "partitions": [0]}],
    )
    assert [
        (t.name, [p.partition_index for p in t.partitions]) for t in named.results[0].topics
    ] == [("sized", [1])]


# --- ElectLeaders ---------------------------------------------------------------------


async def test_elect_leaders_has_nothing_to_do(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("led", 2)
    named = await ask(
        kafka,
        ELECT_LEADERS,
        2,
        election_type=0,
        topic_partitions=[
            {"topic": "led", "partitions": [0, 9]},
            {"topic": "nope", "partitions": [0]},
        ],
        timeout_ms=5000,
    )
    assert named.error_code == 0
    got = [
        (t.topic, p.partition_id, p.error_code, p.error_message)
        for t in named.replica_election_results
        for p in t.partition_result
    ]
    assert got == [
        ("led", 0, NOT_NEEDED, "Leader election not needed for topic partition."),
        ("led", 9, UNKNOWN, "No such partition as led-9"),
        ("nope", 0, UNKNOWN, "No such topic as nope"),
    ]
    every = await ask(kafka, ELECT_LEADERS, 2, election_type=1, topic_partitions=None,
                      timeout_ms=5000)  # fmt: skip
    assert [(t.topic, t.partition_result) for t in every.replica_election_results] == [("led", [])]
    v0 = await ask(kafka, ELECT_LEADERS, 0, topic_partitions=[{"topic": "led", "partitions": [1]}],
                   timeout_ms=5000)  # fmt: skip
    assert v0.replica_election_results[0].partition_result[0].error_code == NOT_NEEDED


async def test_unknown_election_type_is_an_invalid_request(
    kafka: KafkaRun, ctx: BrokerContext
) -> None:
    ctx.manager.create_topic("led", 1)
    answer = await ask(
        kafka,
        ELECT_LEADERS,
        2,
        election_type=5,
        topic_partitions=[{"topic": "led", "partitions": [0]}],
        timeout_ms=5000,
    )
    part = answer.replica_election_results[0].partition_result[0]
    assert (answer.error_code, part.error_code, part.error_message) == (
        42,
        42,
        "Unknown election type 5",
    )


# --- List- and AlterPartitionReassignments --------------------------------------------


async def test_no_reassignment_is_ever_listed(kafka: KafkaRun, ctx: BrokerContext) -> None:
    ctx.manager.create_topic("r", 1)
    for topics in (None, [{"name": "r", "partition_indexes": [0]}]):
        answer = await ask(kafka, LIST_REASSIGNMENTS, 0, timeout_ms=5000, topics=topics)
        assert (answer.error_code, answer.error_message, answer.topics) == (0, None, [])


@pytest.mark.parametrize(
    ("topic", "partition", "replicas", "code", "message"),
    [
        ("r", 0, [1], 0, None),
        ("r", 0, [2], BAD_ASSIGNMENT,
         "The manual partition assignment includes broker 2, but no such broker is registered."),
        ("r", 0, [1, 2], BAD_ASSIGNMENT,
         "The manual partition assignment includes broker 2, but no such broker is registered."),
        ("r", 0, [], BAD_ASSIGNMENT,
         "The manual partition assignment includes an empty replica list."),
        ("r", 0, None, KafkaError.NO_REASSIGNMENT_IN_PROGRESS.code, None),
        ("r", 4, [1], UNKNOWN, "Unable to find partition r:4."),
        ("nope", 0, [1], UNKNOWN, "Unable to find a topic named nope."),
    ],
)  # fmt: skip
async def test_reassignments_answered_as_one_node_kafka(
    kafka: KafkaRun,
    ctx: BrokerContext,
    topic: str,
    partition: int,
    replicas: list[int] | None,
    code: int,
    message: str | None,
) -> None:
    ctx.manager.create_topic("r", 1)
    answer = await ask(
        kafka,
        ALTER_REASSIGNMENTS,
        0,
        timeout_ms=5000,
        topics=[
            {"name": topic, "partitions": [{"partition_index": partition, "replicas": replicas}]}
        ],
    )
    part = answer.responses[0].partitions[0]
    assert (answer.error_code, part.error_code, part.error_message) == (0, code, message)


# --- ListOffsets v7 and ApiVersions' features -------------------------------------------


@pytest.mark.parametrize("version", [6, 7])
async def test_list_offsets_max_timestamp(
    kafka: KafkaRun, ctx: BrokerContext, version: int
) -> None:
    ctx.manager.create_topic("ts", 1)
    for timestamp in (1_700_000_000_500, 1_700_000_000_900, 1_700_000_000_100):
        await produce(kafka, "ts", 0, batch(b"v", timestamp))
    answer = await ask(
        kafka, 2, version, replica_id=-1, isolation_level=0,
        topics=[{"name": "ts", "partitions": [
            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": -3}]}],
    )  # fmt: skip
    part = answer.topics[0].partitions[0]
    if version == 6:  # before KIP-734: Kafka's UNSUPPORTED_VERSION
        assert part.error_code == KafkaError.UNSUPPORTED_VERSION.code
    else:
        assert (part.error_code, part.offset, part.timestamp) == (0, 1, 1_700_000_000_900)


@pytest.mark.parametrize("version", [3, 4])
def test_api_versions_carries_metadata_version_as_kafka_4_4(version: int) -> None:
    """kafka-python reads the tagged feature fields a single-node Kafka 4.4 sends."""
    frame = encode_response(API_VERSIONS, version, 3, api_versions_answer())
    answer = kp_class(API_VERSIONS.key, False)[version].decode(frame[4:], header=True)
    assert [(f.name, f.min_version, f.max_version) for f in answer.supported_features] == [
        ("metadata.version", 7, 33)
    ]
    assert [
        (f.name, f.min_version_level, f.max_version_level) for f in answer.finalized_features
    ] == [("metadata.version", 33, 33)]
    assert answer.finalized_features_epoch >= 0
    keys = {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}
    assert keys[2] == (1, 10) and keys[37] == (0, 3) and keys[18] == (0, 5)
