"""The Tidelog Data Source reads a Kafka-produced topic (Kafka v2 batches, stored as the
producer sent them) with the same rows as the same records produced through Tidelog's
own protocol (§3 batches): a real local Spark session against a real broker, with and
without local reads, with headers, nulls and compression."""

from __future__ import annotations

import itertools
import json
from typing import TYPE_CHECKING

import pytest
from confluent_kafka import Producer

from protocol import calls
from protocol.batch import ANY_LAYOUT, F_MAGIC, KAFKA_MAGIC, BatchWalk, encode_batch

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration]

_names = (f"kp{i}" for i in itertools.count())
PARTITIONS = 2
PER_PARTITION = 700


def records(partition: int) -> list[tuple]:
    """(key, value, headers, timestamp): nulls, empties and headers among them."""
    rows = []
    for i in range(PER_PARTITION):
        key = None if i % 11 == 4 else b"k%d" % (i % 50)
        value = None if i % 17 == 9 else (b"" if i % 19 == 2 else b"p%d-v%d" % (partition, i))
        headers = [("h", b"%d" % i), ("n", None)] if i % 7 == 0 else []
        rows.append((key, value, headers, 1_700_000_000_000 + i))
    return rows


def produce_kafka(broker: Broker, topic: str, compression: str) -> None:
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "compression.type": compression, "linger.ms": 20}
    )
    for partition in range(PARTITIONS):
        for i, (key, value, headers, ts) in enumerate(records(partition)):
            producer.produce(
                topic, key=key, value=value, headers=headers or None, partition=partition,
                timestamp=ts,
            )  # fmt: skip
            if i % 150 == 149:
                producer.flush(30)  # several batches of varied sizes
    assert producer.flush(30) == 0


def produce_tidelog(broker: Broker, topic: str) -> None:
    with broker.client() as client:
        for partition in range(PARTITIONS):
            rows = records(partition)
            for i in range(0, len(rows), 150):
                client.produce(topic, partition, encode_batch(rows[i : i + 150]))


def stored_magics(broker: Broker, topic: str) -> set[int]:
    """The layouts partition 0's first batches are stored in (a fetch that takes them
    as stored)."""
    with broker.client() as client:
        data = client.call(calls.fetch(topic, 0, 0, kafka_batches=True)).records
    return {fields[F_MAGIC] for _, fields in BatchWalk(data, whole=False, layout=ANY_LAYOUT)}


def new_topic(broker: Broker, **configs: str) -> str:
    topic = next(_names)
    with broker.client() as client:
        client.create_topic(topic, PARTITIONS, configs or None)
    return topic


def rows_of(spark, broker: Broker, topic: str, **options: str) -> list[tuple]:
    reader = spark.read.format("tidelog").option("bootstrap.servers", broker.bootstrap)
    for key, value in {"subscribe": topic, "includeHeaders": "true", **options}.items():
        reader = reader.option(key, value)
    out = []
    for r in reader.load().collect():
        headers = None if r["headers"] is None else [(h["key"], h["value"]) for h in r["headers"]]
        out.append(
            (r["partition"], r["offset"], r["key"], r["value"], headers, r["timestamp"],
             r["timestampType"])
        )  # fmt: skip
    return sorted(out)


@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
@pytest.mark.parametrize("local_reads", ["true", "false"])
def test_a_kafka_produced_topic_reads_as_a_tidelog_one(
    spark, broker, compression: str, local_reads: str
) -> None:
    kafka_topic, tidelog_topic = new_topic(broker), new_topic(broker)
    produce_kafka(broker, kafka_topic, compression)
    produce_tidelog(broker, tidelog_topic)
    assert stored_magics(broker, kafka_topic) == {KAFKA_MAGIC}
    assert stored_magics(broker, tidelog_topic) == {1}
    got = rows_of(spark, broker, kafka_topic, localReads=local_reads)
    assert len(got) == PARTITIONS * PER_PARTITION
    assert got == rows_of(spark, broker, tidelog_topic, localReads=local_reads)
    # A range that starts and ends inside batches, as Kafka's source cuts it.
    ranged = rows_of(
        spark,
        broker,
        kafka_topic,
        startingOffsets=json.dumps({kafka_topic: {"0": 149, "1": 3}}),
        endingOffsets=json.dumps({kafka_topic: {"0": 451, "1": 699}}),
        localReads=local_reads,
    )
    assert ranged == [r for r in got if (149 <= r[1] < 451 if r[0] == 0 else 3 <= r[1] < 699)]
