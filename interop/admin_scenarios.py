"""Admin scenarios beyond `admin_topics`: what each client's admin API observes of
validate-only creation, refused creations, config sources and synonyms, whole and
incremental alteration, DeleteRecords and DescribeCluster.

    seen = ADMIN_DETAILS["confluent-kafka"](bootstrap, topic)

Each function returns plain data; the parts of an answer that depend on the server
(its address, cluster id) are reduced to facts both servers share (one broker, the
controller is that broker). Run against Apache Kafka and against Tidelog, the two
observations must be equal (tests/interop/test_admin_differential.py), and against
Tidelog alone they must equal what Kafka was seen to answer
(tests/integration/test_kafka_admin.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, RecordsToDelete
from aiokafka.admin import NewTopic as AioNewTopic
from aiokafka.admin.config_resource import ConfigResource as AioResource
from aiokafka.admin.config_resource import ConfigResourceType as AioResourceType
from aiokafka.errors import KafkaError as AioKafkaError
from aiokafka.structs import TopicPartition as AioTopicPartition
from confluent_kafka import KafkaException, Producer
from confluent_kafka import TopicPartition as CkTopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)
from kafka import KafkaAdminClient, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource as KpResource
from kafka.admin import ConfigResourceType as KpResourceType
from kafka.admin import NewTopic as KpNewTopic
from kafka.errors import KafkaError

from interop.observed import CONFIG_SOURCES, SCENARIO_TIMEOUT_S, error_name, wait_until
from protocol.kafka.errors import error_for_code

RETENTION_MS = "3600000"
SEGMENT_MS = "600000"
TOPIC_KEYS = ("retention.ms", "segment.bytes", "segment.ms", "cleanup.policy")
# Broker keys that are read-only (not dynamic) in Kafka as in Tidelog.
BROKER_KEYS = ("log.retention.hours", "log.roll.hours")
RECORDS = 5
NODE = "1"


# --- kafka-python -----------------------------------------------------------------------


def _kp_create(admin: KafkaAdminClient, topic: Any, validate_only: bool = False) -> str:
    try:
        admin.create_topics([topic], validate_only=validate_only)
    except KafkaError as exc:
        return error_name(exc)
    return "NONE"


def _kp_configs(
    admin: KafkaAdminClient, kind: Any, name: str, keys: tuple[str, ...]
) -> dict[str, Any]:
    described = admin.describe_configs(
        [KpResource(kind, name)], include_synonyms=True, config_filter="all"
    )
    entries = next(iter(next(iter(described.values())).values()))
    return {
        k: (
            entries[k]["value"],
            entries[k]["config_source"],
            entries[k]["read_only"],
            [(s["name"], s["value"], s["source"]) for s in entries[k]["synonyms"]],
        )
        for k in keys
    }


def _kp_produce(bootstrap: str, topic: str) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, acks=1)
    try:
        for i in range(RECORDS):
            producer.send(topic, b"v%d" % i, partition=0).get(timeout=SCENARIO_TIMEOUT_S)
    finally:
        producer.close()


def _kp_delete_records(admin: KafkaAdminClient, topic: str, offset: int) -> Any:
    try:
        answer = admin.delete_records({TopicPartition(topic, 0): offset})
    except KafkaError as exc:
        return error_name(exc)
    return answer[TopicPartition(topic, 0)]["low_watermark"]


def kafka_python_details(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    seen: dict[str, Any] = {}
    try:
        seen["validate_only"] = _kp_create(
            admin, KpNewTopic(topic, 2, 1, topic_configs={"cleanup.policy": "compact"}), True
        )
        seen["listed_after_validate"] = topic in admin.list_topics()
        seen["replication_3"] = _kp_create(admin, KpNewTopic(topic, 2, 3))
        seen["bad_value"] = _kp_create(
            admin, KpNewTopic(topic, 2, 1, topic_configs={"retention.ms": "abc"})
        )
        seen["unknown_key"] = _kp_create(
            admin, KpNewTopic(topic, 2, 1, topic_configs={"no.such.key": "1"})
        )
        created = KpNewTopic(topic, 2, 1, topic_configs={"retention.ms": RETENTION_MS})
        seen["create"] = _kp_create(admin, created)
        wait_until(admin.list_topics, lambda ts: topic in ts)
        seen["configs"] = _kp_configs(admin, KpResourceType.TOPIC, topic, TOPIC_KEYS)
        seen["broker_configs"] = _kp_configs(admin, KpResourceType.BROKER, NODE, BROKER_KEYS)
        admin.alter_configs([KpResource(KpResourceType.TOPIC, topic, {"segment.ms": SEGMENT_MS})])
        seen["configs_replaced"] = wait_until(  # Kafka applies it after answering
            lambda: _kp_configs(admin, KpResourceType.TOPIC, topic, TOPIC_KEYS),
            lambda c: c["segment.ms"][0] == SEGMENT_MS,
        )
        _kp_produce(bootstrap, topic)
        seen["delete_records"] = [_kp_delete_records(admin, topic, o) for o in (2, 1, 99)]
        cluster = admin.describe_cluster()
        seen["cluster"] = (
            len(cluster["brokers"]),
            cluster["controller_id"] == cluster["brokers"][0]["broker_id"],
            f"{cluster['brokers'][0]['host']}:{cluster['brokers'][0]['port']}" == bootstrap,
        )
        deleted = admin.delete_topics([topic, f"{topic}-missing"], raise_errors=False)
        seen["delete"] = sorted((t["name"] == topic, t["error_code"]) for t in deleted["topics"])
    finally:
        admin.close()
    return seen


# --- aiokafka ---------------------------------------------------------------------------


async def _aio_create(admin: AIOKafkaAdminClient, topic: Any, validate_only: bool = False) -> str:
    response = await admin.create_topics([topic], validate_only=validate_only)
    [(_, code, *_)] = response.topic_errors
    return error_for_code(code).name


async def _aio_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, Any]:
    [response] = await admin.describe_configs(
        [AioResource(AioResourceType.TOPIC, topic)], include_synonyms=True
    )
    [(_, _, _, _, entries)] = response.resources
    by_name = {e[0]: e for e in entries}
    return {k: (by_name[k][1], CONFIG_SOURCES[by_name[k][3]]) for k in TOPIC_KEYS}


async def _aio_wait_configs(admin: AIOKafkaAdminClient, topic: str) -> dict[str, Any]:
    """The configs once the alteration shows (Kafka applies it after answering)."""
    deadline = asyncio.get_running_loop().time() + SCENARIO_TIMEOUT_S
    while True:
        configs = await _aio_configs(admin, topic)
        if configs["segment.ms"][0] == SEGMENT_MS or asyncio.get_running_loop().time() > deadline:
            return configs
        await asyncio.sleep(0.1)


async def _aio_details(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    seen: dict[str, Any] = {}
    try:
        seen["validate_only"] = await _aio_create(admin, AioNewTopic(topic, 2, 1), True)
        seen["replication_3"] = await _aio_create(admin, AioNewTopic(topic, 2, 3))
        created = AioNewTopic(topic, 2, 1, topic_configs={"retention.ms": RETENTION_MS})
        seen["create"] = await _aio_create(admin, created)
        seen["create_again"] = await _aio_create(admin, created)
        seen["configs"] = await _aio_configs(admin, topic)
        [altered] = await admin.alter_configs(
            [AioResource(AioResourceType.TOPIC, topic, {"segment.ms": SEGMENT_MS})]
        )
        seen["alter"] = [error_for_code(r[0]).name for r in altered.resources]
        seen["configs_replaced"] = await _aio_wait_configs(admin, topic)
        await asyncio.to_thread(_kp_produce, bootstrap, topic)
        marks = await admin.delete_records(
            {AioTopicPartition(topic, 0): RecordsToDelete(before_offset=3)}
        )
        seen["delete_records"] = marks[AioTopicPartition(topic, 0)]
        try:
            await admin.delete_records(
                {AioTopicPartition(topic, 0): RecordsToDelete(before_offset=99)}
            )
            seen["delete_records_beyond"] = "NONE"
        except AioKafkaError as exc:
            seen["delete_records_beyond"] = error_name(exc)
        cluster = await admin.describe_cluster()
        seen["cluster"] = (len(cluster["brokers"]), cluster["controller_id"])
        response = await admin.delete_topics([topic])
        seen["delete"] = [error_for_code(code).name for _, code, *_ in response.topic_error_codes]
    finally:
        await admin.close()
    return seen


def aiokafka_details(bootstrap: str, topic: str) -> dict[str, Any]:
    return asyncio.run(_aio_details(bootstrap, topic))


# --- confluent-kafka --------------------------------------------------------------------


def _ck_wait(future: Any) -> str:
    try:
        future.result(timeout=SCENARIO_TIMEOUT_S)
    except KafkaException as exc:
        return exc.args[0].name()
    return "NONE"


def _ck_create(admin: AdminClient, topic: NewTopic, validate_only: bool = False) -> str:
    futures = admin.create_topics([topic], validate_only=validate_only)
    return _ck_wait(futures[topic.topic])


def _ck_configs(admin: AdminClient, kind: Any, name: str, keys: tuple[str, ...]) -> Any:
    resource = ConfigResource(kind, name)
    entries = admin.describe_configs([resource])[resource].result(timeout=SCENARIO_TIMEOUT_S)
    return {
        k: (
            entries[k].value,
            CONFIG_SOURCES[int(entries[k].source)],
            entries[k].is_read_only,
            sorted(
                (s.name, s.value, CONFIG_SOURCES[int(s.source)])
                for s in entries[k].synonyms.values()
            ),
        )
        for k in keys
    }


def _ck_change(admin: AdminClient, topic: str, *ops: tuple[str, str | None, Any]) -> str:
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(k, v, incremental_operation=op) for k, v, op in ops],
    )
    return _ck_wait(admin.incremental_alter_configs([resource])[resource])


def _ck_policy(admin: AdminClient, topic: str) -> str:
    value = _ck_configs(admin, ResourceType.TOPIC, topic, ("cleanup.policy",))
    return ",".join(sorted(value["cleanup.policy"][0].split(",")))


def _ck_produce(bootstrap: str, topic: str) -> None:
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(RECORDS):
        producer.produce(topic, b"v%d" % i, partition=0)
    assert producer.flush(SCENARIO_TIMEOUT_S) == 0


def _ck_delete_records(admin: AdminClient, topic: str, offset: int) -> Any:
    partition = CkTopicPartition(topic, 0, offset)
    future = admin.delete_records([partition])[partition]
    try:
        return future.result(timeout=SCENARIO_TIMEOUT_S).low_watermark
    except KafkaException as exc:
        return exc.args[0].name()


def confluent_details(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {
        "validate_only": _ck_create(admin, NewTopic(topic, 2, 1), validate_only=True),
        "replication_3": _ck_create(admin, NewTopic(topic, 2, 3)),
        "bad_value": _ck_create(admin, NewTopic(topic, 2, 1, config={"retention.ms": "x"})),
        "create": _ck_create(admin, NewTopic(topic, 2, 1, config={"cleanup.policy": "compact"})),
    }
    # Kafka answers CreateTopics before its metadata has the topic (describe_configs
    # then says UNKNOWN_TOPIC_OR_PART under load), as the kafka-python scenario knows.
    wait_until(lambda: admin.list_topics(timeout=SCENARIO_TIMEOUT_S).topics, lambda ts: topic in ts)
    seen["configs"] = _ck_configs(admin, ResourceType.TOPIC, topic, TOPIC_KEYS)
    seen["broker_configs"] = _ck_configs(admin, ResourceType.BROKER, NODE, BROKER_KEYS)
    seen["append"] = _ck_change(
        admin, topic, ("cleanup.policy", "delete", AlterConfigOpType.APPEND)
    )
    seen["policy_after_append"] = wait_until(
        lambda: _ck_policy(admin, topic), lambda p: p != "compact"
    )
    seen["subtract"] = _ck_change(
        admin, topic, ("cleanup.policy", "compact", AlterConfigOpType.SUBTRACT)
    )
    seen["policy_after_subtract"] = wait_until(
        lambda: _ck_policy(admin, topic), lambda p: p != "compact,delete"
    )
    seen["append_to_scalar"] = _ck_change(
        admin, topic, ("retention.ms", "1", AlterConfigOpType.APPEND)
    )
    seen["set_and_delete"] = _ck_change(
        admin,
        topic,
        ("retention.ms", RETENTION_MS, AlterConfigOpType.SET),
        ("cleanup.policy", None, AlterConfigOpType.DELETE),
    )
    seen["configs_changed"] = wait_until(
        lambda: _ck_configs(admin, ResourceType.TOPIC, topic, TOPIC_KEYS),
        lambda c: c["retention.ms"][0] == RETENTION_MS and c["cleanup.policy"][0] == "delete",
    )
    _ck_produce(bootstrap, topic)
    seen["delete_records"] = [_ck_delete_records(admin, topic, o) for o in (2, -1, 99)]
    cluster = admin.describe_cluster().result(timeout=SCENARIO_TIMEOUT_S)
    seen["cluster"] = (len(cluster.nodes), cluster.controller.id == cluster.nodes[0].id)
    seen["delete"] = _ck_wait(admin.delete_topics([topic])[topic])
    seen["delete_missing"] = _ck_wait(admin.delete_topics([topic])[topic])
    return seen


ADMIN_DETAILS: dict[str, Callable[[str, str], dict[str, Any]]] = {
    "kafka-python": kafka_python_details,
    "aiokafka": aiokafka_details,
    "confluent-kafka": confluent_details,
}
