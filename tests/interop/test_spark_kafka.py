"""Spark's own Kafka source (`read` and `readStream` of `format("kafka")`) on the real Kafka.

Runs in the interop Spark venv, whose pyspark matches the served spark-sql-kafka
version (see interop/spark_env.py); `make interop` creates it.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from interop import spark_env
from interop.observed import PARTITIONS
from interop.scenarios import CLIENTS
from interop.targets import Target
from tests.interop import expected

pytestmark = [pytest.mark.interop, pytest.mark.spark]


def test_spark_reads_what_a_client_wrote(kafka: Target, unique: Callable[[str], str]) -> None:
    topic = unique("spark")
    written = CLIENTS["confluent-kafka"].produce_consume(kafka.bootstrap, topic, "lz4")
    assert written["records"] == expected.records(PARTITIONS)
    assert spark_env.read_topic(kafka.bootstrap, topic) == written["records"]


def test_spark_stream_resumes_from_its_checkpoint(
    kafka: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """Two availableNow runs on one checkpoint: the second adds only the new records."""
    topic = unique("spark-stream")
    checkpoint, out = tmp_path / "checkpoint", tmp_path / "out"
    client = CLIENTS["confluent-kafka"]
    client.produce_consume(kafka.bootstrap, topic, "none")
    first = spark_env.stream_topic(kafka.bootstrap, topic, checkpoint, out)
    no_headers = [{**r, "headers": []} for r in expected.records(PARTITIONS)]
    assert first == no_headers

    client.produce_consume(kafka.bootstrap, topic, "none")  # the same samples once more
    both = spark_env.stream_topic(kafka.bootstrap, topic, checkpoint, out)
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
