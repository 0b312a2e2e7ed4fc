"""The exactly-once sink: a failed task attempt and a restarted query store each row once.

Failures are injected by the sink's test-only options (options.TEST_FAIL_*): a task's
attempts numbered below `failAttempts` raise after sending `failAfterBatches` batches,
after those batches were acknowledged. The session runs local[2,2], so Spark retries a
failed task once, as a cluster would.
"""

from __future__ import annotations

import itertools
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from spark_connector.options import TEST_FAIL_AFTER_BATCHES, TEST_FAIL_ATTEMPTS

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

# The `spark` (session) and `broker` (module) fixtures.
pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration]

_names = (f"eos{i}" for i in itertools.count())


def new_topic(broker: Broker, partitions: int) -> str:
    topic = next(_names)
    with broker.client() as client:
        client.create_topic(topic, partitions)
    return topic


def stored_values(spark, broker: Broker, topic: str) -> Counter:
    rows = (
        spark.read.format("tidelog")
        .option("bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .load()
        .select("value")
        .collect()
    )
    return Counter(bytes(r["value"]) for r in rows)


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_batch_write_retried_task_stores_each_row_once(spark, broker, exactly_once) -> None:
    topic = new_topic(broker, 2)
    values = [f"row {i}" for i in range(400)]
    df = spark.createDataFrame([(v, i % 2) for i, v in enumerate(values)], "value string, p int")
    (
        df.repartition(2)
        .selectExpr("value", "p AS partition")
        .write.format("tidelog")
        .mode("append")
        .option("bootstrap.servers", broker.bootstrap)
        .option("topic", topic)
        .option("exactlyOnce", str(exactly_once).lower())
        # One record per batch: ~100 batches per task and partition, so the retry also
        # re-sends batches older than the broker's 64-batch window (they are skipped).
        .option("batch.size", "1")
        .option(TEST_FAIL_AFTER_BATCHES, "150")
        .save()
    )
    stored = stored_values(spark, broker, topic)
    assert set(stored) == {v.encode() for v in values}
    if exactly_once:
        assert all(n == 1 for n in stored.values()), stored.most_common(3)
    else:  # the control: the first attempt's 150 batches per task are stored twice
        assert sum(stored.values()) == len(values) + 2 * 150


def test_streaming_write_failed_attempts_and_restart_mid_batch_store_each_row_once(
    spark, broker, tmp_path: Path
) -> None:
    source, sink = new_topic(broker, 2), new_topic(broker, 2)
    for partition in range(2):
        broker.produce(source, partition, 150)

    def run(**failpoint: str):
        writer = (
            spark.readStream.format("tidelog")
            .option("bootstrap.servers", broker.bootstrap)
            .option("subscribe", source)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "200")
            .load()
            .select("key", "value", "partition")
            .writeStream.format("tidelog")
            .option("bootstrap.servers", broker.bootstrap)
            .option("topic", sink)
            .option("exactlyOnce", "true")
            .option("batch.size", "1")
            .option("checkpointLocation", str(tmp_path / "cp"))
            .trigger(availableNow=True)
        )
        for key, value in failpoint.items():
            writer = writer.option(key, value)
        query = writer.start()
        query.awaitTermination(180)
        assert not query.isActive

    # Both attempts of micro-batch 0's tasks write 80 of their 100 rows and fail: the
    # query stops with batch 0 planned (offset log) but not committed.
    with pytest.raises(Exception, match="injected failure after 80 batches"):
        run(**{TEST_FAIL_AFTER_BATCHES: "80", TEST_FAIL_ATTEMPTS: "2"})
    partial = stored_values(spark, broker, sink)
    # Each task's attempts wrote the same first 80 rows (a second attempt may be cancelled
    # when the other task fails the job); batch 0 holds 200 rows.
    assert 2 * 80 <= sum(partial.values()) < 200
    assert all(n == 1 for n in partial.values())
    # Restarted from the checkpoint, batch 0 runs again with the same query id; its
    # first attempts fail once more after 80 batches, the retries complete it.
    run(**{TEST_FAIL_AFTER_BATCHES: "80"})
    stored = stored_values(spark, broker, sink)
    expected = stored_values(spark, broker, source)
    assert stored == expected
    assert all(n == 1 for n in stored.values())
    assert sum(stored.values()) == 300


def test_a_save_rerun_with_the_same_write_id_appends_nothing(spark, broker) -> None:
    topic = new_topic(broker, 2)
    df = spark.createDataFrame([(f"v{i}",) for i in range(100)], "value string")

    def save(write_id: str) -> None:
        (
            df.write.format("tidelog")
            .mode("append")
            .option("bootstrap.servers", broker.bootstrap)
            .option("topic", topic)
            .option("exactlyOnce", "true")
            .option("writeId", write_id)
            .option("batch.size", "7")
            .save()
        )

    save("nightly-1")
    save("nightly-1")  # the same write again: every batch is a duplicate
    assert sum(stored_values(spark, broker, topic).values()) == 100
    save("nightly-2")  # another write id is another write
    stored = stored_values(spark, broker, topic)
    assert sum(stored.values()) == 200
    assert set(stored.values()) == {2}


def test_duplicates_are_recognised_after_a_kill_9_and_after_a_clean_restart(
    spark, tmp_path: Path
) -> None:
    """kill -9: producer state rebuilt from the log; clean stop: from the snapshot."""
    from tests.spark_connector.spark_support import start_broker  # the plugin, imported

    data = tmp_path / "data"
    broker = start_broker(data, "log.retention.ms=-1")
    df = spark.createDataFrame(
        [(f"v{i}", i % 2) for i in range(100)], "value string, partition int"
    )

    def save(b: Broker) -> None:
        (
            df.write.format("tidelog")
            .mode("append")
            .option("bootstrap.servers", b.bootstrap)
            .option("topic", "t")
            .option("exactlyOnce", "true")
            .option("writeId", "restart")
            .option("batch.size", "1")
            .save()
        )

    try:
        with broker.client() as client:
            client.create_topic("t", 2)
        save(broker)
        broker.proc.kill()  # kill -9: no snapshot of the last segment's producers
        broker.stop()
        broker = start_broker(data, "log.retention.ms=-1")
        save(broker)
        broker.stop()  # clean: writes producer snapshots
        assert list(data.rglob("*.snapshot"))
        broker = start_broker(data, "log.retention.ms=-1")
        save(broker)
        stored = stored_values(spark, broker, "t")
    finally:
        broker.stop()
    assert sum(stored.values()) == 100
    assert set(stored.values()) == {1}
