"""compare's summary: medians per client and ratios taken pair by pair within a run."""

from __future__ import annotations

from bench.compare import TIDELOG, summarize


def _row(run: int, client: str, rate: float, workload: str = "produce_100B") -> dict:
    return {
        "run": run,
        "workload": workload,
        "client": client,
        "records": 1000,
        "records_per_s": rate,
        "server_cpu_s": 0.5,
        "client_cpu_s": 0.25,
    }


def test_ratios_are_taken_within_each_run_against_that_runs_best_peer() -> None:
    rows = [
        # run 0: the machine is fast for everyone
        _row(0, TIDELOG, 300.0),
        _row(0, "redis/raw", 100.0),
        _row(0, "redis/redis-py", 50.0),
        _row(0, "nats/raw", 60.0),
        # run 1: everything is twice as slow; the ratio must not move
        _row(1, TIDELOG, 150.0),
        _row(1, "redis/raw", 50.0),
        _row(1, "nats/raw", 30.0),
        # run 2: redis/raw had a bad moment; the best peer of that run is NATS
        _row(2, TIDELOG, 300.0),
        _row(2, "redis/raw", 10.0),
        _row(2, "nats/raw", 75.0),
    ]
    out = summarize(rows, {})
    ratio = out["ratios"]["produce_100B"]
    assert ratio["vs_best_peer"] == {"median": 3.0, "min": 3.0, "max": 4.0, "runs": 3}
    assert ratio["vs_redis"] == {"median": 3.0, "min": 3.0, "max": 30.0, "runs": 3}
    assert ratio["vs_nats"]["median"] == 5.0
    assert out["goals_met"]["produce_100B"] is True
    assert out["goals_met"]["consume_100B"] is None  # not measured
    table = out["throughput_records_per_s"]["produce_100B"]
    assert table[TIDELOG]["median"] == 300 and table[TIDELOG]["min"] == 150
    assert table[TIDELOG]["server_cpu_s_per_million"] == 500.0


def test_a_goal_below_target_is_reported_as_missed() -> None:
    rows = [_row(r, TIDELOG, 100.0, "consume_100B") for r in range(3)]
    rows += [_row(r, "redis/raw", 90.0, "consume_100B") for r in range(3)]
    out = summarize(rows, {})
    assert out["ratios"]["consume_100B"]["vs_best_peer"]["median"] == 1.11
    assert out["goals_met"]["consume_100B"] is False


def test_latency_is_summarized_per_percentile() -> None:
    runs = [
        {"p50_ms": 1.0, "p99_ms": 5.0, "p999_ms": 9.0, "max_ms": 10.0},
        {"p50_ms": 3.0, "p99_ms": 4.0, "p999_ms": 8.0, "max_ms": 12.0},
        {"p50_ms": 2.0, "p99_ms": 6.0, "p999_ms": 7.0, "max_ms": 11.0},
    ]
    out = summarize([], {TIDELOG: runs})
    assert out["latency"][TIDELOG]["p50_ms"] == {"median": 2.0, "min": 1.0, "max": 3.0, "runs": 3}
