"""Shared pieces of the Spark integration tests: one local Spark session per test run,
a real `tidelog serve` process per module, and small helpers to produce and to read the
broker's fetch-bytes counter. Imported by tests/integration/test_spark*.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from tidelog.client import Client

ROOT = Path(__file__).resolve().parents[2]
# Seconds the broker may take to log `broker_ready`.
BROKER_START_TIMEOUT_S = 30.0


@dataclass
class Broker:
    """A `tidelog serve` child process on free loopback ports."""

    proc: subprocess.Popen[bytes]
    port: int = 0
    metrics_port: int = 0
    lines: list[str] = field(default_factory=list)
    pump: threading.Thread | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def client(self) -> Client:
        return Client(self.bootstrap)

    def bytes_out(self, topic: str) -> float:
        """`tidelog_bytes_out_total{topic}`: batch bytes the broker served by fetch."""
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        pattern = rf'^tidelog_bytes_out_total\{{[^}}]*topic="{re.escape(topic)}"[^}}]*\}} (\S+)$'
        match = re.search(pattern, text, re.MULTILINE)
        return float(match.group(1)) if match else 0.0

    def produce(self, topic: str, partition: int, count: int, **kw: object) -> list[tuple]:
        """`produce()` over a fresh connection."""
        with self.client() as client:
            return produce(client, topic, partition, count, **kw)  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.pump is not None:
            self.pump.join(timeout=10)


def start_broker(data_dir: Path, *sets: str) -> Broker:
    """Start the real daemon and wait for its `broker_ready` line."""
    cmd = [sys.executable, "-m", "broker.server"]  # the `tidelog serve` entry point
    cmd += [
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
    proc = subprocess.Popen(
        cmd, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    broker = Broker(proc)
    ready = threading.Event()

    def pump() -> None:
        assert proc.stdout is not None
        with proc.stdout:
            for raw in proc.stdout:
                line = raw.decode("utf-8", "replace").rstrip("\n")
                broker.lines.append(line)
                if not ready.is_set() and '"broker_ready"' in line:
                    event = json.loads(line)
                    broker.port = int(event["port"])
                    broker.metrics_port = int(event["metrics_port"])
                    ready.set()

    broker.pump = threading.Thread(target=pump, daemon=True)
    broker.pump.start()
    deadline = time.monotonic() + BROKER_START_TIMEOUT_S
    while not ready.wait(0.05):
        if proc.poll() is not None or time.monotonic() > deadline:
            broker.stop()
            raise AssertionError("broker did not start:\n" + "\n".join(broker.lines))
    return broker


def produce(
    client: Client,
    topic: str,
    partition: int,
    count: int,
    *,
    start_ts: int = 1_000,
    batch_records: int = 100,
    headers_every: int = 0,
    key_prefix: bytes = b"k",
) -> list[tuple]:
    """Append `count` records; returns (key, value, headers, timestamp) as produced."""
    rows = []
    for i in range(count):
        headers = (
            [("h", b"%d" % i), ("n", None)] if headers_every and i % headers_every == 0 else []
        )
        rows.append(
            (
                key_prefix + b"%d" % i,
                b"%s-%d-%d" % (topic.encode(), partition, i),
                headers,
                start_ts + i,
            )
        )
    for i in range(0, count, batch_records):
        client.produce(topic, partition, encode_batch(rows[i : i + batch_records]))
    return rows


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    """A local[2,2] Spark session (UI off, 2 shuffle partitions) for the whole test run.

    Two task attempts, as a cluster retries a failed task (local[2] never retries):
    the exactly-once sink's tests fail a first attempt on purpose.
    """
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    path = os.environ.get("PYTHONPATH", "")
    if str(ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), path) if p)
    from pyspark.sql import SparkSession

    session = (
        SparkSession.builder.master("local[2,2]")
        .appName("tidelog-tests")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One real broker per test module (topics are unique per test)."""
    # Test records carry small (1970) timestamps: time retention would delete them.
    b = start_broker(tmp_path_factory.mktemp("spark-broker"), "log.retention.ms=-1")
    yield b
    b.stop()


@pytest.fixture
def broker_with(tmp_path: Path) -> Iterator[object]:
    """`broker_with(*sets)`: a dedicated broker with extra `--set` options, stopped after."""
    started: list[Broker] = []

    def start(*sets: str) -> Broker:
        b = start_broker(tmp_path / f"broker-{len(started)}", *sets)
        started.append(b)
        return b

    yield start
    for b in started:
        b.stop()
