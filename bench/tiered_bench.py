"""Benchmark: reads from the remote tier against local reads of the same data, and Spark
reading a tiered topic from the bucket against reading it through the broker.

Issue 39's benchmark. Starts moto's S3 server (`python -m moto.server`, a child process
on a free loopback port: the store) and a real broker (`python -m broker.server`) with
tiered storage on, then produces the same records (100-byte values, batches of 1,000,
4 partitions) into two topics: `local` (plain) and `tiered` (`remote.storage.enable`,
1 MiB segments, `local.retention.bytes` 1 MiB), and waits until the tiered topic's
records below its local log start offset are only in the bucket. Then, same run:

- `broker_reads`: a fetch loop (one connection, 8 MiB fetches, each partition in turn)
  over the tiered topic's cold offsets, which the broker serves from the store through
  its chunk cache: `remote_cold` right after a broker restart (the cache is wiped at
  start), `remote_warm` again (chunks cached on disk), and `local` over the same offsets
  of the plain topic (segment files in the page cache);
- `spark`: a `local[2]` session reading the whole tiered topic into the `noop` sink,
  `from_bucket` (`remoteReads=true`: tasks GET the cold segment objects themselves),
  `through_broker_warm_cache` and `through_broker_cold_cache` (`remoteReads=false`, the
  latter right after a broker restart), in turn, `--repeat` rounds after an untimed
  warm-up.

Prints one JSON document on stdout (MB/s and records/s, best and median); progress on
stderr. The store is moto on loopback, a Python server: remote numbers say what the
read paths cost here, not what S3 or MinIO would give.

    .venv/bin/python -m bench.tiered_bench [--quick] [--records N] [--repeat R]
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.run_all import machine
from protocol.batch import encode_batch
from protocol.kafka.stored import iter_any_headers
from protocol.remote_schema import remote_segments
from tidelog.client import Client

ROOT = Path(__file__).resolve().parent.parent
PARTITIONS = 4
VALUE_BYTES = 100
BATCH_RECORDS = 1000
PIPELINE_DEPTH = 16
FETCH_BYTES = 8 * 1024 * 1024
SEGMENT_BYTES = 1024 * 1024
BUCKET, KEY, SECRET = "tidelog-bench", "bench-key", "bench-secret"
START_TIMEOUT_S = 30.0
TIERING_TIMEOUT_S = 600.0
MB = 1_000_000
TOPIC_CONFIG = {"segment.bytes": str(SEGMENT_BYTES), "retention.ms": "-1"}
TIERED_CONFIG = {
    **TOPIC_CONFIG,
    "remote.storage.enable": "true",
    "local.retention.bytes": str(SEGMENT_BYTES),
}


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_moto() -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("moto server did not start")


def start_broker(data_dir: Path, sets: list[str]) -> tuple[subprocess.Popen[bytes], int]:
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
    for item in sets:
        cmd += ["--set", item]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
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
    if not ready.wait(START_TIMEOUT_S):
        proc.kill()
        raise SystemExit("broker did not start")
    return proc, port[0]


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def broker_sets(endpoint: str, credentials: Path) -> list[str]:
    return [
        "log.retention.ms=-1",
        "log.initial.task.delay.ms=0",
        "log.retention.check.interval.ms=500",
        "log.segment.delete.delay.ms=0",
        "remote.log.storage.system.enable=true",
        "remote.log.manager.task.interval.ms=500",
        f"tidelog.remote.storage.endpoint={endpoint}",
        f"tidelog.remote.storage.bucket={BUCKET}",
        f"tidelog.remote.storage.credentials.file={credentials}",
    ]


def load(client: Client, topic: str, records: int, config: dict[str, str]) -> None:
    """`records` 100-byte values over the partitions, pipelined, acks=1."""
    client.create_topic(topic, PARTITIONS, config)
    now_ms = int(time.time() * 1000)
    per_partition = records // PARTITIONS
    for partition in range(PARTITIONS):
        for first in range(0, per_partition, BATCH_RECORDS):
            count = min(BATCH_RECORDS, per_partition - first)
            blob = os.urandom(VALUE_BYTES * count)
            rows = [
                (None, blob[i * VALUE_BYTES : (i + 1) * VALUE_BYTES], None, now_ms)
                for i in range(count)
            ]
            if client.in_flight >= PIPELINE_DEPTH:
                client.receive().result()
            batch = encode_batch(rows)
            client.send(
                "produce",
                {
                    "acks": 1,
                    "timeout_ms": 30_000,
                    "topics": [
                        {"topic": topic, "partitions": [{"partition": partition, "records": batch}]}
                    ],
                },
            )
    while client.in_flight:
        client.receive().result()


def wait_tiered(client: Client, topic: str, fraction: float) -> dict[int, int]:
    """Wait until each partition's local log start passed `fraction` of its records;
    returns the local log start offsets (the cold range is [0, local start))."""
    deadline = time.monotonic() + TIERING_TIMEOUT_S
    while True:
        state = client.call(remote_segments(topic, {p: (0, -1) for p in range(PARTITIONS)}))
        starts = {p: s.local_log_start_offset for p, s in state.items()}
        if all(starts[p] >= s.high_watermark * fraction for p, s in state.items()):
            return starts
        if time.monotonic() > deadline:
            raise SystemExit(f"{topic} did not tier in {TIERING_TIMEOUT_S} s: {starts}")
        time.sleep(0.5)


def fetch_range(client: Client, topic: str, ends: dict[int, int]) -> tuple[int, int]:
    """Fetch offsets [0, end) of every partition; (bytes, records) received."""
    total_bytes = total_records = 0
    for partition, end in ends.items():
        offset = 0
        while offset < end:
            result = client.fetch(topic, partition, offset, max_bytes=FETCH_BYTES)
            records = bytes(result.records)
            total_bytes += len(records)
            before = offset
            for _, header in iter_any_headers(records):
                if header.base_offset >= end:
                    break
                total_records += header.record_count
                offset = header.next_offset
            if offset == before:
                raise SystemExit(f"{topic}-{partition}: no progress at offset {offset}")
    return total_bytes, total_records


def rate(runs: list[tuple[float, int, int]]) -> dict[str, Any]:
    """Best and median MB/s and records/s of (seconds, bytes, records) runs."""
    mbs = [b / s / MB for s, b, _ in runs]
    rps = [r / s for s, _, r in runs]
    return {
        "runs": len(runs),
        "bytes": runs[0][1],
        "records": runs[0][2],
        "seconds": [round(s, 3) for s, _, _ in runs],
        "mb_per_s_best": round(max(mbs), 1),
        "mb_per_s_median": round(statistics.median(mbs), 1),
        "records_per_s_best": round(max(rps)),
        "records_per_s_median": round(statistics.median(rps)),
    }


def timed_fetch(bootstrap: str, topic: str, ends: dict[int, int]) -> tuple[float, int, int]:
    with Client(bootstrap, request_timeout_ms=120_000) as client:
        began = time.perf_counter()
        got_bytes, got_records = fetch_range(client, topic, ends)
        return time.perf_counter() - began, got_bytes, got_records


def spark_reads(
    restart: Callable[[], str], bootstrap: str, endpoint: str, records: int, repeat: int
) -> dict[str, Any]:
    """Spark `noop` reads of the whole tiered topic: from the bucket, through the broker
    with its chunk cache warm, and through the broker right after a restart (cold cache:
    the broker then GETs what the tasks would). `restart` restarts the broker and returns
    its new address (not timed)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("tidelog-tiered-bench")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    address = [bootstrap]

    def read(remote: str) -> None:
        options = {
            "bootstrap.servers": address[0], "subscribe": "tiered", "localReads": "false",
            "s3.endpoint": endpoint, "s3.accessKey": KEY, "s3.secretKey": SECRET,
            "remoteReads": remote,
        }  # fmt: skip
        df = spark.read.format("tidelog").options(**options).load()
        df.write.format("noop").mode("overwrite").save()

    modes = {
        "through_broker_cold_cache": "false",
        "through_broker_warm_cache": "false",
        "from_bucket": "true",
    }
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    try:
        read("true")  # untimed warm-up: the JVM, the Python workers and their boto3 client
        read("false")
        for round_no in range(repeat):
            for mode, remote in modes.items():
                if mode == "through_broker_cold_cache":
                    address[0] = restart()
                began = time.perf_counter()
                read(remote)
                times[mode].append(time.perf_counter() - began)
                log(f"spark round {round_no}: {mode} {times[mode][-1]:.2f} s")
    finally:
        spark.stop()
    out: dict[str, Any] = {}
    for mode, seconds in times.items():
        out[mode] = {
            "seconds": [round(s, 3) for s in seconds],
            "rows_per_s_best": round(records / min(seconds)),
            "rows_per_s_median": round(records / statistics.median(seconds)),
        }
    bucket = statistics.median(times["from_bucket"])
    out["bucket_speedup_vs_cold_broker_median"] = round(
        statistics.median(times["through_broker_cold_cache"]) / bucket, 2
    )
    out["bucket_speedup_vs_warm_broker_median"] = round(
        statistics.median(times["through_broker_warm_cache"]) / bucket, 2
    )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="400,000 records, 2 rounds")
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.repeat = 400_000, 2
    import boto3

    moto, endpoint = start_moto()
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id=KEY,
        aws_secret_access_key=SECRET,
    ).create_bucket(Bucket=BUCKET)
    tmp = Path(tempfile.mkdtemp(prefix="tiered-bench-"))
    creds = tmp / "credentials"
    creds.write_text(f"[default]\naws_access_key_id = {KEY}\naws_secret_access_key = {SECRET}\n")
    sets = broker_sets(endpoint, creds)
    broker, port = start_broker(tmp / "data", sets)
    bootstrap = f"127.0.0.1:{port}"
    result: dict[str, Any] = {
        "benchmark": "tiered_bench",
        "machine": machine(),
        "records": args.records,
        "value_bytes": VALUE_BYTES,
        "partitions": PARTITIONS,
        "segment_bytes": SEGMENT_BYTES,
        "store": "moto server (Python) on loopback",
    }
    try:
        began = time.perf_counter()
        with Client(bootstrap, request_timeout_ms=120_000) as client:
            load(client, "local", args.records, TOPIC_CONFIG)
            load(client, "tiered", args.records, TIERED_CONFIG)
            log(f"loaded 2 x {args.records} records in {time.perf_counter() - began:.1f} s")
            cold_ends = wait_tiered(client, "tiered", 0.8)
        result["tiering_s"] = round(time.perf_counter() - began, 1)
        result["cold_offsets"] = sum(cold_ends.values())
        log(f"tiered: cold offsets {cold_ends}")
        cold_runs, warm_runs, local_runs = [], [], []
        for round_no in range(args.repeat):
            stop(broker)  # a restart wipes the chunk cache: the next read is cold
            broker, port = start_broker(tmp / "data", sets)
            bootstrap = f"127.0.0.1:{port}"
            cold_runs.append(timed_fetch(bootstrap, "tiered", cold_ends))
            warm_runs.append(timed_fetch(bootstrap, "tiered", cold_ends))
            local_runs.append(timed_fetch(bootstrap, "local", cold_ends))
            log(
                f"round {round_no}: cold {cold_runs[-1][0]:.2f} s, warm {warm_runs[-1][0]:.2f} s,"
                f" local {local_runs[-1][0]:.2f} s"
            )
        result["broker_reads"] = {
            "remote_cold": rate(cold_runs),
            "remote_warm": rate(warm_runs),
            "local": rate(local_runs),
        }

        def restart() -> str:
            nonlocal broker
            stop(broker)
            broker, new_port = start_broker(tmp / "data", sets)
            return f"127.0.0.1:{new_port}"

        result["spark"] = spark_reads(restart, bootstrap, endpoint, args.records, args.repeat)
    finally:
        stop(broker)
        stop(moto)
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
