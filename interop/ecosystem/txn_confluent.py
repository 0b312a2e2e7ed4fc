"""confluent-kafka's (librdkafka's) transactional API against any broker (issue 36):
consume-transform-produce with `send_offsets_to_transaction`, committed and aborted
transactions, a transaction left open while its offsets are pending, and a fenced zombie.

`observe(bootstrap, names)` returns one plain document (records per isolation level,
ListOffsets under both levels, the group's committed offsets after each step, the errors
librdkafka raised by name) for the differential test to compare between brokers.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]  # not in __all__

from interop.ecosystem import kafka_io, txn_wire

PARTITIONS = 2
TXN_TIMEOUT_S = 30.0
# How long a read_committed committed() may keep retrying UNSTABLE_OFFSET_COMMIT.
PENDING_OFFSETS_TIMEOUT_S = 3.0
READ_TIMEOUT_S = 30.0


def _producer(bootstrap: str, txn_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap, "transactional.id": txn_id,
            "transaction.timeout.ms": 60_000, "linger.ms": 0,
        }
    )  # fmt: skip
    producer.init_transactions(TXN_TIMEOUT_S)
    return producer


def _consumer(bootstrap: str, group: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "isolation.level": isolation,
        }
    )  # fmt: skip


def _error(step: Callable[[], object]) -> str:
    """'' if `step` succeeds, else the KafkaError's name (and 'fatal' if it is)."""
    try:
        step()
    except KafkaException as exc:
        err = exc.args[0]
        if isinstance(err, KafkaError):
            return f"{err.name()}{' fatal' if err.fatal() else ''}"
        return type(exc).__name__
    return ""


def _send(producer: Producer, topic: str, records: list[tuple[int, str]]) -> None:
    for partition, value in records:
        producer.produce(topic, value.encode(), value.encode(), partition=partition)
    if producer.flush(TXN_TIMEOUT_S):
        raise RuntimeError(f"{topic}: records not acknowledged")


def _offsets(producer: Producer, consumer: Consumer, topic: str, ends: dict[int, int]) -> None:
    parts = [TopicPartition(topic, p, o) for p, o in ends.items()]
    producer.send_offsets_to_transaction(parts, consumer.consumer_group_metadata(), TXN_TIMEOUT_S)


def list_offsets(bootstrap: str, topic: str) -> dict[str, dict[int, int]]:
    client = kafka_io.admin(bootstrap)
    out: dict[str, dict[int, int]] = {}
    for level in (IsolationLevel.READ_UNCOMMITTED, IsolationLevel.READ_COMMITTED):
        specs = {
            TopicPartition(topic, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
            for p in range(PARTITIONS)
        }
        futures = client.list_offsets(specs, isolation_level=level)
        out[level.name.lower()] = {
            tp.partition: f.result(kafka_io.ADMIN_TIMEOUT_S).offset for tp, f in futures.items()
        }
    return out


def committed(bootstrap: str, topic: str, group: str, isolation: str) -> dict[str, Any]:
    """The group's committed offsets as a consumer of `isolation` asks (read_committed
    asks OffsetFetch with require_stable), or the error it ends with."""
    consumer = _consumer(bootstrap, group, isolation)
    try:
        parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        try:
            got = consumer.committed(parts, timeout=PENDING_OFFSETS_TIMEOUT_S)
        except KafkaException as exc:
            err = exc.args[0]
            return {"error": err.name() if isinstance(err, KafkaError) else str(exc)}
        return {"offsets": {tp.partition: tp.offset for tp in got}}
    finally:
        consumer.close()


def read(bootstrap: str, topic: str, isolation: str) -> list[tuple[int, int, str]]:
    """(partition, offset, value) of every record `isolation` delivers, to the end offsets
    that isolation level sees."""
    consumer = _consumer(bootstrap, "txn-reader-unused", isolation)
    try:
        ends = {
            p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(PARTITIONS)
        }
        consumer.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
        out: list[tuple[int, int, str]] = []
        deadline = time.monotonic() + READ_TIMEOUT_S
        while time.monotonic() < deadline:
            positions = consumer.position([TopicPartition(topic, p) for p in range(PARTITIONS)])
            if all(tp.offset >= ends[tp.partition] for tp in positions):
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            value = msg.value()
            assert isinstance(value, bytes)
            partition, offset = msg.partition(), msg.offset()
            assert partition is not None and offset is not None
            out.append((partition, offset, value.decode()))
        return sorted(out)
    finally:
        consumer.close()


def _settled(bootstrap: str, topic: str) -> bool:
    offsets = list_offsets(bootstrap, topic)
    return offsets["read_committed"] == offsets["read_uncommitted"]


def _wait(check: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.05)
    return check()


def observe(bootstrap: str, src: str, dst: str, group: str, txn_id: str) -> dict[str, Any]:
    """The scenario on `bootstrap` (topics `src`, `dst` of two partitions exist; `src`
    holds three records per partition): see the module doc."""
    seen: dict[str, Any] = {}
    source = _consumer(bootstrap, group, "read_committed")
    producer = _producer(bootstrap, txn_id)
    try:
        producer.begin_transaction()
        _send(producer, dst, [(0, "c1-0"), (1, "c1-1"), (0, "c1-2")])
        _offsets(producer, source, src, {0: 2, 1: 1})
        producer.commit_transaction(TXN_TIMEOUT_S)
        seen["committed_1"] = committed(bootstrap, src, group, "read_committed")

        producer.begin_transaction()
        _send(producer, dst, [(1, "x2-0"), (0, "x2-1")])
        _offsets(producer, source, src, {0: 3, 1: 3})
        producer.abort_transaction(TXN_TIMEOUT_S)
        seen["committed_2"] = committed(bootstrap, src, group, "read_committed")

        producer.begin_transaction()
        _send(producer, dst, [(1, "c3-0")])
        _offsets(producer, source, src, {0: 3, 1: 2})
        producer.commit_transaction(TXN_TIMEOUT_S)
        seen["committed_3"] = committed(bootstrap, src, group, "read_committed")

        # An open transaction with pending offsets: the LSO stops at its first record and a
        # read_committed consumer's committed() is told the offsets are unstable.
        producer.begin_transaction()
        _send(producer, dst, [(0, "o4-0")])
        _offsets(producer, source, src, {1: 3})
        seen["offsets_open"] = list_offsets(bootstrap, dst)
        seen["committed_open"] = {
            level: committed(bootstrap, src, group, level)
            for level in ("read_committed", "read_uncommitted")
        }
        seen["offset_fetch_open"] = {
            f"require_stable={stable}": txn_wire.offset_fetch(
                bootstrap, group, src, PARTITIONS, require_stable=stable
            )
            for stable in (True, False)
        }
        seen["read_open"] = read(bootstrap, dst, "read_committed")

        # A zombie: a second instance of the transactional.id fences this one.
        zombie = producer
        producer = _producer(bootstrap, txn_id)
        seen["zombie_commit"] = _error(lambda: zombie.commit_transaction(TXN_TIMEOUT_S))
        producer.begin_transaction()
        _send(producer, dst, [(0, "c5-0"), (1, "c5-1")])
        producer.commit_transaction(TXN_TIMEOUT_S)
    finally:
        source.close()
        producer.flush(1)
    # Kafka answers EndTxn before it writes the markers: wait until no transaction is open.
    if not _wait(lambda: _settled(bootstrap, dst), TXN_TIMEOUT_S):
        raise TimeoutError(f"{dst}: the last commit's markers never landed")
    seen["committed_end"] = committed(bootstrap, src, group, "read_committed")
    seen["offsets_end"] = list_offsets(bootstrap, dst)
    seen["read_committed"] = read(bootstrap, dst, "read_committed")
    seen["read_uncommitted"] = read(bootstrap, dst, "read_uncommitted")
    return seen
