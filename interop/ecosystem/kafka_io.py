"""The Python side of the ecosystem scenarios (confluent-kafka): create topics, produce
the input, read a topic back whole, look at configs and committed offsets. The tool under
test (Connect, MirrorMaker 2, Streams) does the rest.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (  # type: ignore[attr-defined]  # re-exported, not in __all__
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
)

ADMIN_TIMEOUT_S = 30.0
T = TypeVar("T")
# A record's headers as confluent-kafka takes and gives them.
Headers = Sequence[tuple[str, str | bytes | None]]


@dataclass(frozen=True, slots=True)
class Rec:
    """One record as the scenarios compare it (the topic name is left out on purpose)."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, str | bytes | None], ...]
    timestamp_ms: int


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def create_topic(
    bootstrap: str, topic: str, partitions: int = 1, configs: Mapping[str, str] | None = None
) -> None:
    client = admin(bootstrap)  # kept alive until the future resolves
    futures = client.create_topics([NewTopic(topic, partitions, 1, config=dict(configs or {}))])
    futures[topic].result(ADMIN_TIMEOUT_S)


def grow_partitions(bootstrap: str, topic: str, total: int) -> None:
    """CreatePartitions: `topic` now has `total` partitions."""
    client = admin(bootstrap)
    client.create_partitions([NewPartitions(topic, total)])[topic].result(ADMIN_TIMEOUT_S)


def topic_names(bootstrap: str) -> set[str]:
    return set(admin(bootstrap).list_topics(timeout=ADMIN_TIMEOUT_S).topics)


def partition_count(bootstrap: str, topic: str) -> int:
    meta = admin(bootstrap).list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
    if meta is None or meta.error is not None:
        return 0
    return len(meta.partitions)


def topic_config(bootstrap: str, topic: str) -> dict[str, str]:
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    client = admin(bootstrap)
    entries = client.describe_configs([resource])[resource].result(ADMIN_TIMEOUT_S)
    return {name: entry.value for name, entry in entries.items()}


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[tuple[int, bytes | None, bytes | None, Headers, int | None]],
) -> None:
    """(partition, key, value, headers, timestamp_ms or None) each, acked before returning."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    failures: list[str] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failures.append(str(err))

    for partition, key, value, headers, timestamp_ms in records:
        producer.produce(
            topic, value, key, partition=partition, headers=list(headers),
            timestamp=timestamp_ms or 0, on_delivery=on_delivery,
        )  # fmt: skip
    remaining = producer.flush(ADMIN_TIMEOUT_S)
    if failures or remaining:
        raise RuntimeError(f"produce to {topic}: {failures or f'{remaining} not acked'}")


def _as_bytes(data: str | bytes | None) -> bytes | None:
    """No deserializer is configured, so keys and values come as bytes (or None)."""
    return data.encode() if isinstance(data, str) else data


def read_all(bootstrap: str, topic: str, *, timeout_s: float = 20.0) -> list[Rec]:
    """Every record of every partition of `topic`, from offset 0 to the high watermark."""
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    try:
        meta = consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics[topic]
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in meta.partitions
        }
        todo = {p for p, end in ends.items() if end > 0}
        consumer.assign([TopicPartition(topic, p, 0) for p in todo])
        out: list[Rec] = []
        deadline = time.monotonic() + timeout_s
        while todo and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None  # a fetched record has both
            headers = msg.headers() or []
            assert isinstance(headers, list)  # confluent-kafka gives a list of pairs
            out.append(
                Rec(
                    partition, offset, _as_bytes(msg.key()), _as_bytes(msg.value()),
                    tuple(headers), msg.timestamp()[1],
                )
            )  # fmt: skip
            if offset + 1 >= ends[partition]:
                todo.discard(partition)
        if todo:
            raise TimeoutError(f"{topic}: partitions {sorted(todo)} not read to their end")
        return sorted(out, key=lambda r: (r.partition, r.offset))
    finally:
        consumer.close()


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int) -> dict[int, int]:
    """A group member reads `count` records and commits; the committed offsets."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": group,
            "auto.offset.reset": "earliest", "enable.auto.commit": False,
        }
    )  # fmt: skip
    try:
        consumer.subscribe([topic])
        seen = 0
        deadline = time.monotonic() + 60
        while seen < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen += 1
        if seen < count:
            raise TimeoutError(f"{group} read {seen} of {count} records of {topic}")
        consumer.commit(asynchronous=False)
        return committed(bootstrap, topic, group)
    finally:
        consumer.close()


def committed(bootstrap: str, topic: str, group: str) -> dict[int, int]:
    """The group's committed offsets on `topic` (partitions without one are left out)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        meta = consumer.list_topics(topic, timeout=ADMIN_TIMEOUT_S).topics.get(topic)
        if meta is None or meta.error is not None:
            return {}
        parts = [TopicPartition(topic, p) for p in meta.partitions]
        return {
            tp.partition: tp.offset
            for tp in consumer.committed(parts, timeout=ADMIN_TIMEOUT_S)
            if tp.offset >= 0
        }
    finally:
        consumer.close()


def wait_for(
    what: str, check: Callable[[], T | None], timeout_s: float, interval_s: float = 1.0
) -> T:
    """Poll `check()` until it returns a truthy value; that value, or TimeoutError."""
    deadline = time.monotonic() + timeout_s
    last: object = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except KafkaException as exc:  # a topic not there yet, a coordinator loading
            last = exc
        else:
            if value:
                return value
            last = value
        time.sleep(interval_s)
    raise TimeoutError(f"{what} not reached within {timeout_s} s (last: {last!r})")
