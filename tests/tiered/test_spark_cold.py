"""Spark reads a tiered topic's cold data straight from the bucket: a real broker process
with tiered storage on (moto in server mode as the store), one local Spark session.

The same query gives the same DataFrame with `remoteReads=false` (every offset through
the broker, which reads its remote tier) and `remoteReads=true` (offsets below the local
log start GET by the tasks from the bucket); with pushdown too. The broker's
`tidelog_bytes_out_total` shows the cold bytes did not pass through it.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from protocol.kafka.messages import PRODUCE
from spark_connector.batch import TidelogBatchReader
from spark_connector.options import parse_source_options
from tests.integration.kafka_helpers import KafkaSocket
from tests.tiered.tiered_broker import (
    TIERED_TOPIC_CONFIG,
    credentials_file,
    tiered_settings,
    wait_tiered,
)

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

if TYPE_CHECKING:
    from tests.spark_connector.spark_support import Broker

# The `spark` session fixture; its module is imported lazily below (pytest rewrites it).
pytest_plugins = ("tests.spark_connector.spark_support",)
pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.tiered]

BUCKET = "spark-cold"
KEY, SECRET = "spark-test-key", "spark-test-secret"
TOPIC, PARTITIONS = "cold", 2
TIDELOG_RECORDS, KAFKA_RECORDS, KAFKA_BATCH = 2500, 500, 50
RECORDS = TIDELOG_RECORDS + KAFKA_RECORDS


def _kafka_batches(broker: Broker, partition: int, first_offset: int, count: int) -> None:
    """Kafka v2 batches through the Kafka protocol: the partition then holds both layouts."""
    with KafkaSocket(broker_address(broker)) as sock:
        for n in range(count):
            builder = DefaultRecordBatchBuilder(
                magic=2, compression_type=0, is_transactional=False,
                producer_id=-1, producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
            )  # fmt: skip
            for i in range(KAFKA_BATCH):
                offset = first_offset + n * KAFKA_BATCH + i
                builder.append(i, timestamp=1000 + offset, key=b"kk%d" % offset,
                               value=b"kafka-%d" % offset, headers=[])  # fmt: skip
            data = [{"name": TOPIC, "partition_data": [
                {"index": partition, "records": bytes(builder.build())}]}]  # fmt: skip
            body = {"transactional_id": None, "acks": -1, "timeout_ms": 5000, "topic_data": data}
            answer = sock.call(PRODUCE, 7, body)["responses"][0]["partition_responses"][0]
            assert answer["error_code"] == 0, answer


def broker_address(broker: Broker) -> tuple[str, int]:
    return ("127.0.0.1", broker.port)


@pytest.fixture(scope="module")
def tiered(moto_server: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """A broker whose `cold` partitions hold their older segments only in the bucket
    (uploaded, local copies deleted by local retention); Tidelog and Kafka batches mixed,
    some records with headers."""
    s3 = boto3.client(
        "s3", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id=KEY, aws_secret_access_key=SECRET,
    )  # fmt: skip
    from tests.spark_connector.spark_support import start_broker

    s3.create_bucket(Bucket=BUCKET)
    base = tmp_path_factory.mktemp("spark-cold")
    creds = credentials_file(base, KEY, SECRET)
    sets = tiered_settings(endpoint=moto_server, bucket=BUCKET, credentials=creds)
    broker = start_broker(base / "data", *sets)
    try:
        with broker.client() as client:
            client.create_topic(TOPIC, PARTITIONS, TIERED_TOPIC_CONFIG)
        for p in range(PARTITIONS):
            broker.produce(TOPIC, p, TIDELOG_RECORDS, headers_every=5, batch_records=50)
            _kafka_batches(broker, p, TIDELOG_RECORDS, KAFKA_RECORDS // KAFKA_BATCH)
        with broker.client() as client:
            # The uploader and local retention leave over half of each partition in the
            # bucket only.
            wait_tiered(client, TOPIC, PARTITIONS, min_remote_fraction=0.5)
        yield broker
    finally:
        broker.stop()


def options(broker: Broker, moto: str, remote: bool, **extra: str) -> dict[str, str]:
    opts = {
        "bootstrap.servers": broker.bootstrap,
        "subscribe": TOPIC,
        "includeHeaders": "true",
        "localReads": "false",
        "remoteReads": "true" if remote else "false",
        "s3.accessKey": KEY,
        "s3.secretKey": SECRET,
        "s3.endpoint": moto,
    }
    opts.update(extra)
    return opts


def rows(spark: Any, opts: dict[str, str], where: str | None = None) -> list[tuple]:
    df = spark.read.format("tidelog").options(**opts).load()
    if where:
        df = df.where(where)
    got = df.collect()
    return sorted(
        (
            r["partition"], r["offset"], r["key"], r["value"], r["timestamp"],
            r["timestampType"], tuple((h["key"], h["value"]) for h in r["headers"] or ()),
        )
        for r in got
    )  # fmt: skip


def test_the_plan_reads_below_the_local_log_start_from_the_bucket(
    tiered: Broker,
    moto_server: str,
) -> None:
    reader = TidelogBatchReader(
        parse_source_options(options(tiered, moto_server, True), streaming=False)
    )
    ranges = [r for part in reader.partitions() for r in part.ranges]  # type: ignore[attr-defined]
    cold = [r for r in ranges if r.cold is not None]
    hot = [r for r in ranges if r.cold is None]
    assert {r.partition for r in cold} == set(range(PARTITIONS))
    for rng in cold:
        assert rng.cold is not None and rng.cold.store.bucket == BUCKET
        assert rng.cold.segments[0].base_offset <= rng.start
        assert all(
            s.log_key.startswith(f"tidelog/{TOPIC}-{rng.partition}/") for s in rng.cold.segments
        )
        # The broker part starts where the bucket part ends.
        assert any(h.partition == rng.partition and h.start == rng.end for h in hot)


@pytest.fixture(scope="module")
def through_broker(spark: Any, tiered: Broker, moto_server: str) -> tuple[list[tuple], float]:
    """Every row read through the broker (`remoteReads=false`), and the bytes it served."""
    before = tiered.bytes_out(TOPIC)
    got = rows(spark, options(tiered, moto_server, False))
    return got, tiered.bytes_out(TOPIC) - before


def test_same_dataframe_through_the_broker_and_from_the_bucket(
    spark: Any, tiered: Broker, moto_server: str, through_broker: tuple[list[tuple], float]
) -> None:
    expected, broker_bytes = through_broker
    before = tiered.bytes_out(TOPIC)
    from_bucket = rows(spark, options(tiered, moto_server, True))
    bucket_bytes = tiered.bytes_out(TOPIC) - before
    assert len(expected) == PARTITIONS * RECORDS
    assert [(p, o) for p, o, *_ in expected] == [
        (p, o) for p in range(PARTITIONS) for o in range(RECORDS)
    ]
    assert from_bucket == expected
    # Over half of every partition was only in the bucket, read there by the tasks.
    assert bucket_bytes < broker_bytes * 0.5, (bucket_bytes, broker_bytes)


_MS = timedelta(milliseconds=1)
_EPOCH = datetime(1970, 1, 1)
# (pushed filter, the same filter over the rows read through the broker)
PUSHED = [
    ("offset >= 100 AND offset < 1234", lambda r: 100 <= r[1] < 1234),
    (
        "partition = 1 AND offset BETWEEN 2000 AND 2999",
        lambda r: r[0] == 1 and 2000 <= r[1] <= 2999,
    ),
    (
        "timestamp >= CAST(1.5 AS TIMESTAMP) AND timestamp < CAST(3.2 AS TIMESTAMP)",
        lambda r: _EPOCH + 1500 * _MS <= r[4] < _EPOCH + 3200 * _MS,
    ),
]


@pytest.mark.parametrize(("where", "keep"), PUSHED, ids=["offsets", "partition", "timestamps"])
def test_pushdown_gives_the_rows_of_a_read_through_the_broker(
    spark: Any,
    tiered: Broker,
    moto_server: str,
    through_broker: tuple[list[tuple], float],
    where: str,
    keep: Any,
) -> None:
    expected = [r for r in through_broker[0] if keep(r)]
    extra = {"pushdown": "true"}
    if where.startswith("timestamp"):
        extra["minPartitions"] = "7"  # split pieces of cold ranges keep their objects
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        from_bucket = rows(spark, options(tiered, moto_server, True, **extra), where)
    finally:
        spark.conf.set("spark.sql.python.filterPushdown.enabled", "false")
    assert expected, where
    assert from_bucket == expected


def test_hadoop_s3a_names_and_the_brokers_endpoint_work_too(
    spark: Any, tiered: Broker, moto_server: str, through_broker: tuple[list[tuple], float]
) -> None:
    opts = options(tiered, moto_server, True)
    for name in ("s3.accessKey", "s3.secretKey", "s3.endpoint"):
        del opts[name]  # the endpoint comes from the broker's answer
    opts["spark.hadoop.fs.s3a.access.key"] = KEY
    opts["fs.s3a.secret.key"] = SECRET
    assert rows(spark, opts, "offset < 500") == [r for r in through_broker[0] if r[1] < 500]


def test_a_broker_without_tiered_storage_reads_as_before(spark: Any, tmp_path: Path) -> None:
    from tests.spark_connector.spark_support import start_broker

    plain = start_broker(tmp_path / "plain", "log.retention.ms=-1")
    try:
        with plain.client() as client:
            client.create_topic("plain", 1)
        plain.produce("plain", 0, 10)
        df = spark.read.format("tidelog").options(
            **{"bootstrap.servers": plain.bootstrap, "subscribe": "plain", "remoteReads": "true"}
        )
        assert df.load().count() == 10  # nothing is cold: all through the broker
    finally:
        plain.stop()
