"""Benchmark: a Spark batch read of Tidelog against a Parquet read of the same rows.

Issue 7's goal: read 5,000,000 records with 100-byte values from 4 partitions on
`local[2]` at >= 2,000,000 rows/s and at >= 0.6 of the rate of `spark.read.parquet`
over the same rows, measured in the same run.

Starts a real broker (`python -m broker.server`) on free loopback ports with a fresh
data directory, produces the records (batches of 1,000, pipelined), then times each
read materialising every column through Spark's `noop` sink (best of `--repeat` runs
after one warm-up). Prints one JSON document on stdout; progress goes to stderr.

    .venv/bin/python -m bench.spark_bench [--quick] [--records N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from protocol.batch import encode_batch
from protocol.client import Client

ROOT = Path(__file__).resolve().parent.parent
GOAL_ROWS_PER_S = 2_000_000
GOAL_PARQUET_RATIO = 0.6
PARTITIONS = 4
VALUE_BYTES = 100
BATCH_RECORDS = 1000
# Produce requests in flight per connection while loading: enough to hide the round trip.
PIPELINE_DEPTH = 16
BROKER_START_TIMEOUT_S = 30.0


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def start_broker(data_dir: Path) -> tuple[subprocess.Popen[bytes], int]:
    """The real daemon on a free port; returns the process and its port."""
    cmd = [
        sys.executable,
        "-m",
        "broker.server",
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    assert proc.stdout is not None
    port: list[int] = []
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for line in proc.stdout:
                if not ready.is_set() and b'"broker_ready"' in line:
                    port.append(int(json.loads(line)["port"]))
                    ready.set()

    threading.Thread(target=pump, daemon=True).start()
    if not ready.wait(BROKER_START_TIMEOUT_S):
        proc.kill()
        raise SystemExit("broker did not start")
    return proc, port[0]


def load(bootstrap: str, topic: str, records: int) -> float:
    """Produce `records` 100-byte values spread evenly over the partitions; returns seconds."""
    started = time.perf_counter()
    now_ms = int(time.time() * 1000)
    with Client(bootstrap) as client:
        client.create_topic(topic, PARTITIONS)
        per_partition = records // PARTITIONS
        for partition in range(PARTITIONS):
            for first in range(0, per_partition, BATCH_RECORDS):
                count = min(BATCH_RECORDS, per_partition - first)
                blob = os.urandom(VALUE_BYTES * count)
                batch = encode_batch(
                    [
                        (None, blob[i * VALUE_BYTES : (i + 1) * VALUE_BYTES], None, now_ms)
                        for i in range(count)
                    ]
                )
                if client.in_flight >= PIPELINE_DEPTH:
                    client.receive().result()
                client.send(
                    "produce",
                    {
                        "acks": 1,
                        "timeout_ms": 30_000,
                        "topics": [
                            {
                                "topic": topic,
                                "partitions": [{"partition": partition, "records": batch}],
                            }
                        ],
                    },
                )
        while client.in_flight:
            client.receive().result()
    return time.perf_counter() - started


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux /proc), to show the broker's share."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def best_rate(run: object, rows: int, repeat: int) -> dict[str, Any]:
    """Warm up once, then the best of `repeat` timed runs."""
    run()  # type: ignore[operator]
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()  # type: ignore[operator]
        times.append(time.perf_counter() - started)
    best = min(times)
    return {
        "best_s": round(best, 3),
        "rows_per_s": round(rows / best),
        "runs_s": [round(t, 3) for t in times],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 records, 2 runs")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument("--fetch-max-bytes", type=int, default=None, help="connector option")
    opts = parser.parse_args(argv)
    records = opts.records or (1_000_000 if opts.quick else 5_000_000)
    repeat = opts.repeat or (2 if opts.quick else 3)
    extra = {"fetch.max.bytes": str(opts.fetch_max_bytes)} if opts.fetch_max_bytes else {}
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )
    from pyspark.sql import SparkSession

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        proc, port = start_broker(Path(tmp) / "data")
        bootstrap = f"127.0.0.1:{port}"
        try:
            log(f"producing {records} records ...")
            load_s = load(bootstrap, "bench", records)
            spark = (
                SparkSession.builder.master("local[2]")
                .appName("tidelog-spark-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.sql.shuffle.partitions", "2")
                .config("spark.driver.memory", "2g")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            df = (
                spark.read.format("tidelog")
                .option("bootstrap.servers", bootstrap)
                .option("subscribe", "bench")
                .options(**extra)
                .load()
            )
            parquet_path = str(Path(tmp) / "bench.parquet")
            df.write.parquet(parquet_path)
            counted = spark.read.parquet(parquet_path).count()
            assert counted == records, (counted, records)
            log("timing the tidelog read ...")
            broker_cpu_before = cpu_seconds(proc.pid)
            tidelog = best_rate(
                lambda: df.write.format("noop").mode("overwrite").save(), records, repeat
            )
            tidelog["broker_cpu_s_per_read"] = round(
                (cpu_seconds(proc.pid) - broker_cpu_before) / (repeat + 1), 3
            )
            log("timing the parquet read ...")
            parquet = best_rate(
                lambda: (
                    spark.read.parquet(parquet_path).write.format("noop").mode("overwrite").save()
                ),
                records,
                repeat,
            )
            spark.stop()
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    ratio = tidelog["rows_per_s"] / parquet["rows_per_s"]
    print(
        json.dumps(
            {
                "records": records,
                "partitions": PARTITIONS,
                "value_bytes": VALUE_BYTES,
                "master": "local[2]",
                "load_s": round(load_s, 2),
                "tidelog": tidelog,
                "parquet": parquet,
                "parquet_ratio": round(ratio, 3),
                "goal_rows_per_s": GOAL_ROWS_PER_S,
                "goal_parquet_ratio": GOAL_PARQUET_RATIO,
                "meets_goal": tidelog["rows_per_s"] >= GOAL_ROWS_PER_S
                and ratio >= GOAL_PARQUET_RATIO,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
