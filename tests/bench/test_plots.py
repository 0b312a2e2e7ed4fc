"""The plots are drawn from a compare result into PNG files (matplotlib: the bench extra)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.plots import find_compare, write_plots
from tests.bench.helpers import compare_result

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_write_plots_draws_every_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="matplotlib comes with the bench extra")
    result = {"benchmark": "compare", **compare_result()}
    paths = write_plots(result, tmp_path, prefix="t")
    assert sorted(p.name for p in paths) == [
        "t-durable.png",
        "t-latency.png",
        "t-ratios.png",
        "t-throughput.png",
    ]
    for path in paths:
        assert path.read_bytes()[:8] == PNG_MAGIC


def test_find_compare_reads_both_file_shapes() -> None:
    result = {"benchmark": "compare", "ratios": {}}
    assert find_compare(result) is result
    nested = {"benchmarks": {"compare": {"result": result, "elapsed_s": 1.0}}}
    assert find_compare(nested) is result
    assert find_compare({"benchmarks": {"compare": {"error": "exit status 1"}}}) is None
