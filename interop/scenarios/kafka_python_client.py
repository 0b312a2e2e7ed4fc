"""The scenarios with kafka-python, default settings (idempotent producer, fetch sessions)."""

from __future__ import annotations

import time
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import ConfigResource, ConfigResourceType
from kafka.errors import KafkaError

from interop.observed import (
    PARTITIONS,
    SAMPLES,
    SCENARIO_TIMEOUT_S,
    T0_MS,
    error_name,
    from_consumer_record,
    lookup_times,
    sort_records,
    wait_until,
)

RETENTION_MS = "3600000"


def _producer(bootstrap: str, codec: str = "none") -> KafkaProducer:
    return KafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec
    )


def _create_topic(admin: KafkaAdminClient, topic: str, partitions: int = PARTITIONS) -> None:
    admin.create_topics(
        {topic: {"num_partitions": partitions, "replication_factor": 1}}, wait_for_metadata=True
    )


def _create_topic_at(bootstrap: str, topic: str) -> None:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        _create_topic(admin, topic)
    finally:
        admin.close()


def _produce_samples(bootstrap: str, topic: str, codec: str = "none") -> list[tuple[int, int]]:
    producer = _producer(bootstrap, codec)
    try:
        futures = [
            producer.send(
                topic,
                value=s.value,
                key=s.key,
                headers=list(s.headers),
                partition=s.partition,
                timestamp_ms=s.timestamp_ms,
            )
            for s in SAMPLES
        ]
        metas = [f.get(timeout=SCENARIO_TIMEOUT_S) for f in futures]
    finally:
        producer.close()
    return [(m.partition, m.offset) for m in metas]


def _read(consumer: KafkaConsumer, count: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(from_consumer_record(r) for r in batch)
    return sort_records(records)


def produce_consume(bootstrap: str, topic: str, codec: str) -> dict[str, Any]:
    _create_topic_at(bootstrap, topic)
    acks = _produce_samples(bootstrap, topic, codec)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        records = _read(consumer, len(SAMPLES))
    finally:
        consumer.close()
    return {"acks": acks, "records": records}


def group_consume(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    _create_topic_at(bootstrap, topic)
    _produce_samples(bootstrap, topic)
    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        records = _read(consumer, len(SAMPLES))
        assignment = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
        consumer.commit()
        committed = {p: consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)}
    finally:
        consumer.close()
    return {"assignment": assignment, "records": records, "committed": committed}


def offsets(bootstrap: str, topic: str) -> dict[str, Any]:
    _create_topic_at(bootstrap, topic)
    _produce_samples(bootstrap, topic)
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        earliest = consumer.beginning_offsets(tps)
        latest = consumer.end_offsets(tps)
        lookups = {}
        for ts in lookup_times():
            found = consumer.offsets_for_times(dict.fromkeys(tps, ts))
            lookups[ts - T0_MS] = {
                tp.partition: None if hit is None else (hit.offset, hit.timestamp)
                for tp, hit in found.items()
            }
    finally:
        consumer.close()
    return {
        "earliest": {tp.partition: o for tp, o in earliest.items()},
        "latest": {tp.partition: o for tp, o in latest.items()},
        "for_times": lookups,
    }


def admin_topics(bootstrap: str, topic: str) -> dict[str, Any]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    seen: dict[str, Any] = {}
    try:
        _create_topic(admin, topic, partitions=3)
        seen["create"] = "NONE"
        seen["listed_after_create"] = topic in wait_until(admin.list_topics, lambda ts: topic in ts)
        try:
            _create_topic(admin, topic, partitions=3)
            seen["create_again"] = "NONE"
        except KafkaError as exc:
            seen["create_again"] = error_name(exc)
        resource = ConfigResource(ConfigResourceType.TOPIC, topic)
        seen["retention_before"] = _topic_config(admin, resource, "retention.ms")
        change = {"retention.ms": RETENTION_MS}
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs=change)])
        seen["retention_after"] = wait_until(
            lambda: _topic_config(admin, resource, "retention.ms"),
            lambda entry: entry[0] == RETENTION_MS,
        )
        admin.delete_topics([topic])
        seen["listed_after_delete"] = topic in wait_until(
            admin.list_topics, lambda ts: topic not in ts
        )
    finally:
        admin.close()
    return seen


def _topic_config(admin: KafkaAdminClient, resource: ConfigResource, key: str) -> Any:
    described = admin.describe_configs([resource], config_filter="all")
    entries = next(iter(next(iter(described.values())).values()))
    entry = entries[key]
    return (entry["value"], entry.get("config_source"))
