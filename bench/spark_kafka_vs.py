"""Benchmark (issue 35): Spark's own Kafka source reading Tidelog and Apache Kafka, one run.

Starts both brokers on loopback (`interop.targets`), loads the same records into a
4-partition topic on each with confluent-kafka (so Tidelog holds Kafka-produced batches,
as a Kafka user's topic does), then times whole `spark.read.format("kafka")` reads
(spark-sql-kafka, `local[2]`, Spark's `noop` sink) of both topics in one Spark session,
alternately and in alternating order, after untimed warm-up rounds. The Kafka source
must match its Spark runtime, so it runs in the interop venv (`make interop` makes it).

Reported: rows/s per broker (best and median) and Tidelog/Kafka of each, plus the
broker processes' CPU seconds over all the reads. One JSON document on stdout.

    .venv/bin/python -m bench.spark_kafka_vs [--records N] [--repeat R] [--warmup W]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from bench.peers.workloads import process_cpu_s
from harness.process import note
from interop import spark_env
from interop.targets import Target, open_target

PARTITIONS = 4
VALUE_BYTES = 100
RECORDS = 2_000_000
TOPIC = "spark-vs"
PRODUCER_QUEUE_MESSAGES = 500_000
LOAD_TIMEOUT_S = 600.0


def load(target: Target, records: int) -> float:
    """`records` values of VALUE_BYTES, round-robin over the partitions; seconds taken."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": target.bootstrap})
    admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(timeout=60)
    producer = Producer(
        {
            "bootstrap.servers": target.bootstrap,
            "acks": "1",
            "linger.ms": 20,
            "queue.buffering.max.messages": PRODUCER_QUEUE_MESSAGES,
        }
    )
    value = os.urandom(VALUE_BYTES)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(TOPIC, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(LOAD_TIMEOUT_S):
        raise RuntimeError(f"{target.name}: records left undelivered")
    return time.perf_counter() - started


def summary(records: int, walls: list[float]) -> dict[str, Any]:
    return {
        "best_s": round(min(walls), 3),
        "median_s": round(statistics.median(walls), 3),
        "rows_per_s": round(records / min(walls)),
        "median_rows_per_s": round(records / statistics.median(walls)),
        "walls_s": [round(w, 3) for w in walls],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=RECORDS)
    parser.add_argument("--repeat", type=int, default=3, help="timed rounds of each broker")
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds of each")
    args = parser.parse_args(argv)
    if not spark_env.spark_python().exists():
        parser.error(f"no {spark_env.spark_python()}: run `make interop` first")
    with ExitStack() as stack:
        targets: dict[str, Target] = {}
        for name in ("tidelog", "kafka"):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"sv-{name}-")))
            note(f"starting {name} ...")
            targets[name] = stack.enter_context(open_target(name, tmp))
        loads = {}
        for name, target in targets.items():
            note(f"loading {args.records} records into {name} ...")
            loads[name] = round(load(target, args.records), 2)
        cpu0 = {name: process_cpu_s(t.pid) for name, t in targets.items()}
        note("timing spark.read.format('kafka') on both ...")
        walls = spark_env.time_brokers(
            targets["tidelog"].bootstrap,
            targets["kafka"].bootstrap,
            TOPIC,
            args.records,
            args.warmup,
            args.repeat,
        )
        cpu = {name: round(process_cpu_s(t.pid) - cpu0[name], 2) for name, t in targets.items()}
    results = {name: summary(args.records, runs) for name, runs in walls.items()}
    ours, theirs = results["tidelog"], results["kafka"]
    print(
        json.dumps(
            {
                "benchmark": "spark_kafka_vs",
                "records": args.records,
                "partitions": PARTITIONS,
                "value_bytes": VALUE_BYTES,
                "master": "local[2]",
                "pyspark": spark_env.spark_kafka_version(),
                "warmup_rounds": args.warmup,
                "timed_rounds": args.repeat,
                "load_s": loads,
                "reads": results,
                "broker_cpu_s_all_reads": cpu,
                "ratio_best": round(ours["rows_per_s"] / theirs["rows_per_s"], 3),
                "ratio_median": round(ours["median_rows_per_s"] / theirs["median_rows_per_s"], 3),
                "load_average_1m": round(os.getloadavg()[0], 2),
            },
            indent=1,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
