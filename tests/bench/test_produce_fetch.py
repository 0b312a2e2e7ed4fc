"""bench.produce_fetch: a throughput figure rests on at least `min_seconds` of passes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from bench.produce_fetch import Pass, sustained_rate


def _passes(*timed: Pass) -> tuple[list[Pass], Callable[[], Pass]]:
    done: list[Pass] = []
    queue = list(timed)

    def one_pass() -> Pass:
        done.append(queue.pop(0))
        return done[-1]

    return done, one_pass


def test_short_passes_repeat_until_their_timed_seconds_reach_the_minimum() -> None:
    done, one_pass = _passes((1000, 0.3), (1000, 0.5), (2000, 0.4), (9999, 9.0))
    rate = sustained_rate(one_pass, min_seconds=1.0)
    assert done == [(1000, 0.3), (1000, 0.5), (2000, 0.4)]
    assert rate == pytest.approx(
        4000 / 1.2
    )  # all records over all timed seconds, not a mean of rates


def test_one_pass_is_always_measured_and_enough_when_it_is_long() -> None:
    done, one_pass = _passes((500, 2.0), (1, 1.0))
    assert sustained_rate(one_pass, min_seconds=1.0) == 250.0
    assert len(done) == 1
    done, one_pass = _passes((500, 0.1), (1, 1.0))
    assert sustained_rate(one_pass, min_seconds=0.0) == 5000.0
    assert len(done) == 1
