"""Spark's own Kafka source for the interop suite: which Python runs it, which package.

`spark-sql-kafka-0-10` must be the same version as the Spark runtime. Maven Central
serves it up to the version in `interop/spark/pom.xml` (4.2.0 on 2026-11-25) while the
project's venv may carry a newer pyspark (4.3.0), so the check runs in a separate venv
with the matching pyspark (`make interop` creates `.venv-interop-spark`).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from interop.observed import CREATE_TIME, LOG_APPEND_TIME, observed_record

ROOT = Path(__file__).resolve().parents[1]
POM_PATH = Path(__file__).resolve().parent / "spark" / "pom.xml"
READER = Path(__file__).resolve().parent / "spark_kafka_read.py"
PYTHON_ENV = "TIDELOG_INTEROP_SPARK_PYTHON"
DEFAULT_VENV = ROOT / ".venv-interop-spark"
# A cold Spark start plus the Ivy resolution of the package from the local Maven repo.
READ_TIMEOUT_S = 600.0
# bench.spark_bench's rounds of millions of rows through the Kafka source.
BENCH_TIMEOUT_S = 3600.0
MVN_TIMEOUT_S = 900.0
# Spark's Kafka source: timestampType 0 = CreateTime, 1 = LogAppendTime.
SPARK_LOG_APPEND_TIME = 1


def spark_kafka_version() -> str:
    match = re.search(r"<spark\.version>([^<]+)</spark\.version>", POM_PATH.read_text())
    if match is None:
        raise RuntimeError(f"no <spark.version> in {POM_PATH}")
    return match.group(1).strip()


def spark_python() -> Path:
    """The interpreter with the matching pyspark (`$TIDELOG_INTEROP_SPARK_PYTHON` wins)."""
    return Path(os.environ.get(PYTHON_ENV) or DEFAULT_VENV / "bin" / "python")


def ensure_package_in_local_repo() -> None:
    """Resolve the package with Maven so Spark's Ivy finds it in the local Maven repo."""
    mvn = shutil.which("mvn")
    if mvn is None:
        raise RuntimeError("Maven (`mvn`) is not installed: apt-get install maven")
    subprocess.run(
        [mvn, "-q", "-B", "-f", str(POM_PATH), "dependency:resolve"],
        check=True,
        capture_output=True,
        timeout=MVN_TIMEOUT_S,
    )


def read_topic(
    bootstrap: str,
    topic: str,
    starting: Mapping[int, int] | None = None,
    ending: Mapping[int, int] | None = None,
) -> list[dict[str, Any]]:
    """The records of `topic` as `spark.read.format("kafka")` returns them: from
    `starting` to `ending` (partition -> offset; Spark's -2 earliest, -1 latest), or
    the whole topic."""
    args = ["batch", bootstrap, topic, spark_kafka_version()]
    if starting is not None or ending is not None:
        args += [_offsets_json(topic, starting, "earliest"), _offsets_json(topic, ending, "latest")]
    return _run_reader(args)


def _offsets_json(topic: str, offsets: Mapping[int, int] | None, default: str) -> str:
    """Spark's `startingOffsets` / `endingOffsets` option value."""
    if offsets is None:
        return default
    return json.dumps({topic: {str(p): o for p, o in offsets.items()}})


def stream_topic(bootstrap: str, topic: str, checkpoint: Path, out: Path) -> list[dict[str, Any]]:
    """Run one `readStream.format("kafka")` query (availableNow) on `checkpoint`, appending
    to `out`; every record `out` holds afterwards (headers are not streamed)."""
    args = ["stream", bootstrap, topic, spark_kafka_version(), str(checkpoint), str(out)]
    return _run_reader(args)


def time_kafka_source(
    bootstrap: str, topic: str, parquet: Path, rows: int, warmup: int, repeat: int
) -> dict[str, list[float]]:
    """Wall seconds of whole `spark.read.format("kafka")` reads of `topic` and of reads of
    its Parquet copy, alternately in one Spark session (for bench.spark_bench)."""
    args = ["bench", bootstrap, topic, spark_kafka_version(), str(parquet), str(rows)]
    return json.loads(_run_spark([*args, str(warmup), str(repeat)], BENCH_TIMEOUT_S))


def time_brokers(
    tidelog: str, kafka: str, topic: str, rows: int, warmup: int, repeat: int
) -> dict[str, list[float]]:
    """Wall seconds of whole `spark.read.format("kafka")` reads of the same `topic` on
    Tidelog and on Apache Kafka, alternately in one Spark session (bench.spark_kafka_vs)."""
    args = ["versus", tidelog, topic, spark_kafka_version(), kafka, str(rows)]
    return json.loads(_run_spark([*args, str(warmup), str(repeat)], BENCH_TIMEOUT_S))


def _run_spark(args: list[str], timeout_s: float = READ_TIMEOUT_S) -> str:
    """The reader's stdout."""
    ensure_package_in_local_repo()
    # Spark may leave spark-warehouse/ or derby files in its working directory.
    with tempfile.TemporaryDirectory(prefix="spark-kafka-") as cwd:
        result = subprocess.run(
            [str(spark_python()), str(READER), *args],
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=False,
            cwd=cwd,
        )
    if result.returncode != 0:
        raise RuntimeError(f"Spark's Kafka source failed ({result.returncode}): {result.stderr}")
    return result.stdout


def _run_reader(args: list[str]) -> list[dict[str, Any]]:
    records = []
    for line in _run_spark(args).splitlines():
        row = json.loads(line)
        records.append(
            observed_record(
                row["partition"],
                row["offset"],
                _unb64(row["key"]),
                _unb64(row["value"]),
                [(name, _unb64(value)) for name, value in row["headers"]],
                row["timestamp_ms"],
                LOG_APPEND_TIME if row["timestamp_type"] == SPARK_LOG_APPEND_TIME else CREATE_TIME,
            )
        )
    return sorted(records, key=lambda r: (r["partition"], r["offset"]))


def _unb64(text: str | None) -> bytes | None:
    return None if text is None else base64.b64decode(text)
