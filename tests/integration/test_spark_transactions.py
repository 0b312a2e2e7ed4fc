"""The Spark Data Source and transactions (issue 36): a real local Spark session
against a real broker process whose partition holds committed, aborted and open
transactions (written through the storage seam into the data directory before the
broker starts: the coordinator is not needed to lay them down). By default a job
reads committed data only, up to the last stable offset; `isolationLevel=
read_uncommitted` reads every data record; markers are never rows; local reads and
reads over TCP agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.config import LogConfig
from storage.manager import LogManager
from tests.integration.test_kafka_txn_log import TS, txn_batch

pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(300)]


def lay_down(data_dir: Path) -> None:
    from protocol.batch import KAFKA_LAYOUT

    manager = LogManager(data_dir, LogConfig())
    manager.open()
    try:
        manager.create_topic("tx", 1)
        plog = manager.get_log("tx", 0)

        def put(values: list[bytes], producer: tuple[int, int, int], txn: bool = True) -> None:
            plog.append(txn_batch(values, producer, txn=txn), layout=KAFKA_LAYOUT)

        put([b"c0"], (-1, -1, -1), txn=False)  # 0
        put([b"a1", b"a2"], (1000, 0, 0))  # 1-2, aborted below
        put([b"t1"], (2000, 0, 0))  # 3, committed below
        put([b"c1"], (-1, -1, -1), txn=False)  # 4
        plog.append_txn_marker(1000, 0, commit=False, coordinator_epoch=0, append_time_ms=TS)
        plog.append_txn_marker(2000, 0, commit=True, coordinator_epoch=0, append_time_ms=TS)
        put([b"c2"], (-1, -1, -1), txn=False)  # 7
        put([b"open"], (3000, 0, 0))  # 8: open, the LSO
        put([b"c3"], (-1, -1, -1), txn=False)  # 9
        assert (plog.last_stable_offset, plog.high_watermark) == (8, 10)
    finally:
        manager.close()


def values_of(spark, bootstrap: str, **options: str) -> list[bytes]:
    reader = spark.read.format("tidelog").option("bootstrap.servers", bootstrap)
    for key, value in {"subscribe": "tx", **options}.items():
        reader = reader.option(key, value)
    return [bytes(r["value"]) for r in reader.load().orderBy("offset").collect()]


@pytest.mark.parametrize("local_reads", ["true", "false"])
def test_a_spark_job_never_sees_an_aborted_record(spark, tmp_path: Path, local_reads: str):
    from tests.spark_connector.spark_support import start_broker

    lay_down(tmp_path / "data")
    broker = start_broker(tmp_path / "data", "log.retention.ms=-1")
    try:
        committed = values_of(spark, broker.bootstrap, localReads=local_reads)
        assert committed == [b"c0", b"t1", b"c1", b"c2"]  # up to the LSO, aborted left out
        everything = values_of(
            spark, broker.bootstrap, localReads=local_reads, isolationLevel="read_uncommitted"
        )
        assert everything == [b"c0", b"a1", b"a2", b"t1", b"c1", b"c2", b"open", b"c3"]
    finally:
        broker.stop()
