"""Read a Kafka topic with Spark's own Kafka source and print its rows as JSON lines.

Runs in the interop Spark venv (`spark_env.spark_python()`): only the standard library and
pyspark, so it can run under a pyspark other than the project's. The package comes from
`spark.jars.packages`, whose version must equal the running pyspark's.

    python interop/spark_kafka_read.py batch BOOTSTRAP TOPIC PACKAGE_VERSION [START END]
    python interop/spark_kafka_read.py stream BOOTSTRAP TOPIC PACKAGE_VERSION CHECKPOINT OUT
    python interop/spark_kafka_read.py bench BOOTSTRAP TOPIC PACKAGE_VERSION PARQUET ROWS \
        WARMUP REPEAT

`batch` prints the records `spark.read` returns between START and END (its
`startingOffsets` / `endingOffsets`: `earliest`, `latest` or Spark's per-partition
JSON; earliest to latest by default). `stream` runs one
`readStream` query with `trigger(availableNow=True)` and a checkpoint, appending JSON
files under OUT, then prints every row OUT holds: run it twice on one checkpoint and the
second run must add only what was produced in between. `bench` (for bench.spark_bench)
times whole reads of TOPIC and of the Parquet copy PARQUET into Spark's `noop` sink,
alternately, on `local[2]` as that bench does, and prints their wall seconds as JSON.
"""

from __future__ import annotations

import base64
import json
import sys
import time
from pathlib import Path
from typing import Any

# The package's dependencies that Spark's own runtime already ships (pyspark/jars, same
# versions): Ivy would otherwise look for their jars in the local Maven repository, where
# Maven's dependency mediation left other versions.
RUNTIME_PROVIDED = (
    "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "org.slf4j:slf4j-api",
)
COLUMNS = (
    "partition",
    "offset",
    "base64(key) AS key",
    "base64(value) AS value",
    "CAST(unix_millis(timestamp) AS BIGINT) AS timestamp_ms",
    "timestampType AS timestamp_type",
)


def main(argv: list[str]) -> int:
    mode, bootstrap, topic, package_version, *paths = argv
    import pyspark
    from pyspark.sql import SparkSession

    if pyspark.__version__ != package_version:
        print(
            f"pyspark {pyspark.__version__} cannot load spark-sql-kafka {package_version}: "
            "the versions must match (see interop/spark/pom.xml)",
            file=sys.stderr,
        )
        return 2
    benching = mode in ("bench", "versus")
    spark = (
        SparkSession.builder.master("local[2]" if benching else "local[1]")
        .appName("tidelog-interop-kafka-source")
        .config(
            "spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{package_version}"
        )
        .config("spark.jars.excludes", ",".join(RUNTIME_PROVIDED))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "2g" if benching else "512m")
        .getOrCreate()
    )
    try:
        if mode == "versus":
            other, rows, warmup, repeat = paths
            sources = {"tidelog": bootstrap, "kafka": other}
            print(
                json.dumps(time_brokers(spark, sources, topic, int(rows), int(warmup), int(repeat)))
            )
            return 0
        if benching:
            parquet, rows, warmup, repeat = paths
            print(
                json.dumps(
                    time_reads(
                        spark, bootstrap, topic, parquet, int(rows), int(warmup), int(repeat)
                    )
                )
            )
            return 0
        if mode == "batch":
            starting, ending = paths or ("earliest", "latest")
            rows = read_batch(spark, bootstrap, topic, starting, ending)
        else:
            checkpoint, out = paths
            rows = read_stream(spark, bootstrap, topic, checkpoint, out)
    finally:
        spark.stop()
    for row in rows:
        print(json.dumps(row))
    return 0


def read_batch(
    spark: Any, bootstrap: str, topic: str, starting: str, ending: str
) -> list[dict[str, Any]]:
    rows = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", starting)
        .option("endingOffsets", ending)
        .option("includeHeaders", "true")
        .load()
        .selectExpr(*COLUMNS, "headers")
        .collect()
    )
    return [
        {
            **{k: v for k, v in row.asDict().items() if k != "headers"},
            "headers": [[h.key, _b64(h.value)] for h in row.headers or []],
        }
        for row in rows
    ]


def read_stream(
    spark: Any, bootstrap: str, topic: str, checkpoint: str, out: str
) -> list[dict[str, Any]]:
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr(*COLUMNS)
        .writeStream.format("json")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    rows = []
    for part in sorted(Path(out).glob("part-*.json")):
        rows.extend(json.loads(line) for line in part.read_text().splitlines() if line)
    for row in rows:  # the JSON writer leaves out null columns
        row.setdefault("key", None)
        row.setdefault("value", None)
        row["headers"] = []
    return rows


def time_reads(
    spark: Any, bootstrap: str, topic: str, parquet: str, rows: int, warmup: int, repeat: int
) -> dict[str, list[float]]:
    """Wall seconds of `repeat` reads of the topic and of its Parquet copy, alternately
    (so both see the same load), after `warmup` untimed rounds of each."""
    kafka = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .load()
    )
    counted = kafka.count()
    if counted != rows:
        raise RuntimeError(f"the Kafka source read {counted} rows, not {rows}")
    reads = {
        "kafka_source": lambda: kafka.write.format("noop").mode("overwrite").save(),
        "parquet": lambda: (
            spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()
        ),
    }
    for _ in range(warmup):
        for run in reads.values():
            run()
    walls: dict[str, list[float]] = {name: [] for name in reads}
    for _ in range(repeat):
        for name, run in reads.items():
            started = time.perf_counter()
            run()
            walls[name].append(time.perf_counter() - started)
    return walls


def time_brokers(
    spark: Any, bootstraps: dict[str, str], topic: str, rows: int, warmup: int, repeat: int
) -> dict[str, list[float]]:
    """Wall seconds of `repeat` whole reads of `topic` from each broker in `bootstraps`
    (name -> address), alternately and in alternating order, after `warmup` rounds."""
    frames = {}
    for name, bootstrap in bootstraps.items():
        frame = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        counted = frame.count()
        if counted != rows:
            raise RuntimeError(f"the Kafka source read {counted} rows from {name}, not {rows}")
        frames[name] = frame
    for _ in range(warmup):
        for frame in frames.values():
            frame.write.format("noop").mode("overwrite").save()
    walls: dict[str, list[float]] = {name: [] for name in frames}
    names = list(frames)
    for round_ in range(repeat):
        for name in names if round_ % 2 == 0 else names[::-1]:
            started = time.perf_counter()
            frames[name].write.format("noop").mode("overwrite").save()
            walls[name].append(time.perf_counter() - started)
    return walls


def _b64(data: bytes | bytearray | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
