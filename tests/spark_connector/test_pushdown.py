"""Which filters are claimed, and the exact bounds they become."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql.datasource import (
    EqualTo,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
    Not,
    StringStartsWith,
)

from spark_connector.pushdown import Bounds, push_filters, ts_lower_ms, ts_upper_ms


def test_offset_and_partition_filters_are_claimed_as_exact_bounds() -> None:
    filters = [
        IsNotNull(("offset",)),
        GreaterThanOrEqual(("offset",), 3),
        LessThan(("offset",), 9),
        LessThanOrEqual(("offset",), 6),
        In(("partition",), [0, 1, 2]),
        EqualTo(("partition",), 1),
    ]
    bounds, rejected = push_filters(filters)
    assert rejected == []
    assert bounds == Bounds(partitions=frozenset({1}), offset_lower=3, offset_upper=7)
    assert bounds.allows("t", 1) and not bounds.allows("t", 0)


def test_timestamp_bounds_are_microseconds_and_seek_targets_are_exact() -> None:
    t = datetime(2024, 1, 1, 0, 0, 0, 1500, tzinfo=UTC)  # .0015 s
    bounds, rejected = push_filters(
        [GreaterThan(("timestamp",), t), LessThanOrEqual(("timestamp",), t)]
    )
    assert rejected == []
    micros = int(t.timestamp()) * 1_000_000 + 1500
    assert (bounds.ts_lower_us, bounds.ts_upper_us) == (micros + 1, micros + 1)
    # A record at ms m is at m*1000 µs: the first that can match is ms ...002.
    assert ts_lower_ms(bounds) == micros // 1000 + 1
    assert ts_upper_ms(bounds) == micros // 1000 + 1


def test_unsupported_filters_go_back_to_spark_by_identity() -> None:
    keep = [
        Not(EqualTo(("partition",), 1)),
        StringStartsWith(("topic",), "t"),
        EqualTo(("key",), b"k"),
        GreaterThan(("partition",), 1),
        IsNotNull(("key",)),
    ]
    bounds, rejected = push_filters([*keep, EqualTo(("topic",), "t")])
    assert all(a is b for a, b in zip(rejected, keep, strict=True))
    assert bounds.topics == frozenset({"t"})
