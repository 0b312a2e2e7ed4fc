"""Batch and streaming writes round-trip through a real broker; schema errors are clear."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql import Row

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

# The `spark` (session) and `broker` (module) fixtures.
pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration]

_names = (f"w{i}" for i in itertools.count())

HEADERS_SCHEMA = "array<struct<key:string,value:binary>>"


def new_topic(broker: Broker, partitions: int) -> str:
    topic = next(_names)
    with broker.client() as client:
        client.create_topic(topic, partitions)
    return topic


def read_back(spark, broker: Broker, topic: str):
    return (
        spark.read.format("tidelog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .load()
    )


def test_batch_write_round_trips_every_column(spark, broker) -> None:
    topic = new_topic(broker, 3)
    rows = [
        Row(
            key=f"k{i}" if i % 3 else None,
            value=f"value {i}".encode(),
            partition=i % 3,
            headers=[Row(key="n", value=str(i).encode())] if i % 2 else None,
        )
        for i in range(300)
    ]
    df = spark.createDataFrame(
        rows, f"key string, value binary, partition int, headers {HEADERS_SCHEMA}"
    )
    (
        df.write.format("tidelog")
        .mode("append")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .save()
    )
    got = read_back(spark, broker, topic).collect()
    assert len(got) == 300
    by_value = {r["value"]: r for r in got}
    for i, row in enumerate(rows):
        back = by_value[row.value]
        assert back["key"] == (row.key.encode() if row.key else None)
        assert back["partition"] == i % 3
        expected_headers = [("n", str(i).encode())] if i % 2 else None
        actual = [(h["key"], h["value"]) for h in back["headers"]] if back["headers"] else None
        assert actual == expected_headers


def test_topic_column_partitioner_and_timestamp_column(spark, broker) -> None:
    a, b = new_topic(broker, 2), new_topic(broker, 4)
    df = spark.createDataFrame(
        [(a if i % 2 else b, f"k{i % 5}", f"v{i}", i * 1000) for i in range(200)],
        "topic string, key string, value string, ms long",
    ).selectExpr("topic", "key", "value", "timestamp_millis(ms) AS timestamp")
    df.write.format("tidelog").mode("append").option("bootstrap.servers", broker.bootstrap).save()
    got_a = read_back(spark, broker, a).collect()
    got_b = read_back(spark, broker, b).collect()
    assert (len(got_a), len(got_b)) == (100, 100)
    # A key always lands in one partition; the record keeps the row's timestamp.
    for got in (got_a, got_b):
        assert len({(r["key"], r["partition"]) for r in got}) == len({r["key"] for r in got})
        for r in got:
            ms = int(r["value"][1:]) * 1000
            assert r["timestamp"].timestamp() * 1000 == pytest.approx(ms)
    assert len({r["partition"] for r in got_b}) > 1


@pytest.mark.parametrize(
    ("ddl", "options", "message"),
    [
        ("key string", {"topic": "x"}, "Required attribute 'value' not found"),
        ("value int", {"topic": "x"}, "value attribute type must be a StringType or BinaryType"),
        ("value string, key int", {"topic": "x"}, "key attribute type must be"),
        ("value string", {}, "topic option required when no 'topic' attribute is present"),
        ("value string, topic int", {}, "topic attribute type must be a StringType"),
        ("value string, partition string", {"topic": "x"}, "partition attribute type must be"),
        ("value string, headers array<string>", {"topic": "x"}, "headers attribute type must be"),
    ],
)
def test_wrong_columns_are_refused_at_save(spark, broker, ddl, options, message) -> None:
    df = spark.createDataFrame([], ddl)
    writer = df.write.format("tidelog").mode("append").option("bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        writer = writer.option(key, value)
    with pytest.raises(Exception, match=message):
        writer.save()


def test_save_modes_forced_by_the_python_api(spark, broker) -> None:
    df = spark.createDataFrame([("v",)], "value string")
    writer = df.write.format("tidelog").option("bootstrap.servers", broker.bootstrap)
    with pytest.raises(Exception, match="UNSUPPORTED_DATA_SOURCE_SAVE_MODE"):
        writer.option("topic", "x").save()
    with pytest.raises(Exception, match="append-only log: save mode 'overwrite'"):
        writer.option("topic", "x").mode("overwrite").save()


def test_streaming_write_copies_a_topic(spark, broker, tmp_path: Path) -> None:
    source, sink = new_topic(broker, 2), new_topic(broker, 2)
    for partition in range(2):
        broker.produce(source, partition, 150, headers_every=4)
    query = (
        spark.readStream.format("tidelog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", source)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("maxOffsetsPerTrigger", "100")
        .load()
        .select("key", "value", "partition", "headers")
        .writeStream.format("tidelog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", sink)
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None

    def content(topic: str) -> list[tuple]:
        return sorted(
            (r["partition"], r["key"], r["value"], str(r["headers"]))
            for r in read_back(spark, broker, topic).collect()
        )

    assert len(content(sink)) == 300
    assert content(sink) == content(source)
