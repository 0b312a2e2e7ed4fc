"""bench.ab compares every numeric leaf of two sides' JSON."""

from __future__ import annotations

from bench.ab import numeric_leaves, run_order


def test_numeric_leaves_walk_maps_and_lists_and_skip_bools_and_text() -> None:
    doc = {"a": 1, "b": {"c": 2.5, "ok": True, "name": "x"}, "d": [3, {"e": 4}]}
    assert dict(numeric_leaves(doc)) == {"a": 1.0, "b.c": 2.5, "d[0]": 3.0, "d[1].e": 4.0}


def test_the_order_alternates_so_neither_side_always_runs_second() -> None:
    order = [side for _, side in run_order(4)]
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
