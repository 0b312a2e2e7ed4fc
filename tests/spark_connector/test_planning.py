"""Offset-range planning: Kafka's split and rate-limit arithmetic, and our coalescing."""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from spark_connector.planning import OffsetRange, coalesce_ranges, rate_limit, split_ranges


def r(partition: int, start: int, end: int, **kw: bool) -> OffsetRange:
    return OffsetRange("t", partition, start, end, **kw)


def sizes(ranges: list[OffsetRange]) -> list[tuple[int, int]]:
    return [(x.partition, x.size) for x in ranges]


def test_min_partitions_splits_large_ranges_proportionally() -> None:
    # docs/spark.md "How offset ranges are split": {1000, 10, 10, 0} with minPartitions=10 -> 8 x
    # 125, 10, 10.
    ranges = [r(0, 0, 1000), r(1, 0, 10), r(2, 0, 10), r(3, 5, 5)]
    out = split_ranges(ranges, min_partitions=10)
    assert sizes(out) == [(0, 125)] * 8 + [(1, 10), (2, 10)]
    assert [(x.start, x.end) for x in out[:2]] == [(0, 125), (125, 250)]


def test_min_partitions_at_or_below_range_count_keeps_one_range_per_partition() -> None:
    ranges = [r(0, 0, 1000), r(1, 0, 10)]
    assert split_ranges(ranges, min_partitions=2) == ranges


def test_max_records_per_partition() -> None:
    out = split_ranges([r(0, 0, 1000), r(1, 0, 300)], max_records_per_partition=300)
    assert sizes(out) == [(0, 250)] * 4 + [(1, 300)]


def test_last_piece_takes_the_remainder_and_late_flags_stay_at_the_ends() -> None:
    out = split_ranges([r(0, 3, 13, late_start=True, late_end=True)], min_partitions=3)
    assert [(x.start, x.end) for x in out] == [(3, 6), (6, 9), (9, 13)]
    assert [(x.late_start, x.late_end) for x in out] == [
        (True, False),
        (False, False),
        (False, True),
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 5000), min_size=1, max_size=8),
    st.one_of(st.none(), st.integers(1, 40)),
    st.one_of(st.none(), st.integers(1, 3000)),
)
def test_split_covers_exactly_the_non_empty_ranges(
    lengths: list[int], min_partitions: int | None, max_records: int | None
) -> None:
    ranges = [r(i, 100 * i, 100 * i + n) for i, n in enumerate(lengths)]
    out = split_ranges(ranges, min_partitions=min_partitions, max_records_per_partition=max_records)
    for rng in ranges:
        pieces = [x for x in out if x.partition == rng.partition]
        if rng.size == 0:
            assert pieces == []
            continue
        assert pieces[0].start == rng.start and pieces[-1].end == rng.end
        assert all(a.end == b.start for a, b in itertools.pairwise(pieces))
        assert all(p.size > 0 for p in pieces)
        if max_records is not None:
            assert all(p.size <= max_records for p in pieces)


def test_coalesce_packs_small_ranges_into_balanced_tasks() -> None:
    ranges = [r(i, 0, 10) for i in range(10)] + [r(10, 0, 50)]
    groups = coalesce_ranges(ranges, 3)
    assert len(groups) == 3
    assert sorted(sum(x.size for x in g) for g in groups) == [50, 50, 50]
    assert sorted(x.partition for g in groups for x in g) == list(range(11))
    assert coalesce_ranges(ranges, 20) == [(x,) for x in ranges]
    assert coalesce_ranges(ranges, None) == [(x,) for x in ranges]


def test_rate_limit_is_proportional_and_does_not_starve_small_partitions() -> None:
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    until = {("t", 0): 1000, ("t", 1): 10, ("t", 2): 10}
    assert rate_limit(100, start, until) == {("t", 0): 98, ("t", 1): 1, ("t", 2): 1}
    until = {("t", 0): 1000, ("t", 1): 1, ("t", 2): 1}
    assert rate_limit(5, start, until) == {("t", 0): 4, ("t", 1): 1, ("t", 2): 1}
    assert rate_limit(10_000, start, until) == until
