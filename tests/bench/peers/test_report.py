"""The docs' tables are rendered from a compare result, numbers and verdicts included."""

from __future__ import annotations

from bench.peers.report import render
from tests.bench.helpers import compare_result


def test_render_has_every_table_with_the_measured_numbers() -> None:
    text = render(compare_result())
    assert "| produce 100 B | 990k (900k-1,080k) | 330k (300k-360k) |" in text
    assert "Test CPU, 2 cores" in text and "redis-server 7.0.15" in text
    # 900k / 300k = 3.0 within each run: the 2.5x goal is met; 500k / 400k is not 2x.
    assert "| produce 100 B | 3.00x (3.00x-3.00x) |" in text
    assert ">= 2.5x: met" in text
    assert ">= 2.0x: **not met**" in text
    assert "| tidelog/tidelog | 0.50 (0.50-0.50) | 2.00 (2.00-2.00) |" in text
    assert "| consume 100 B | tidelog/tidelog | 2.00 | 1.00 |" in text
