"""Benchmark: a Spark batch read of Tidelog against a Parquet read of the same rows.

Issue 7's goal: read 5,000,000 records with 100-byte values from 4 partitions on
`local[2]` at >= 2,000,000 rows/s and at >= 0.6 of the rate of `spark.read.parquet`
over the same rows, measured in the same run.

Starts a real broker (`python -m broker.server`) on free loopback ports with a fresh
data directory and produces the records (batches of 1,000, pipelined). Then, once per
`--settings` entry, each in a fresh Spark session and a fresh JVM (Spark's defaults,
then with the Unix-socket channel to the Python workers that docs/spark.md recommends;
Parquet reads use no Python worker), it times each read materialising every column
through Spark's `noop` sink: `--warmup` untimed rounds (Parquet's JVM code keeps
getting faster through the first few), then `--repeat` rounds that time one tidelog
read and one Parquet read each, alternately, so both see the same machine load. Both
reads run in the same session with the same settings (`local[2]`, 2 GiB of driver
memory). Reported: best and median seconds, and the CPU seconds each read cost, split
into the Spark JVM, its Python workers and the broker (on a shared machine, CPU time is
steadier than wall time); then the executor's read code alone, outside Spark
(`direct_read_min`: its CPU and the broker's, best of 3); then Spark's own Kafka source
(`spark.read.format("kafka")`, spark-sql-kafka) reading the same topic from the same
broker through Tidelog's Kafka protocol, timed against the same Parquet files in its own
session (`kafka_source`): that package must match its Spark runtime, so it runs in the
interop venv's pyspark (interop/spark_env.py; `make interop` creates it), with the same
rounds and `local[2]`. Prints one JSON document on stdout; progress goes to stderr.

    .venv/bin/python -m bench.spark_bench [--quick] [--records N] [--repeat R]
        [--warmup W] [--settings spark_defaults,unix_socket] [--ceiling] [--conf K=V]
        [--load msgpack|kafka]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from protocol.batch import encode_batch
from tidelog.client import Client

ROOT = Path(__file__).resolve().parent.parent
GOAL_ROWS_PER_S = 2_000_000
GOAL_PARQUET_RATIO = 0.6
PARTITIONS = 4
VALUE_BYTES = 100
BATCH_RECORDS = 1000
# Produce requests in flight per connection while loading: enough to hide the round trip.
PIPELINE_DEPTH = 16
BROKER_START_TIMEOUT_S = 30.0


# Rows per Arrow batch of the ceiling source: what the connector yields (~2 MiB of records).
CEILING_BATCH_ROWS = 18_000
# Rows of each partition, built once per Python worker and reused (workers are reused).
_ceiling_cache: dict[tuple[int, int], list[Any]] = {}


def ceiling_batches(partition: int, rows: int) -> list[Any]:
    """The rows a tidelog read of one bench partition yields, as ready-made Arrow batches
    (random values: the same shape, not the same bytes)."""
    import numpy as np
    import pyarrow as pa

    from spark_connector.schema import arrow_schema

    key = (partition, rows)
    if key not in _ceiling_cache:
        schema = arrow_schema(False)
        values = pa.py_buffer(os.urandom(rows * VALUE_BYTES))
        ends = np.arange(0, (rows + 1) * VALUE_BYTES, VALUE_BYTES, dtype=np.int32)
        value = pa.Array.from_buffers(pa.binary(), rows, [None, pa.py_buffer(ends), values])
        now_us = int(time.time() * 1_000_000)
        columns = [
            pa.nulls(rows, pa.binary()),
            value,
            pa.repeat(pa.scalar("bench", pa.string()), rows),
            pa.array(np.full(rows, partition, dtype=np.int32)),
            pa.array(np.arange(rows, dtype=np.int64)),
            pa.array(np.full(rows, now_us, dtype=np.int64), pa.timestamp("us", tz="UTC")),
            pa.array(np.zeros(rows, dtype=np.int32)),
        ]
        table = pa.Table.from_arrays(columns, schema=schema).combine_chunks()
        _ceiling_cache[key] = table.to_batches(max_chunksize=CEILING_BATCH_ROWS)
    return _ceiling_cache[key]


def ceiling_source(records: int) -> type:
    """A Python data source yielding ready-made Arrow batches of the tidelog schema: what
    Spark's Python source path costs with no fetching and no conversion at all."""
    from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
    from pyspark.sql.types import StructType

    from spark_connector.schema import spark_schema

    per_partition = records // PARTITIONS

    class CeilingReader(DataSourceReader):
        def partitions(self) -> list[InputPartition]:
            return [InputPartition(p) for p in range(PARTITIONS)]

        def read(self, partition: InputPartition) -> Iterator[Any]:
            from bench.spark_bench import ceiling_batches

            yield from ceiling_batches(partition.value, per_partition)

    class CeilingSource(DataSource):
        @classmethod
        def name(cls) -> str:
            return "arrow_ceiling"

        def schema(self) -> StructType:
            return spark_schema(False)

        def reader(self, schema: StructType) -> DataSourceReader:
            return CeilingReader()

    return CeilingSource


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


def load_kafka(bootstrap: str, topic: str, records: int) -> float:
    """As `load`, through Tidelog's Kafka protocol with confluent-kafka: the topic then
    holds Kafka v2 batches as a Kafka producer wrote them (issue 35's second read)."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    started = time.perf_counter()
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(timeout=60)
    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 20, "queue.buffering.max.messages": 500_000}
    )
    value = os.urandom(VALUE_BYTES)
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, partition=i % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.001)
    if producer.flush(600):
        raise SystemExit("confluent-kafka left records undelivered")
    return time.perf_counter() - started


LOADERS = {"msgpack": load, "kafka": load_kafka}


def _proc_stats() -> dict[int, tuple[int, str, float]]:
    """pid -> (parent pid, command, CPU seconds incl. reaped children) of every process."""
    tick = os.sysconf("SC_CLK_TCK")
    stats = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            text = (entry / "stat").read_text()
        except OSError:
            continue  # exited meanwhile
        command = text[text.index("(") + 1 : text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        # utime, stime, cutime, cstime: a worker that exited is counted in its parent.
        cpu = sum(int(f) for f in fields[11:15]) / tick
        stats[int(entry.name)] = (int(fields[1]), command, cpu)
    return stats


def cpu_by_role(broker_pid: int) -> dict[str, float]:
    """CPU seconds so far of the Spark JVM, of its Python workers, and of the broker.

    The JVM is a child of this process and the workers its descendants, so the whole
    tree below this process is summed (by command name) plus the broker.
    """
    stats = _proc_stats()
    children: dict[int, list[int]] = {}
    for pid, (parent, _, _) in stats.items():
        children.setdefault(parent, []).append(pid)
    totals = {"jvm": 0.0, "python_workers": 0.0, "broker": 0.0}
    stack = [p for p in children.get(os.getpid(), []) if p != broker_pid]
    while stack:
        pid = stack.pop()
        _, command, cpu = stats[pid]
        role = "jvm" if command == "java" else "python_workers"
        totals[role] += cpu
        stack.extend(children.get(pid, []))
    if broker_pid in stats:
        totals["broker"] = stats[broker_pid][2]
    return totals


def timed(run: Callable[[], object], broker_pid: int) -> tuple[float, dict[str, float]]:
    """Wall seconds of one run and the CPU seconds it cost, by role."""
    before = cpu_by_role(broker_pid)
    started = time.perf_counter()
    run()
    wall = time.perf_counter() - started
    after = cpu_by_role(broker_pid)
    return wall, {role: after[role] - before[role] for role in after}


def direct_read(
    bootstrap: str,
    topic: str,
    records: int,
    broker_pid: int,
    options: dict[str, str] | None = None,
) -> dict[str, float]:
    """One read of every partition by the executor's code in this process, no Spark:
    wall seconds and the CPU seconds of this reader and of the broker."""
    from spark_connector.options import parse_source_options
    from spark_connector.planning import OffsetRange
    from spark_connector.reading import read_ranges

    opts = parse_source_options(
        {"bootstrap.servers": bootstrap, "subscribe": topic, **(options or {})}, streaming=False
    )
    per_partition = records // PARTITIONS
    broker_before = cpu_by_role(broker_pid)["broker"]
    cpu_before = time.process_time()
    started = time.perf_counter()
    rows = 0
    for partition in range(PARTITIONS):
        rng = OffsetRange(topic, partition, 0, per_partition, False, False)
        rows += sum(batch.num_rows for batch in read_ranges(opts, (rng,)))
    wall = time.perf_counter() - started
    assert rows == per_partition * PARTITIONS, rows
    return {
        "wall_s": round(wall, 3),
        "reader_cpu_s": round(time.process_time() - cpu_before, 3),
        "broker_cpu_s": round(cpu_by_role(broker_pid)["broker"] - broker_before, 3),
    }


def summary(rows: int, runs: list[tuple[float, dict[str, float]]]) -> dict[str, Any]:
    """Best and median of the timed runs, and the median CPU cost of one read by role."""
    walls = [wall for wall, _ in runs]
    best, median = min(walls), statistics.median(walls)
    cpu = {
        role: round(statistics.median(c[role] for _, c in runs), 2)
        for role in runs[0][1]
        if any(c[role] for _, c in runs)
    }
    return {
        "best_s": round(best, 3),
        "median_s": round(median, 3),
        "rows_per_s": round(rows / best),
        "median_rows_per_s": round(rows / median),
        "runs_s": [round(w, 3) for w in walls],
        "cpu_s_per_read": cpu,
    }


# Spark settings compared in every run: Spark's defaults, and Spark's own switch for the
# channel between the JVM and its Python workers (docs/spark.md, "Performance and tuning").
SETTINGS: dict[str, dict[str, str]] = {
    "spark_defaults": {},
    "unix_socket": {"spark.python.unix.domain.socket.enabled": "true"},
}


def stop_spark(spark: Any) -> None:
    """Stop the session and its JVM, so the next setting starts cold like this one did:
    a JVM kept across sessions carries its JIT state into the next one (in one run,
    Parquet's median rate went from 8.1M to 11.1M rows/s in a second session)."""
    from pyspark import SparkContext

    spark.stop()
    gateway = SparkContext._gateway
    if gateway is not None:
        gateway.shutdown()
        jvm_process = getattr(gateway, "proc", None)
        if jvm_process is not None:
            jvm_process.stdin.close()  # the gateway JVM exits at EOF on its stdin
            jvm_process.wait(timeout=60)
        SparkContext._gateway = None
        SparkContext._jvm = None


def measure(
    name: str,
    spark_conf: dict[str, str],
    bootstrap: str,
    parquet_path: str,
    records: int,
    repeat: int,
    warmup: int,
    source_options: dict[str, str],
    ceiling: bool,
    broker_pid: int,
) -> dict[str, Any]:
    """Time the reads in one fresh Spark session with `spark_conf`; stops the session."""
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master("local[2]")
        .appName("tidelog-spark-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "2g")
    )
    for key, value in spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    jvm_process = getattr(spark.sparkContext._gateway, "proc", None)
    try:
        spark.sparkContext.setLogLevel("ERROR")
        df = (
            spark.read.format("tidelog")
            .option("bootstrap.servers", bootstrap)
            .option("subscribe", "bench")
            .options(**source_options)
            .load()
        )
        if not Path(parquet_path).exists():
            df.write.parquet(parquet_path)
        counted = spark.read.parquet(parquet_path).count()
        assert counted == records, (counted, records)
        reads = {
            "tidelog": lambda: df.write.format("noop").mode("overwrite").save(),
            "parquet": lambda: (
                spark.read.parquet(parquet_path).write.format("noop").mode("overwrite").save()
            ),
        }
        if ceiling:
            spark.dataSource.register(ceiling_source(records))
            ceiling_df = spark.read.format("arrow_ceiling").load()
            reads["arrow_ceiling"] = lambda: (
                ceiling_df.write.format("noop").mode("overwrite").save()
            )
        for _ in range(warmup):
            for run in reads.values():
                run()  # JIT, Python workers, page cache
        runs: dict[str, list[tuple[float, dict[str, float]]]] = {read: [] for read in reads}
        for round_number in range(repeat):
            log(f"{name}, round {round_number + 1}/{repeat}: {', then '.join(reads)} ...")
            for read_name, run in reads.items():
                runs[read_name].append(timed(run, broker_pid))
    finally:
        stop_spark(spark)
    results = {read_name: summary(records, timings) for read_name, timings in runs.items()}
    tidelog, parquet = results["tidelog"], results["parquet"]
    ratio = tidelog["rows_per_s"] / parquet["rows_per_s"]
    median_ratio = tidelog["median_rows_per_s"] / parquet["median_rows_per_s"]
    return {
        "spark_conf": spark_conf,
        "jvm_pid": jvm_process.pid if jvm_process is not None else None,
        **results,
        "parquet_ratio": round(ratio, 3),
        "median_parquet_ratio": round(median_ratio, 3),
        "meets_goal": tidelog["rows_per_s"] >= GOAL_ROWS_PER_S and ratio >= GOAL_PARQUET_RATIO,
    }


def measure_kafka_source(
    bootstrap: str, parquet_path: str, records: int, repeat: int, warmup: int
) -> dict[str, Any]:
    """Spark's Kafka source on the bench topic and Parquet, alternately, in one session of
    the interop venv's Spark; the reason instead when that venv is missing."""
    from interop import spark_env

    if not spark_env.spark_python().exists():
        return {"not_measured": f"no {spark_env.spark_python()}: run `make interop`"}
    walls = spark_env.time_kafka_source(
        bootstrap, "bench", Path(parquet_path), records, warmup, repeat
    )
    results: dict[str, Any] = {
        read: summary(records, [(wall, {}) for wall in runs]) for read, runs in walls.items()
    }
    kafka, parquet = results["kafka_source"], results["parquet"]
    return {
        "pyspark": spark_env.spark_kafka_version(),
        **results,
        "parquet_ratio": round(kafka["rows_per_s"] / parquet["rows_per_s"], 3),
        "median_parquet_ratio": round(kafka["median_rows_per_s"] / parquet["median_rows_per_s"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="1,000,000 records, 3 rounds")
    parser.add_argument("--records", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=None, help="timed rounds (5; quick: 3)")
    parser.add_argument("--warmup", type=int, default=None, help="untimed rounds (3; quick: 1)")
    parser.add_argument("--fetch-max-bytes", type=int, default=None, help="connector option")
    parser.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a tidelog source option for the tidelog read (e.g. localReads=false); repeatable",
    )
    parser.add_argument(
        "--ceiling",
        action="store_true",
        help="also time a Python source that yields ready-made Arrow batches (Spark's floor)",
    )
    parser.add_argument(
        "--settings",
        default=",".join(SETTINGS),
        help=f"which Spark settings to measure, in order (default and choices: "
        f"{','.join(SETTINGS)})",
    )
    parser.add_argument(
        "--load",
        choices=sorted(LOADERS),
        default="msgpack",
        help="produce through Tidelog's own client (msgpack) or confluent-kafka (kafka)",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting added to every session (both reads); repeatable",
    )
    opts = parser.parse_args(argv)
    settings = [name.strip() for name in opts.settings.split(",") if name.strip()]
    unknown = [name for name in settings if name not in SETTINGS]
    if unknown or not settings:
        parser.error(f"--settings: unknown {unknown}; choose from {','.join(SETTINGS)}")
    extra_conf = dict(item.split("=", 1) for item in opts.conf)
    records = opts.records or (1_000_000 if opts.quick else 5_000_000)
    repeat = opts.repeat or (3 if opts.quick else 5)
    warmup = opts.warmup if opts.warmup is not None else (1 if opts.quick else 3)
    extra = {"fetch.max.bytes": str(opts.fetch_max_bytes)} if opts.fetch_max_bytes else {}
    extra.update(item.split("=", 1) for item in opts.option)
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p
    )

    with tempfile.TemporaryDirectory(prefix="spark-bench-") as tmp:
        proc, port = start_broker(Path(tmp) / "data")
        bootstrap = f"127.0.0.1:{port}"
        try:
            log(f"producing {records} records ...")
            load_s = LOADERS[opts.load](bootstrap, "bench", records)
            parquet_path = str(Path(tmp) / "bench.parquet")
            sessions = {
                name: measure(
                    name,
                    {**SETTINGS[name], **extra_conf},
                    bootstrap,
                    parquet_path,
                    records,
                    repeat,
                    warmup,
                    extra,
                    opts.ceiling,
                    proc.pid,
                )
                for name in settings
            }
            log("the executor's read path alone, no Spark ...")
            direct = [direct_read(bootstrap, "bench", records, proc.pid, extra) for _ in range(3)]
            log("Spark's own Kafka source through the Kafka protocol ...")
            kafka_source = measure_kafka_source(bootstrap, parquet_path, records, repeat, warmup)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    print(
        json.dumps(
            {
                "records": records,
                "partitions": PARTITIONS,
                "value_bytes": VALUE_BYTES,
                "master": "local[2]",
                "source_options": extra,
                "loaded_with": opts.load,
                "load_s": round(load_s, 2),
                "warmup_rounds": warmup,
                "timed_rounds": repeat,
                # One fresh Spark session per setting; each times both reads.
                "sessions": sessions,
                # Fetch + conversion to Arrow in this process (no Spark): the share of
                # the Python workers' CPU that is ours, and the broker's.
                "direct_read_min": {k: min(d[k] for d in direct) for k in direct[0]},
                # spark.read.format("kafka") of the same topic, and Parquet, in pyspark
                # of the served spark-sql-kafka version (its own session).
                "kafka_source": kafka_source,
                "load_average_1m": round(os.getloadavg()[0], 2),
                "goal_rows_per_s": GOAL_ROWS_PER_S,
                "goal_parquet_ratio": GOAL_PARQUET_RATIO,
                "meets_goal_with": [name for name, got in sessions.items() if got["meets_goal"]],
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
