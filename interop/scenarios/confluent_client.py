"""The scenarios with confluent-kafka (librdkafka), default settings."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import (
    TIMESTAMP_LOG_APPEND_TIME,
    Consumer,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from interop.observed import (
    CONFIG_SOURCES,
    CREATE_TIME,
    LOG_APPEND_TIME,
    PARTITIONS,
    SAMPLES,
    SCENARIO_TIMEOUT_S,
    T0_MS,
    error_name,
    lookup_times,
    observed_record,
    sort_records,
    wait_until,
)
from interop.scenarios.names import SCENARIO_NAMES

RETENTION_MS = "3600000"
# The four shared scenarios plus a two-member group (librdkafka serves both members'
# callbacks from one thread, so one process can hold both).
SUPPORTED = (*SCENARIO_NAMES, "group_two_members")


def _create_topic(admin: AdminClient, topic: str, partitions: int = PARTITIONS) -> str:
    """Create `topic`; the broker's error name ("NONE" on success)."""
    new_topic = NewTopic(topic, num_partitions=partitions, replication_factor=1)
    futures = admin.create_topics([new_topic])
    try:
        futures[topic].result(timeout=SCENARIO_TIMEOUT_S)
    except KafkaException as exc:
        return error_name(exc)
    return "NONE"


def _produce_samples(bootstrap: str, topic: str, codec: str = "none") -> list[tuple[int, int]]:
    producer = Producer({"bootstrap.servers": bootstrap, "compression.type": codec})
    delivered: list[Message] = []
    for s in SAMPLES:
        producer.produce(
            topic,
            value=s.value,
            key=s.key,
            partition=s.partition,
            timestamp=s.timestamp_ms,
            headers=list(s.headers),
            on_delivery=lambda err, msg: delivered.append(msg),
        )
    remaining = producer.flush(SCENARIO_TIMEOUT_S)
    if remaining:
        raise TimeoutError(f"{remaining} records to {topic} were not delivered")
    errors = [m.error() for m in delivered if m.error() is not None]
    if errors:
        raise KafkaException(errors[0])
    return sorted((m.partition(), m.offset()) for m in delivered)


def _observed(msg: Message) -> dict[str, Any]:
    ts_type, ts = msg.timestamp()
    return observed_record(
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.value(),
        msg.headers(),
        ts,
        LOG_APPEND_TIME if ts_type == TIMESTAMP_LOG_APPEND_TIME else CREATE_TIME,
    )


def _read(consumer: Consumer, count: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        records.extend(_observed(msg) for msg in _poll(consumer, count))
    return sort_records(records)


def _consumer(bootstrap: str, group: str, **extra: Any) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def produce_consume(bootstrap: str, topic: str, codec: str) -> dict[str, Any]:
    _create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic)
    acks = _produce_samples(bootstrap, topic, codec)
    # A group id is required by the client even when partitions are assigned by hand;
    # assign() never joins the group.
    consumer = _consumer(bootstrap, f"{topic}-unused")
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        records = _read(consumer, len(SAMPLES))
    finally:
        consumer.close()
    return {"acks": acks, "records": records}


def group_consume(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    _create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic)
    _produce_samples(bootstrap, topic)
    consumer = _consumer(bootstrap, group)
    try:
        consumer.subscribe([topic])
        records = _read(consumer, len(SAMPLES))
        assignment = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
        consumer.commit(asynchronous=False)
        committed = consumer.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=SCENARIO_TIMEOUT_S
        )
    finally:
        consumer.close()
    return {
        "assignment": assignment,
        "records": records,
        "committed": {tp.partition: tp.offset for tp in committed},
    }


def group_two_members(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    """Two members of one group split the topic's partitions; each reads its share.

    The records are produced only once both members hold an assignment, so no rebalance
    can move a partition while they read (librdkafka serves both members' callbacks from
    this one thread).
    """
    _create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic)
    members = [_consumer(bootstrap, group), _consumer(bootstrap, group)]
    try:
        for member in members:
            member.subscribe([topic])
        wait_until(
            lambda: [_poll_nothing(m) for m in members],
            lambda _: all(m.assignment() for m in members),
        )
        _produce_samples(bootstrap, topic)
        records: list[list[dict[str, Any]]] = [[], []]
        deadline = time.monotonic() + SCENARIO_TIMEOUT_S
        while sum(map(len, records)) < len(SAMPLES) and time.monotonic() < deadline:
            for mine, member in zip(records, members, strict=True):
                mine.extend(_observed(msg) for msg in _poll(member, len(SAMPLES)))
        shares = sorted(
            (sorted((tp.topic, tp.partition) for tp in m.assignment()), sort_records(r))
            for m, r in zip(members, records, strict=True)
        )
    finally:
        for member in members:
            member.close()
    return {"shares": [{"assignment": a, "records": r} for a, r in shares]}


def _poll(consumer: Consumer, count: int) -> list[Message]:
    msgs = consumer.consume(num_messages=count, timeout=0.2)
    for msg in msgs:
        if msg.error() is not None:
            raise KafkaException(msg.error())
    return msgs


def _poll_nothing(consumer: Consumer) -> None:
    """Serve the group protocol while the topic is still empty."""
    if _poll(consumer, 1):
        raise RuntimeError("a record arrived before the scenario produced any")


def offsets(bootstrap: str, topic: str) -> dict[str, Any]:
    _create_topic(AdminClient({"bootstrap.servers": bootstrap}), topic)
    _produce_samples(bootstrap, topic)
    consumer = _consumer(bootstrap, f"{topic}-unused")
    try:
        marks = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=SCENARIO_TIMEOUT_S)
            for p in range(PARTITIONS)
        }
        lookups = {}
        for ts in lookup_times():
            found = consumer.offsets_for_times(
                [TopicPartition(topic, p, ts) for p in range(PARTITIONS)],
                timeout=SCENARIO_TIMEOUT_S,
            )
            # librdkafka reports "no such record" as offset -1 (OFFSET_END) and no timestamp.
            lookups[ts - T0_MS] = {
                tp.partition: tp.offset if tp.offset >= 0 else None for tp in found
            }
    finally:
        consumer.close()
    return {
        "earliest": {p: low for p, (low, _) in marks.items()},
        "latest": {p: high for p, (_, high) in marks.items()},
        "for_times": lookups,
    }


def _topic_config(admin: AdminClient, topic: str, key: str) -> Any:
    resource = ConfigResource(ResourceType.TOPIC, topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=SCENARIO_TIMEOUT_S)
    entry = entries[key]
    return (entry.value, CONFIG_SOURCES[int(entry.source)])


def admin_topics(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    seen: dict[str, Any] = {"create": _create_topic(admin, topic, partitions=3)}
    seen["create_again"] = _create_topic(admin, topic, partitions=3)
    seen["listed_after_create"] = topic in wait_until(
        lambda: admin.list_topics(timeout=SCENARIO_TIMEOUT_S).topics, lambda ts: topic in ts
    )
    seen["retention_before"] = _topic_config(admin, topic, "retention.ms")
    change = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("retention.ms", RETENTION_MS, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    admin.incremental_alter_configs([change])[change].result(timeout=SCENARIO_TIMEOUT_S)
    seen["retention_after"] = wait_until(
        lambda: _topic_config(admin, topic, "retention.ms"),
        lambda entry: entry[0] == RETENTION_MS,
    )
    admin.delete_topics([topic])[topic].result(timeout=SCENARIO_TIMEOUT_S)
    seen["listed_after_delete"] = topic in wait_until(
        lambda: admin.list_topics(timeout=SCENARIO_TIMEOUT_S).topics, lambda ts: topic not in ts
    )
    return seen
