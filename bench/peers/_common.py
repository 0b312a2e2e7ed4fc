"""What every peer harness shares: child servers stopped by PID, ports, values, summaries.

The convention for one measurement is one JSON line (`json_line`): the system, the
client, the workload, its parameters and the figure, so a run can be grepped, diffed
and re-plotted without re-running it.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

# A server that does not accept connections after this long has failed to start.
START_TIMEOUT_S = 60.0
# A server that ignores SIGTERM for this long is killed (and the run says so).
STOP_TIMEOUT_S = 30.0
# Distinct random values per workload: enough that no system can dedupe or cache one
# value, few enough that making them costs nothing next to the measurement.
DISTINCT_VALUES = 1000


# Python packages the peers need: import name -> PyPI name (pyproject's `bench` extra).
BENCH_PACKAGES = {
    "nats": "nats-py",
    "redis": "redis",
    "hiredis": "hiredis",
    "matplotlib": "matplotlib",
}
PIP_TIMEOUT_S = 600


def ensure_python_packages() -> None:
    """pip-install the `bench` extra's packages that are missing, so `make bench-quick`
    works on a machine whose venv was installed without that extra."""
    import importlib.util

    missing = [pkg for mod, pkg in BENCH_PACKAGES.items() if importlib.util.find_spec(mod) is None]
    if missing:
        note(f"installing {', '.join(missing)} with pip ...")
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "--quiet", *missing],
            check=True,
            timeout=PIP_TIMEOUT_S,
        )
        importlib.invalidate_caches()


def note(text: str) -> None:
    """Progress for the person watching; stdout is kept for the JSON."""
    print(text, file=sys.stderr, flush=True)


def json_line(**fields: Any) -> str:
    """One measurement as one compact JSON line (keys sorted, so lines diff well)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Block until `port` accepts a connection; fail early if `proc` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {timeout_s} s")


class ServerProcess:
    """A peer server as a child process that this harness alone starts and stops.

    Invariant: `stop()` signals exactly the PID this object started (never a name
    match), waits for it, and only kills it if it ignores SIGTERM.
    """

    def __init__(self, name: str, argv: Sequence[str], port: int, log_path: Path) -> None:
        self.name = name
        self.port = port
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            list(argv), stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            wait_for_port(port, self.proc, START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM the PID, wait, SIGKILL only if it hangs. Idempotent."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                note(f"{self.name} (pid {self.proc.pid}) ignored SIGTERM; killing it")
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's own log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


def make_values(value_bytes: int, count: int = DISTINCT_VALUES) -> list[bytes]:
    """`count` random values of `value_bytes` each, reused round-robin by the workloads."""
    return [os.urandom(value_bytes) for _ in range(count)]


@dataclass(frozen=True, slots=True)
class Spread:
    """Median, min and max of repeated runs of one figure."""

    median: float
    min: float
    max: float
    runs: int

    def to_json(self, digits: int = 3) -> dict[str, float | int]:
        return {
            "median": round(self.median, digits),
            "min": round(self.min, digits),
            "max": round(self.max, digits),
            "runs": self.runs,
        }


def spread(values: Sequence[float]) -> Spread:
    """Summarize repeated runs; the median because one noisy neighbour skews a mean."""
    if not values:
        raise ValueError("spread of no runs")
    return Spread(statistics.median(values), min(values), max(values), len(values))


def percentile(sorted_values: Sequence[float], fraction: float) -> float:
    """The nearest-rank percentile of already sorted values (0 < fraction <= 1)."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    # ceil(p * n), with a hair off so that 0.99 * 100 = 99.000...01 still ranks 99.
    rank = max(1, min(len(sorted_values), math.ceil(fraction * len(sorted_values) - 1e-9)))
    return sorted_values[rank - 1]


def latency_summary_ms(latencies_s: Sequence[float]) -> dict[str, float | int]:
    """p50/p99/p99.9/max in milliseconds of send-to-acknowledgement latencies."""
    ordered = sorted(latencies_s)
    return {
        "p50_ms": round(percentile(ordered, 0.50) * 1000, 3),
        "p99_ms": round(percentile(ordered, 0.99) * 1000, 3),
        "p999_ms": round(percentile(ordered, 0.999) * 1000, 3),
        "max_ms": round(ordered[-1] * 1000, 3),
        "samples": len(ordered),
    }


@dataclass(frozen=True, slots=True)
class Throughput:
    """How many records one timed phase moved and how long it took."""

    records: int
    value_bytes: int
    elapsed_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    @property
    def mib_per_s(self) -> float:
        return self.records_per_s * self.value_bytes / (1 << 20)


class PeerClient(Protocol):
    """One way of driving one system; every workload is written against this."""

    system: str
    client: str

    def setup(self, stream: str, durable: bool) -> None:
        """Create an empty stream/topic for the next workload."""

    def produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        """Write `total` records (values round-robin), stop early at `deadline`
        (time.perf_counter); return how many were acknowledged."""

    def consume(self, stream: str, total: int) -> int:
        """Read `total` records from the start; return how many were read."""

    def produce_one(self, stream: str, value: bytes) -> None:
        """Write one record and wait for its acknowledgement (latency workload)."""

    def teardown(self, stream: str) -> None:
        """Delete the stream so the next workload starts from nothing."""

    def close(self) -> None:
        """Close connections."""
