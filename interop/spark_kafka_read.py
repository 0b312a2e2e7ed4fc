"""Read a Kafka topic with Spark's own Kafka source and print its rows as JSON lines.

Runs in the interop Spark venv (`spark_env.spark_python()`): only the standard library and
pyspark, so it can run under a pyspark other than the project's. The package comes from
`spark.jars.packages`, whose version must equal the running pyspark's.

    python interop/spark_kafka_read.py BOOTSTRAP TOPIC PACKAGE_VERSION
"""

from __future__ import annotations

import base64
import json
import sys

# The package's dependencies that Spark's own runtime already ships (pyspark/jars, same
# versions): Ivy would otherwise look for their jars in the local Maven repository, where
# Maven's dependency mediation left other versions.
RUNTIME_PROVIDED = (
    "at.yawk.lz4:lz4-java",
    "org.xerial.snappy:snappy-java",
    "org.slf4j:slf4j-api",
)


def main(argv: list[str]) -> int:
    bootstrap, topic, package_version = argv
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
        rows = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .option("includeHeaders", "true")
            .load()
            .selectExpr(
                "partition",
                "offset",
                "key",
                "value",
                "headers",
                "CAST(unix_millis(timestamp) AS BIGINT) AS timestamp_ms",
                "timestampType",
            )
            .collect()
        )
    finally:
        spark.stop()
    for row in rows:
        print(
            json.dumps(
                {
                    "partition": row.partition,
                    "offset": row.offset,
                    "key": _b64(row.key),
                    "value": _b64(row.value),
                    "headers": [[h.key, _b64(h.value)] for h in row.headers or []],
                    "timestamp_ms": row.timestamp_ms,
                    "timestamp_type": row.timestampType,
                }
            )
        )
    return 0


def _b64(data: bytes | bytearray | None) -> str | None:
    return None if data is None else base64.b64encode(bytes(data)).decode()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
