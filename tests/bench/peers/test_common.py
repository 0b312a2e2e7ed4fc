"""Summaries used by every figure: spread of runs and latency percentiles."""

from __future__ import annotations

import json

import pytest

from bench.peers._common import json_line, latency_summary_ms, percentile, spread


def test_spread_is_median_min_max() -> None:
    s = spread([3.0, 1.0, 10.0])
    assert (s.median, s.min, s.max, s.runs) == (3.0, 1.0, 10.0, 3)
    assert spread([1.0, 2.0]).median == 1.5
    with pytest.raises(ValueError):
        spread([])


def test_percentile_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile(values, 1.0) == 100.0
    assert percentile([7.0], 0.999) == 7.0


def test_latency_summary_in_milliseconds() -> None:
    summary = latency_summary_ms([0.001] * 99 + [0.5])
    assert summary["p50_ms"] == 1.0
    assert summary["max_ms"] == 500.0
    assert summary["p999_ms"] == 500.0
    assert summary["samples"] == 100


def test_json_line_is_one_sorted_line() -> None:
    line = json_line(workload="produce", client="redis/raw", records_per_s=5)
    assert "\n" not in line
    assert list(json.loads(line)) == ["client", "records_per_s", "workload"]
