"""Spark's own Kafka source (`read` and `readStream` of `format("kafka")`) on the real
Kafka and on Tidelog, the same job against both (issue 19 item 6).

Runs in the interop Spark venv, whose pyspark matches the served spark-sql-kafka
version (see interop/spark_env.py); `make interop` creates it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from interop import spark_env
from interop.observed import CREATE_TIME, PARTITIONS, samples_for
from interop.scenarios import CLIENTS
from interop.targets import Target
from tests.interop import expected
from tidelog.client import Client
from tidelog.producer import Producer

# Each Spark run is a cold JVM plus Ivy's resolution (~40 s, minutes on a loaded machine);
# several tests run Spark twice, beyond the suite's 120 s default.
SPARK_TEST_TIMEOUT_S = 900
pytestmark = [pytest.mark.interop, pytest.mark.spark, pytest.mark.timeout(SPARK_TEST_TIMEOUT_S)]

# Spark's endingOffsets: -1 is the partition's latest offset.
SPARK_LATEST = -1


@pytest.fixture(params=["kafka", "tidelog"])
def target(request: pytest.FixtureRequest) -> Target:
    """The same Spark job against Apache Kafka and against Tidelog."""
    return request.getfixturevalue(request.param)


def test_spark_reads_what_a_client_wrote(target: Target, unique: Callable[[str], str]) -> None:
    topic = unique("spark")
    written = CLIENTS["confluent-kafka"].produce_consume(target.bootstrap, topic, "lz4")
    assert written["records"] == expected.records(PARTITIONS)
    assert spark_env.read_topic(target.bootstrap, topic) == written["records"]


def test_spark_reads_what_tidelogs_own_producer_wrote(
    tidelog: Target, unique: Callable[[str], str]
) -> None:
    """Records sent through the msgpack protocol by `tidelog.producer.Producer`, read by
    Spark's Kafka source: every record, then a range of offsets per partition."""
    topic = unique("spark-native")
    samples = samples_for(PARTITIONS)
    with Client(tidelog.bootstrap) as admin:
        admin.create_topic(topic, PARTITIONS)
    with Producer(tidelog.bootstrap, linger_ms=0, compression_type="zstd") as producer:
        futures = [
            producer.send(
                topic,
                s.value,
                key=s.key,
                headers=list(s.headers),
                partition=s.partition,
                timestamp_ms=s.timestamp_ms,
            )
            for s in samples
        ]
        producer.flush()
        placed = [f.get(timeout=30) for f in futures]
    assert [(m.partition, m.offset) for m in placed] == expected.offsets_by_sample(samples)

    everything = spark_env.read_topic(tidelog.bootstrap, topic)
    assert everything == expected.records(PARTITIONS)
    assert {r["timestamp_type"] for r in everything} == {CREATE_TIME}

    ranged = spark_env.read_topic(tidelog.bootstrap, topic, {0: 1, 1: 1}, {0: 3, 1: SPARK_LATEST})
    assert ranged == [
        r
        for r in expected.records(PARTITIONS)
        if (r["partition"] == 0 and 1 <= r["offset"] < 3)
        or (r["partition"] == 1 and r["offset"] >= 1)
    ]


def test_spark_stream_resumes_from_its_checkpoint(
    target: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """Two availableNow runs on one checkpoint: the second adds only the new records."""
    topic = unique("spark-stream")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    client = CLIENTS["confluent-kafka"]
    client.produce_consume(target.bootstrap, topic, "none")
    first = spark_env.stream_topic(target.bootstrap, topic, checkpoint, out)
    no_headers = [{**r, "headers": []} for r in expected.records(PARTITIONS)]
    assert first == no_headers

    client.produce_consume(target.bootstrap, topic, "none")  # the same samples once more
    both = spark_env.stream_topic(target.bootstrap, topic, checkpoint, out)
    again = [
        {**r, "offset": r["offset"] + expected.end_offsets(PARTITIONS)[r["partition"]]}
        for r in no_headers
    ]
    assert both == sorted(no_headers + again, key=lambda r: (r["partition"], r["offset"]))


def test_the_spark_venv_matches_the_package() -> None:
    assert spark_env.spark_python().exists(), "run `make interop` to create the Spark venv"
    version = subprocess.run(
        [str(spark_env.spark_python()), "-c", "import pyspark; print(pyspark.__version__)"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert version == spark_env.spark_kafka_version()
