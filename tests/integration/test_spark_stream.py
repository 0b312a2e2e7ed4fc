"""Streaming reads: Kafka's read limits and triggers, checkpoints, and the driver logic."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxBytes, ReadMaxRows

from spark_connector.options import parse_source_options
from spark_connector.reading import DataLossError
from spark_connector.stream import TidelogStreamReader

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

# The `spark` (session) and `broker` (module) fixtures.
pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration]

_names = (f"s{i}" for i in itertools.count())


def new_topic(broker: Broker, counts: list[int]) -> str:
    topic = next(_names)
    with broker.client() as client:
        client.create_topic(topic, len(counts))
    for partition, count in enumerate(counts):
        broker.produce(topic, partition, count)
    return topic


_open_readers: list[TidelogStreamReader] = []


@pytest.fixture(autouse=True)
def _stop_readers() -> Iterator[None]:
    """Spark never calls stop() (docs/spark.md "What the Python API forces"); tests do, to close the
    driver connection."""
    yield
    while _open_readers:
        _open_readers.pop().stop()


def stream_reader(broker: Broker, topic: str, clock=None, **options: str) -> TidelogStreamReader:
    opts = parse_source_options(
        {"bootstrap.servers": broker.bootstrap, "subscribe": topic, **options}, streaming=True
    )
    reader = TidelogStreamReader(opts, clock=clock) if clock else TidelogStreamReader(opts)
    _open_readers.append(reader)
    return reader


def test_max_offsets_per_trigger_micro_batches_and_restart_from_checkpoint(
    spark, broker, tmp_path: Path
) -> None:
    topic = new_topic(broker, [60, 40])
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"

    def run() -> list[int]:
        query = (
            spark.readStream.format("tidelog")
            .option("bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "30")
            .load()
            .selectExpr("partition", "offset", "value")
            .writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(120)
        assert query.exception() is None
        return [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]]

    assert run() == [30, 30, 30, 10]
    broker.produce(topic, 1, 25, key_prefix=b"again")
    assert run() == [25]  # resumed from the checkpoint: only the new records
    rows = spark.read.parquet(str(out)).collect()
    assert len(rows) == 125
    assert {(r["partition"], r["offset"]) for r in rows} == (
        {(0, o) for o in range(60)} | {(1, o) for o in range(65)}
    )


def test_latest_offset_honours_limits_and_reports_the_latest_offsets(broker) -> None:
    topic = new_topic(broker, [1000, 10, 10])
    reader = stream_reader(broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger="100")
    start = reader.initialOffset()
    assert start == {topic: {"0": 0, "1": 0, "2": 0}} == reader.initialOffset()
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    end = reader.latestOffset(start, ReadMaxRows(100))
    assert end == {topic: {"0": 98, "1": 1, "2": 1}}
    assert reader.reportLatestOffset() == {topic: {"0": 1000, "1": 10, "2": 10}}
    assert reader.latestOffset(end, ReadAllAvailable()) == {topic: {"0": 1000, "1": 10, "2": 10}}
    parts = reader.partitions(start, end)
    assert [(r.partition, r.start, r.end) for p in parts for r in p.ranges] == [
        (0, 0, 98),
        (1, 0, 1),
        (2, 0, 1),
    ]
    assert sum(b.num_rows for p in parts for b in reader.read(p)) == 100
    # The default start is latest; new partitions of a pattern start at earliest.
    assert stream_reader(broker, topic).initialOffset() == {topic: {"0": 1000, "1": 10, "2": 10}}


def test_max_bytes_per_trigger_uses_stored_bytes_per_offset(broker) -> None:
    topic = new_topic(broker, [400])
    reader = stream_reader(broker, topic, startingOffsets="earliest", maxBytesPerTrigger="4000")
    start = reader.initialOffset()
    assert reader.getDefaultReadLimit() == ReadMaxBytes(4000)
    end = reader.latestOffset(start, ReadMaxBytes(4000))
    per_offset = reader._infos[(topic, 0)].bytes_per_offset
    assert 0 < end[topic]["0"] < 400
    assert end[topic]["0"] == int(4000 / per_offset)


def test_min_offsets_per_trigger_waits_until_max_trigger_delay(broker) -> None:
    topic = new_topic(broker, [5])
    now = [0.0]
    reader = stream_reader(
        broker,
        topic,
        clock=lambda: now[0],
        startingOffsets="earliest",
        minOffsetsPerTrigger="10",
        maxOffsetsPerTrigger="50",
        maxTriggerDelay="30s",
    )
    start = reader.initialOffset()
    assert reader.latestOffset(start, ReadMaxRows(50)) == start  # 5 < 10: wait
    now[0] = 29.0
    assert reader.latestOffset(start, ReadMaxRows(50)) == start
    now[0] = 31.0  # maxTriggerDelay passed: take what there is
    assert reader.latestOffset(start, ReadMaxRows(50)) == {topic: {"0": 5}}
    broker.produce(topic, 0, 12)
    now[0] = 32.0
    assert reader.latestOffset({topic: {"0": 5}}, ReadMaxRows(50)) == {topic: {"0": 17}}


def test_available_now_pins_the_target_offsets(broker) -> None:
    topic = new_topic(broker, [20])
    reader = stream_reader(broker, topic, startingOffsets="earliest", maxOffsetsPerTrigger="15")
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    broker.produce(topic, 0, 30)
    first = reader.latestOffset(start, ReadMaxRows(15))
    second = reader.latestOffset(first, ReadMaxRows(15))
    assert (first, second) == ({topic: {"0": 15}}, {topic: {"0": 20}})
    assert reader.latestOffset(second, ReadMaxRows(15)) == second  # done: no new data


def test_fail_on_data_loss_in_streaming_planning_and_reading(broker) -> None:
    topic = new_topic(broker, [50])
    reader = stream_reader(broker, topic, startingOffsets="earliest")
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    with broker.client() as client:
        client.delete_records(topic, 0, 20)
    (part,) = reader.partitions(start, end)
    with pytest.raises(DataLossError, match=rf"Offsets \[0, 20\) of {topic}-0"):
        list(reader.read(part))
    lenient = stream_reader(broker, topic, startingOffsets="earliest", failOnDataLoss="false")
    (part,) = lenient.partitions(start, end)
    assert sum(b.num_rows for b in lenient.read(part)) == 30
    with pytest.raises(DataLossError, match="offset was changed from 50 to 10"):
        reader.partitions({topic: {"0": 50}}, {topic: {"0": 10}})


def test_a_deleted_partition_is_data_loss(broker) -> None:
    topic = new_topic(broker, [5])
    reader = stream_reader(broker, topic, startingOffsets="earliest")
    start = reader.initialOffset()
    with broker.client() as client:
        client.delete_topic(topic)
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {}
    with pytest.raises(DataLossError, match=f"{topic}-0 is gone: it was read up to offset 0"):
        reader.partitions(start, end)
    lenient = stream_reader(broker, topic, startingOffsets="earliest", failOnDataLoss="false")
    assert lenient.partitions(start, end) == []
