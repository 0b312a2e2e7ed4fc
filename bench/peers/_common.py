"""What every peer harness shares: child servers stopped by PID, ports, values, summaries.

The convention for one measurement is one JSON line (`json_line`): the system, the
client, the workload, its parameters and the figure, so a run can be grepped, diffed
and re-plotted without re-running it.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from harness.process import note

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


def json_line(**fields: Any) -> str:
    """One measurement as one compact JSON line (keys sorted, so lines diff well)."""
    return json.dumps(fields, sort_keys=True, separators=(",", ":"))


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
