"""A Kafka client's group consumer in its own process, for tests that SIGKILL it.

    python kafka_group_child.py LIBRARY BOOTSTRAP TOPIC SESSION_MS

LIBRARY is kafka-python, aiokafka or confluent-kafka. It subscribes to TOPIC in
group "g" and prints one JSON line per change of assignment and per record read.
"""

from __future__ import annotations

import asyncio
import json
import sys
import warnings
from typing import Any

HEARTBEAT_MS = 300


def _say(**event: Any) -> None:
    print(json.dumps(event), flush=True)


def _report(assigned: set[int], seen: list[frozenset[int]]) -> None:
    if not seen or seen[-1] != frozenset(assigned):
        seen.append(frozenset(assigned))
        _say(assigned=sorted(assigned))


def kafka_python(bootstrap: str, topic: str, session_ms: int) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        import kafka

    consumer = kafka.KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id="g",
        auto_offset_reset="earliest",
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=HEARTBEAT_MS,
    )
    seen: list[frozenset[int]] = []
    while True:
        for records in consumer.poll(timeout_ms=100).values():
            _say(values=[r.value.decode() for r in records])
        _report({tp.partition for tp in consumer.assignment()}, seen)


def aiokafka_(bootstrap: str, topic: str, session_ms: int) -> None:
    import aiokafka

    async def run() -> None:
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id="g",
            auto_offset_reset="earliest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS,
        )
        await consumer.start()
        seen: list[frozenset[int]] = []
        while True:
            for records in (await consumer.getmany(timeout_ms=100)).values():
                _say(values=[r.value.decode() for r in records])
            _report({tp.partition for tp in consumer.assignment()}, seen)

    asyncio.run(run())


def confluent(bootstrap: str, topic: str, session_ms: int) -> None:
    import confluent_kafka

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "g",
            "auto.offset.reset": "earliest",
            "session.timeout.ms": session_ms,
            "heartbeat.interval.ms": HEARTBEAT_MS,
        }
    )
    consumer.subscribe([topic])
    seen: list[frozenset[int]] = []
    while True:
        message = consumer.poll(0.1)
        if message is not None and message.error() is None:
            _say(values=[message.value().decode()])
        _report({tp.partition for tp in consumer.assignment()}, seen)


LIBRARIES = {"kafka-python": kafka_python, "aiokafka": aiokafka_, "confluent-kafka": confluent}

if __name__ == "__main__":
    library, bootstrap, topic, session_ms = sys.argv[1:5]
    LIBRARIES[library](bootstrap, topic, int(session_ms))
