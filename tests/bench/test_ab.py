"""bench.ab compares every numeric leaf of two sides' JSON."""

from __future__ import annotations

from bench.ab import compare, numeric_leaves, run_order


def test_numeric_leaves_walk_maps_and_lists_and_skip_bools_and_text() -> None:
    doc = {"a": 1, "b": {"c": 2.5, "ok": True, "name": "x"}, "d": [3, {"e": 4}]}
    assert dict(numeric_leaves(doc)) == {"a": 1.0, "b.c": 2.5, "d[0]": 3.0, "d[1].e": 4.0}


def test_the_order_alternates_so_neither_side_always_runs_second() -> None:
    order = [side for _, side in run_order(4)]
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]


def test_compare_gives_medians_ratios_every_run_and_one_sided_leaves() -> None:
    runs = {
        "a": [{"x": 1.0, "old": 5.0}, {"x": 3.0, "old": 7.0}, {"x": 2.0, "old": 6.0}],
        "b": [{"x": 4.0, "new": 1.0}, {"x": 6.0, "new": 3.0}, {"x": 5.0, "new": 2.0}],
    }
    doc = compare(runs, "m", [], 3)
    assert doc["ratios"] == {
        "x": {
            "a": 2.0,
            "b": 5.0,
            "b_over_a": 2.5,
            "a_runs": [1.0, 3.0, 2.0],
            "b_runs": [4.0, 6.0, 5.0],
        }
    }
    assert doc["only_a"] == {"old": 6.0} and doc["only_b"] == {"new": 2.0}
