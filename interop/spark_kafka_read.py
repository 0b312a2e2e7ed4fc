"""Read a Kafka topic with Spark's own Kafka source and print its rows as JSON lines.

Runs in the interop Spark venv (`spark_env.spark_python()`): only the standard library and
pyspark, so it can run under a pyspark other than the project's. The package comes from
`spark.jars.packages`, whose version must equal the running pyspark's.

    python interop/spark_kafka_read.py batch BOOTSTRAP TOPIC PACKAGE_VERSION [START END]
    python interop/spark_kafka_read.py stream BOOTSTRAP TOPIC PACKAGE_VERSION CHECKPOINT OUT

`batch` prints the records `spark.read` returns between START and END (its
`startingOffsets` / `endingOffsets`: `earliest`, `latest` or Spark's per-partition
JSON; earliest to latest by default). `stream` runs one
`readStream` query with `trigger(availableNow=True)` and a checkpoint, appending JSON
files under OUT, then prints every row OUT holds: run it twice on one checkpoint and the
second run must add only what was produced in between.
"""

from __future__ import annotations

import base64
import json
import sys
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
    spark = (
        SparkSession.builder.master("local[1]")
        .appName("tidelog-interop-kafka-source")
        .config(
            "spark.jars.packages", f"org.apache.spark:spark-sql-kafka-0-10_2.13:{package_version}"
        )
        .config("spark.jars.excludes", ",".join(RUNTIME_PROVIDED))
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.driver.memory", "512m")
        .getOrCreate()
    )
    try:
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


def _b64(data: bytes | bytearray | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
