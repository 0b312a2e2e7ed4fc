"""Batch reads in a real local Spark session against a real broker process."""

from __future__ import annotations

import itertools
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import pytest

from spark_connector.batch import TidelogBatchReader, build_partitions, plan_ranges
from spark_connector.options import parse_source_options
from spark_connector.reading import DataLossError, ReadStats, read_ranges
from spark_connector.source import TidelogDataSource

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

# The `spark` (session) and `broker` (module) fixtures.
pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration]

_names = (f"t{i}" for i in itertools.count())


def new_topic(
    broker: Broker, partitions: int, counts: list[int] | None = None, **kw: object
) -> tuple[str, dict[int, list[tuple]]]:
    topic = next(_names) + "-" + str(partitions)
    with broker.client() as client:
        client.create_topic(topic, partitions)
    rows = {
        p: broker.produce(topic, p, (counts or [0] * partitions)[p], **kw)
        for p in range(partitions)
    }
    return topic, rows


def read(spark, broker: Broker, **options: str):
    reader = spark.read.format("tidelog").option("bootstrap.servers", broker.bootstrap)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


def offsets_of(df) -> set[tuple[int, int]]:
    return {(r["partition"], r["offset"]) for r in df.select("partition", "offset").collect()}


def test_reads_every_record_of_every_partition_with_the_kafka_schema(spark, broker) -> None:
    topic, produced = new_topic(broker, 3, [250, 40, 0], headers_every=7)
    df = read(spark, broker, subscribe=topic, includeHeaders="true")
    assert df.schema.simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )
    # Columns no record can lack are NOT NULL (Spark skips their per-row null checks).
    assert [f.name for f in df.schema.fields if f.nullable] == ["key", "value", "headers"]
    rows = df.collect()
    assert len(rows) == 290
    got = {(r["partition"], r["offset"]): r for r in rows}
    for partition, records in produced.items():
        for offset, (key, value, headers, ts) in enumerate(records):
            row = got[(partition, offset)]
            assert (row["key"], row["value"], row["topic"]) == (key, value, topic)
            assert row["timestamp"] == datetime.fromtimestamp(ts / 1000, UTC).replace(tzinfo=None)
            assert row["timestampType"] == 0
            if headers:
                assert [(h["key"], h["value"]) for h in row["headers"]] == headers
            else:
                assert row["headers"] is None
    assert "headers" not in read(spark, broker, subscribe=topic).columns
    # limit() closes the task's generator early: the pipelined fetch is drained cleanly.
    assert len(read(spark, broker, subscribe=topic).limit(5).collect()) == 5


def test_registration_and_auto_discovery_are_both_supported(spark, broker) -> None:
    topic, _ = new_topic(broker, 1, [5])
    spark.dataSource.register(TidelogDataSource)
    df = (
        spark.read.format("TideLog")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .load()
    )
    assert df.count() == 5


def test_starting_and_ending_offsets_json_with_sentinels(spark, broker) -> None:
    topic, _ = new_topic(broker, 2, [30, 30])
    df = read(
        spark,
        broker,
        subscribe=topic,
        startingOffsets=f'{{"{topic}":{{"0":5,"1":-2}}}}',
        endingOffsets=f'{{"{topic}":{{"0":12,"1":-1}}}}',
    )
    assert offsets_of(df) == {(0, o) for o in range(5, 12)} | {(1, o) for o in range(30)}


def test_assign_and_subscribe_pattern(spark, broker) -> None:
    topic, _ = new_topic(broker, 3, [4, 5, 6])
    df = read(spark, broker, assign=f'{{"{topic}":[0,2]}}')
    assert {p for p, _ in offsets_of(df)} == {0, 2} and df.count() == 10
    df = read(spark, broker, subscribePattern=topic.replace("-", "[-]"))
    assert df.count() == 15


def test_timestamp_options_and_their_precedence(spark, broker) -> None:
    topic, _ = new_topic(broker, 2, [50, 50], start_ts=10_000)
    df = read(
        spark,
        broker,
        subscribe=topic,
        startingTimestamp="10020",
        endingTimestamp="10030",
        startingOffsets="earliest",
    )
    assert offsets_of(df) == {(p, o) for p in (0, 1) for o in range(20, 30)}
    df = read(
        spark,
        broker,
        subscribe=topic,
        startingOffsetsByTimestamp=f'{{"{topic}":{{"0":10045,"1":10000}}}}',
        endingOffsetsByTimestamp=f'{{"{topic}":{{"0":99999,"1":10002}}}}',
    )
    # No record at or after 99999 in partition 0: the end is latest (Kafka's rule).
    assert offsets_of(df) == {(0, o) for o in range(45, 50)} | {(1, 0), (1, 1)}
    late = read(
        spark,
        broker,
        subscribe=topic,
        startingTimestamp="99999",
        startingOffsetsByTimestampStrategy="latest",
    )
    assert late.count() == 0
    with pytest.raises(Exception, match="No offset matched from request of topic-partition"):
        read(spark, broker, subscribe=topic, startingTimestamp="99999").count()


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"startingoffset": "earliest", "subscribe": "x"}, "did you mean 'startingOffsets'"),
        ({}, "One of the following options must be specified for Kafka source"),
        ({"subscribe": "x", "assign": '{"x":[0]}'}, "Only one of the following options"),
        ({"subscribe": "x", "minPartitions": "0"}, "minPartitions must be positive"),
    ],
)
def test_option_errors_are_raised_at_load(spark, broker, options, message) -> None:
    with pytest.raises(Exception, match=message):
        read(spark, broker, **options)


def test_batch_only_errors_are_raised_when_planning(spark, broker) -> None:
    topic, _ = new_topic(broker, 2, [3, 3])
    with pytest.raises(Exception, match="starting offset can't be latest for batch queries"):
        read(spark, broker, subscribe=topic, startingOffsets="latest").count()
    with pytest.raises(Exception, match="you must specify all TopicPartitions"):
        read(spark, broker, subscribe=topic, startingOffsets=f'{{"{topic}":{{"0":1}}}}').count()
    with pytest.raises(Exception, match="fixed schema"):
        (
            spark.read.format("tidelog")
            .schema("value binary")
            .option("bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic)
            .load()
            .count()
        )


def test_fail_on_data_loss_both_ways_after_records_were_deleted(spark, broker) -> None:
    topic, _ = new_topic(broker, 2, [100, 100])
    with broker.client() as client:
        assert client.delete_records(topic, 0, 60) == 60
    start = f'{{"{topic}":{{"0":10,"1":0}}}}'
    with pytest.raises(
        Exception, match=rf"Offsets \[10, 60\) of {topic}-0 are no longer available"
    ):
        read(spark, broker, subscribe=topic, startingOffsets=start).count()
    df = read(spark, broker, subscribe=topic, startingOffsets=start, failOnDataLoss="false")
    assert offsets_of(df) == {(0, o) for o in range(60, 100)} | {(1, o) for o in range(100)}
    # Default earliest is late-bound: no data loss, the retained rows are read.
    assert read(spark, broker, subscribe=topic).count() == 140


def test_late_binding_tolerates_retention_between_planning_and_reading(broker) -> None:
    topic, _ = new_topic(broker, 1, [100])
    opts = parse_source_options(
        {"bootstrap.servers": broker.bootstrap, "subscribe": topic}, streaming=False
    )
    parts = TidelogBatchReader(opts).partitions()
    with broker.client() as client:
        client.delete_records(topic, 0, 30)
    broker.produce(topic, 0, 10)
    stats = ReadStats()
    rows = sum(b.num_rows for p in parts for b in read_ranges(opts, p.ranges, stats=stats))
    assert rows == 80 and stats.lost_offsets == 0
    # A range resolved at planning (minPartitions splits) reports the loss instead.
    split = parse_source_options(
        {
            "bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "minPartitions": "2",
            "startingOffsets": f'{{"{topic}":{{"0":30}}}}',
        },
        streaming=False,
    )
    with broker.client() as client:
        ranges = plan_ranges(client, split)
        client.delete_records(topic, 0, 50)
    parts = build_partitions(split, ranges)
    with pytest.raises(DataLossError, match=rf"Offsets \[30, 50\) of {topic}-0"):
        for part in parts:
            list(read_ranges(split, part.ranges))


def test_read_tasks_leave_their_workers_with_frozen_long_lived_objects(spark, broker) -> None:
    from tests.spark_connector.worker_probe import WorkerProbe

    # Registered sources share one worker daemon (auto-discovered ones get their own).
    spark.dataSource.register(TidelogDataSource)
    spark.dataSource.register(WorkerProbe)
    topic, _ = new_topic(broker, 4, [50, 50, 50, 50])
    assert read(spark, broker, subscribe=topic).count() == 200
    workers = dict(spark.read.format("worker_probe").load().collect())
    # Spark's daemon gc.collect()s after every task; frozen objects are skipped by it.
    assert workers and max(workers.values()) > 10_000, workers


def test_splitting_and_coalescing_give_the_expected_task_counts(spark, broker) -> None:
    topic, _ = new_topic(broker, 4, [1000, 10, 10, 0])
    base = {"subscribe": topic}
    assert read(spark, broker, **base).rdd.getNumPartitions() == 4  # empty one late-bound
    df = read(spark, broker, **base, minPartitions="10")
    assert df.rdd.getNumPartitions() == 10 and df.count() == 1020
    df = read(spark, broker, **base, maxRecordsPerPartition="300")
    assert df.rdd.getNumPartitions() == 6 and df.count() == 1020
    df = read(spark, broker, **base, maxPartitions="2")
    assert df.rdd.getNumPartitions() == 2 and offsets_of(df) == offsets_of(
        read(spark, broker, **base)
    )


def test_pushdown_reads_fewer_bytes_and_returns_the_same_rows(spark, broker) -> None:
    topic, _ = new_topic(broker, 3, [2000, 2000, 2000], start_ts=1_000_000)
    lo = datetime.fromtimestamp(1_001_500 / 1000, UTC)
    hi = datetime.fromtimestamp(1_001_700 / 1000, UTC)
    queries = [
        lambda df: df.where("partition = 1 AND offset >= 100 AND offset < 300"),
        lambda df: (
            df.where("partition IN (0, 2)").where(df.timestamp >= lo).where(df.timestamp < hi)
        ),
        lambda df: df.where(f"topic = '{topic}' AND offset BETWEEN 1990 AND 1995"),
    ]
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        for query in queries:
            before = broker.bytes_out(topic)
            pushed = sorted(query(read(spark, broker, subscribe=topic)).collect())
            pushed_bytes = broker.bytes_out(topic) - before
            before = broker.bytes_out(topic)
            plain = sorted(query(read(spark, broker, subscribe=topic, pushdown="false")).collect())
            plain_bytes = broker.bytes_out(topic) - before
            assert pushed == plain and pushed
            assert pushed_bytes < plain_bytes / 3, (pushed_bytes, plain_bytes)
        df = read(spark, broker, subscribe=topic).where("offset > 5")
        plan = spark._jvm.PythonSQLUtils.explainString(df._jdf.queryExecution(), "formatted")
        assert "PushedFilters: [GreaterThan(offset,5)]" in plan, plan
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")
    # Without the conf the default reader has no pushFilters, so reads still work.
    assert read(spark, broker, subscribe=topic).where("partition = 1").count() == 2000


def test_fail_on_data_loss_after_time_retention_deleted_segments(spark, broker_with) -> None:
    retaining = broker_with(
        "log.initial.task.delay.ms=0",
        "log.retention.check.interval.ms=100",
        "log.segment.delete.delay.ms=0",
    )
    with retaining.client() as client:
        client.create_topic("old", 1, {"retention.ms": -1, "segment.bytes": 1024})
    retaining.produce("old", 0, 200, batch_records=10)  # 1970 timestamps
    deadline = time.monotonic() + 30
    with retaining.client() as client:
        client.alter_configs("old", {"retention.ms": 60_000})  # now every closed segment expires
        while (low := client.list_offsets("old", 0, "earliest").offset) == 0:
            assert time.monotonic() < deadline, "retention never deleted a segment"
            time.sleep(0.1)
        time.sleep(0.5)  # several more retention passes: nothing else is left to delete
        assert client.list_offsets("old", 0, "earliest").offset == low
    now_ms = int(time.time() * 1000)
    retaining.produce("old", 0, 50, start_ts=now_ms)  # recent records are retained
    start = '{"old":{"0":0}}'
    with pytest.raises(Exception, match=rf"Offsets \[0, {low}\) of old-0 are no longer available"):
        read(spark, retaining, subscribe="old", startingOffsets=start).count()
    lenient = read(spark, retaining, subscribe="old", startingOffsets=start, failOnDataLoss="false")
    assert offsets_of(lenient) == {(0, o) for o in range(low, 250)}
