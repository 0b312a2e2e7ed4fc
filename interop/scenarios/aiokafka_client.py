"""The scenarios with aiokafka (asyncio; never uses flexible versions), default settings."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
from aiokafka.errors import for_code

from interop.observed import (
    CONFIG_SOURCES,
    PARTITIONS,
    SAMPLES,
    SCENARIO_TIMEOUT_S,
    T0_MS,
    await_until,
    from_consumer_record,
    lookup_times,
    sort_records,
)

RETENTION_MS = "3600000"


async def _create_topic(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> str:
    """Create `topic`; the broker's error name ("NONE" on success)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        response = await admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        await admin.close()
    code = response.topic_errors[0][1]
    return "NONE" if code == 0 else for_code(code).message


async def _produce_samples(
    bootstrap: str, topic: str, codec: str = "none"
) -> list[tuple[int, int]]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, compression_type=None if codec == "none" else codec
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic,
                value=s.value,
                key=s.key,
                partition=s.partition,
                timestamp_ms=s.timestamp_ms,
                headers=list(s.headers),
            )
            for s in SAMPLES
        ]
        metas = await asyncio.wait_for(asyncio.gather(*futures), SCENARIO_TIMEOUT_S)
    finally:
        await producer.stop()
    return [(m.partition, m.offset) for m in metas]


async def _read(consumer: AIOKafkaConsumer, count: int) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    while len(records) < count and time.monotonic() < deadline:
        for batch in (await consumer.getmany(timeout_ms=500)).values():
            records.extend(from_consumer_record(r) for r in batch)
    return sort_records(records)


async def _produce_consume(bootstrap: str, topic: str, codec: str) -> dict[str, Any]:
    await _create_topic(bootstrap, topic)
    acks = await _produce_samples(bootstrap, topic, codec)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        records = await _read(consumer, len(SAMPLES))
    finally:
        await consumer.stop()
    return {"acks": acks, "records": records}


def produce_consume(bootstrap: str, topic: str, codec: str) -> dict[str, Any]:
    return asyncio.run(_produce_consume(bootstrap, topic, codec))


async def _group_consume(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    await _create_topic(bootstrap, topic)
    await _produce_samples(bootstrap, topic)
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        records = await _read(consumer, len(SAMPLES))
        assignment = sorted((tp.topic, tp.partition) for tp in consumer.assignment())
        await consumer.commit()
        committed = {
            p: await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)
        }
    finally:
        await consumer.stop()
    return {"assignment": assignment, "records": records, "committed": committed}


def group_consume(bootstrap: str, topic: str, group: str) -> dict[str, Any]:
    return asyncio.run(_group_consume(bootstrap, topic, group))


async def _offsets(bootstrap: str, topic: str) -> dict[str, Any]:
    await _create_topic(bootstrap, topic)
    await _produce_samples(bootstrap, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        earliest = await consumer.beginning_offsets(tps)
        latest = await consumer.end_offsets(tps)
        lookups = {}
        for ts in lookup_times():
            found = await consumer.offsets_for_times(dict.fromkeys(tps, ts))
            lookups[ts - T0_MS] = {
                tp.partition: None if hit is None else (hit.offset, hit.timestamp)
                for tp, hit in found.items()
            }
    finally:
        await consumer.stop()
    return {
        "earliest": {tp.partition: o for tp, o in earliest.items()},
        "latest": {tp.partition: o for tp, o in latest.items()},
        "for_times": lookups,
    }


def offsets(bootstrap: str, topic: str) -> dict[str, Any]:
    return asyncio.run(_offsets(bootstrap, topic))


async def _topic_config(admin: AIOKafkaAdminClient, topic: str, key: str) -> Any:
    (response,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
    (resource,) = response.to_object()["resources"]
    for entry in resource["config_entries"]:
        if entry["config_names"] == key:
            return (entry["config_value"], CONFIG_SOURCES[entry["config_source"]])
    return None


async def _admin_topics(bootstrap: str, topic: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"create": await _create_topic(bootstrap, topic, partitions=3)}
    seen["create_again"] = await _create_topic(bootstrap, topic, partitions=3)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        seen["listed_after_create"] = topic in await await_until(
            admin.list_topics, lambda ts: topic in ts
        )
        seen["retention_before"] = await _topic_config(admin, topic, "retention.ms")
        await admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": RETENTION_MS})]
        )
        seen["retention_after"] = await await_until(
            lambda: _topic_config(admin, topic, "retention.ms"),
            lambda entry: entry is not None and entry[0] == RETENTION_MS,
        )
        await admin.delete_topics([topic])
        seen["listed_after_delete"] = topic in await await_until(
            admin.list_topics, lambda ts: topic not in ts
        )
    finally:
        await admin.close()
    return seen


def admin_topics(bootstrap: str, topic: str) -> dict[str, Any]:
    return asyncio.run(_admin_topics(bootstrap, topic))
