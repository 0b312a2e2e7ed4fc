"""A small but complete compare result, built by compare's own summary code."""

from __future__ import annotations

from typing import Any

from bench.compare import QUICK, TIDELOG, summarize


def compare_result() -> dict[str, Any]:
    rows = []
    for run in range(3):
        for workload, tidelog, peer in (
            ("produce_100B", 900_000.0, 300_000.0),
            ("consume_100B", 500_000.0, 400_000.0),
        ):
            for client, rate in ((TIDELOG, tidelog), ("redis/raw", peer), ("nats/raw", peer / 3)):
                rows.append(
                    {
                        "run": run,
                        "workload": workload,
                        "client": client,
                        "records": 1_000_000,
                        "records_per_s": rate * (1 + run / 10),
                        "server_cpu_s": 2.0,
                        "client_cpu_s": 1.0,
                    }
                )
    latency = {
        TIDELOG: [{"p50_ms": 0.5, "p99_ms": 2.0, "p999_ms": 4.0, "max_ms": 9.0}] * 3,
    }
    return {
        "machine": {"cpu": "Test CPU", "cores": 2, "platform": "Linux", "python": "3.11"},
        "versions": {"redis-server": "7.0.15"},
        "params": {**vars(QUICK), "clients": [TIDELOG, "redis/raw", "nats/raw"]},
        "load_average": {"start": [1.0, 1.0, 1.0], "end": [2.0, 1.0, 1.0]},
        "elapsed_s": 12.5,
        **summarize(rows, latency),
    }
