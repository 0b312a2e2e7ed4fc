"""Kafka consumers nobody here wrote, in consumer groups on the real broker.

kafka-python, aiokafka and confluent-kafka (librdkafka) consumers `subscribe` in one
group: two split a topic's partitions with no overlap and read every record; when
one leaves, the other gets all of them. A kafka-python consumer and a Tidelog
consumer share a group the same way (both speak Kafka's ConsumerProtocol).
"""

from __future__ import annotations

import asyncio
import threading
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiokafka
import confluent_kafka
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

from protocol.batch import encode_batch
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.json_child import JsonChild
from tidelog.client import Client
from tidelog.consumer import Consumer

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]

PARTITIONS = 4
PER_PARTITION = 25
TIMEOUT_S = 30.0
SESSION_MS = 6_000
HEARTBEAT_MS = 300


def wait_until(condition: Callable[[], bool], what: str, timeout_s: float = TIMEOUT_S) -> float:
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.05)
    return time.monotonic() - started


class Member:
    """One consumer of some client library, polling in its own thread.

    `body(stop, member)` runs the library's loop until `stop` is set, updating
    `member.assigned` and `member.values`, and closes the consumer (leaving the group).
    """

    def __init__(self, body: Callable[[threading.Event, Member], None]) -> None:
        self.assigned: frozenset[int] = frozenset()
        self.values: list[bytes] = []
        self.error: BaseException | None = None
        self._stop = threading.Event()

        def run() -> None:
            try:
                body(self._stop, self)
            except BaseException as exc:  # reported by stop()
                self.error = exc

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=TIMEOUT_S)
        assert not self._thread.is_alive(), "consumer did not close"
        if self.error is not None:
            raise self.error


def kafka_python(bootstrap: str, topic: str) -> Callable[[threading.Event, Member], None]:
    def body(stop: threading.Event, member: Member) -> None:
        consumer = kafka.KafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id="g",
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        try:
            while not stop.is_set():
                for records in consumer.poll(timeout_ms=100).values():
                    member.values.extend(r.value for r in records)
                member.assigned = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()

    return body


def aio(bootstrap: str, topic: str) -> Callable[[threading.Event, Member], None]:
    async def run(stop: threading.Event, member: Member) -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id="g",
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await consumer.start()
        try:
            while not stop.is_set():
                for records in (await consumer.getmany(timeout_ms=100)).values():
                    member.values.extend(r.value for r in records)
                member.assigned = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            await consumer.stop()

    return lambda stop, member: asyncio.run(run(stop, member))


def confluent(bootstrap: str, topic: str) -> Callable[[threading.Event, Member], None]:
    def body(stop: threading.Event, member: Member) -> None:
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "g",
                "auto.offset.reset": "earliest",
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": HEARTBEAT_MS,
            }
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                message = consumer.poll(0.1)
                if message is not None and message.error() is None:
                    member.values.append(message.value())
                member.assigned = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()

    return body


def tidelog_consumer(bootstrap: str, topic: str) -> Callable[[threading.Event, Member], None]:
    def body(stop: threading.Event, member: Member) -> None:
        consumer = Consumer(
            bootstrap_servers=bootstrap,
            group_id="g",
            auto_offset_reset="earliest",
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        consumer.subscribe([topic])
        try:
            while not stop.is_set():
                for records in consumer.poll(timeout_ms=100).values():
                    member.values.extend(r.value for r in records)
                member.assigned = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()

    return body


CLIENTS = {"kafka-python": kafka_python, "aiokafka": aio, "confluent-kafka": confluent}


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(
        "group.initial.rebalance.delay.ms=200", "group.min.session.timeout.ms=1000"
    )


def fill(broker: BrokerProcess, topic: str) -> list[bytes]:
    with Client(broker.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
        for p in range(PARTITIONS):
            rows = [(None, b"%d-%d" % (p, i), None, 1) for i in range(PER_PARTITION)]
            admin.produce(topic, p, encode_batch(rows))
    return sorted(b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION))


def split_evenly(members: list[Member]) -> bool:
    held = [m.assigned for m in members]
    flat = sorted(p for a in held for p in a)
    return flat == list(range(PARTITIONS)) and all(len(a) == PARTITIONS // 2 for a in held)


def two_members_then_one(
    broker: BrokerProcess, first: Callable[..., Any], second: Callable[..., Any]
) -> None:
    everything = fill(broker, "events")
    members = [Member(first(broker.bootstrap, "events"))]
    try:
        wait_until(lambda: len(members[0].assigned) == PARTITIONS, "the first member")
        members.append(Member(second(broker.bootstrap, "events")))
        wait_until(lambda: split_evenly(members), "two members split the partitions")
        wait_until(
            lambda: set(members[0].values + members[1].values) == set(everything),
            "every record read",
        )
        leaving = members.pop()
        leaving.stop()
        took = wait_until(lambda: len(members[0].assigned) == PARTITIONS, "the other takes all")
        assert took < SESSION_MS / 1000  # a LeaveGroup, not a session timeout
    finally:
        for member in members:
            member.stop()


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_kafka_consumers_split_and_rebalance(broker: BrokerProcess, client: str) -> None:
    two_members_then_one(broker, CLIENTS[client], CLIENTS[client])


def test_a_kafka_consumer_and_a_tidelog_consumer_share_a_group(broker: BrokerProcess) -> None:
    two_members_then_one(broker, kafka_python, tidelog_consumer)


CHILD = Path(__file__).with_name("kafka_group_child.py")


@pytest.mark.parametrize("client", sorted(CLIENTS))
def test_a_killed_kafka_consumer_loses_its_partitions(
    broker: BrokerProcess, client: str, tmp_path: Path
) -> None:
    everything = fill(broker, "events")
    members: list[Member] = []
    child = JsonChild(CHILD, client, broker.bootstrap, "events", str(SESSION_MS), cwd=tmp_path)
    events = child.events

    def child_held() -> frozenset[int]:
        latest = [e["assigned"] for e in events if "assigned" in e]
        return frozenset(latest[-1]) if latest else frozenset()

    try:
        wait_until(lambda: any(e.get("assigned") for e in events), "the child joined")
        members.append(Member(CLIENTS[client](broker.bootstrap, "events")))
        wait_until(
            lambda: (
                len(members[0].assigned) == PARTITIONS // 2
                and members[0].assigned | child_held() == frozenset(range(PARTITIONS))
            ),
            "child and member split the partitions",
        )
        child.kill()
        took = wait_until(lambda: len(members[0].assigned) == PARTITIONS, "partitions moved")
        assert took < SESSION_MS / 1000 + 5.0  # the session timeout, then a rebalance
        child_values = [v.encode() for e in events for v in e.get("values", ())]
        wait_until(
            lambda: set(members[0].values) | set(child_values) == set(everything),
            "no record lost",
        )
        print(f"{client} kill -9: partitions moved {took:.2f} s after the kill")
    finally:
        child.close()
        for member in members:
            member.stop()
