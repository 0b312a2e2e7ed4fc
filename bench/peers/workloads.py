"""The timed phases every system runs: bulk produce, bulk consume, paced single produce.

Each phase also records where the CPU went, the cheapest profile there is: seconds of
CPU used by the server process (from /proc) and by this client process (`os.times`),
next to the wall time. On a 2-core machine that shows at a glance which side was the
bottleneck, and it is what docs/benchmarks.md points to when a goal is missed.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.peers._common import PeerClient, latency_summary_ms

CLOCK_TICKS_PER_S = os.sysconf("SC_CLK_TCK")


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of `pid` (all its threads) so far; 0 if unreadable."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    # After the command name: state is field 3, utime 14 and stime 15 (1-based).
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_S


def own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


@dataclass(frozen=True, slots=True)
class Phase:
    """One timed phase: records moved, wall seconds, and CPU seconds on each side."""

    records: int
    elapsed_s: float
    server_cpu_s: float
    client_cpu_s: float

    @property
    def records_per_s(self) -> float:
        return self.records / self.elapsed_s if self.elapsed_s > 0 else 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "records": self.records,
            "elapsed_s": round(self.elapsed_s, 4),
            "records_per_s": round(self.records_per_s),
            "server_cpu_s": round(self.server_cpu_s, 3),
            "client_cpu_s": round(self.client_cpu_s, 3),
        }


class _Meter:
    """Wall clock and both CPU clocks, started together."""

    def __init__(self, server_pid: int) -> None:
        self.server_pid = server_pid
        self.server0 = process_cpu_s(server_pid)
        self.client0 = own_cpu_s()
        self.wall0 = time.perf_counter()

    def phase(self, records: int) -> Phase:
        elapsed = time.perf_counter() - self.wall0
        return Phase(
            records,
            elapsed,
            process_cpu_s(self.server_pid) - self.server0,
            own_cpu_s() - self.client0,
        )


def run_produce(
    client: PeerClient, server_pid: int, stream: str, values: list[bytes], total: int, cap_s: float
) -> Phase:
    """Produce up to `total` records, stopping at `cap_s` seconds of wall time."""
    meter = _Meter(server_pid)
    done = client.produce(stream, values, total, meter.wall0 + cap_s)
    return meter.phase(done)


def run_consume(client: PeerClient, server_pid: int, stream: str, total: int) -> Phase:
    """Read back the `total` records just produced; a short read is an error."""
    meter = _Meter(server_pid)
    got = client.consume(stream, total)
    phase = meter.phase(got)
    if got < total:
        raise RuntimeError(f"{client.system}/{client.client} read {got} of {total} records")
    return phase


def run_paced_latency(
    client: PeerClient, stream: str, value: bytes, rate_per_s: float, samples: int, warmup: int
) -> dict[str, Any]:
    """Send one record at a time at `rate_per_s`; latency from each *scheduled* send.

    Measuring from the schedule rather than from the actual send keeps a stall from
    hiding the delay it causes to the sends queued behind it (coordinated omission).
    """
    for _ in range(warmup):
        client.produce_one(stream, value)
    interval_s = 1.0 / rate_per_s
    latencies: list[float] = []
    next_at = time.perf_counter()
    for _ in range(samples):
        now = time.perf_counter()
        if now < next_at:
            time.sleep(next_at - now)
        client.produce_one(stream, value)
        latencies.append(time.perf_counter() - next_at)
        next_at += interval_s
    return latency_summary_ms(latencies)
