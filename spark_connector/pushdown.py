"""Filter pushdown: which Spark filters the source claims, as bounds it enforces exactly.

A claimed filter is dropped from Spark's plan and never re-checked, so only filters that
`read()` enforces exactly are claimed: topic and partition (=, IN) drop whole ranges,
offset bounds cut ranges, timestamp bounds seek with `offset_for_time` and are re-checked
row-wise (CreateTime is not monotonic). Anything else goes back to Spark.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from pyspark.sql.datasource import (
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
# Columns that are never null, so IsNotNull on them is always true.
_NEVER_NULL = frozenset({"topic", "partition", "offset", "timestamp", "timestampType"})
_COMPARISONS = (EqualTo, GreaterThan, GreaterThanOrEqual, LessThan, LessThanOrEqual)


@dataclass(frozen=True, slots=True)
class Bounds:
    """The AND of claimed filters. Offsets and timestamps (µs) are [lower, upper)."""

    topics: frozenset[str] | None = None
    partitions: frozenset[int] | None = None
    offset_lower: int | None = None
    offset_upper: int | None = None
    ts_lower_us: int | None = None
    ts_upper_us: int | None = None

    @property
    def has_timestamp(self) -> bool:
        return self.ts_lower_us is not None or self.ts_upper_us is not None

    def allows(self, topic: str, partition: int) -> bool:
        return (self.topics is None or topic in self.topics) and (
            self.partitions is None or partition in self.partitions
        )


NO_BOUNDS = Bounds()


def _to_us(value: object) -> int | None:
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (aware - _EPOCH) // _ONE_US
    return None


def _tighter(current: int | None, new: int | None, lower: bool) -> int | None:
    """`current` narrowed by `new` (None: no bound on that side)."""
    if new is None:
        return current
    if current is None:
        return new
    return max(current, new) if lower else min(current, new)


def _range_bounds(flt: Filter, value: int) -> tuple[int | None, int | None]:
    """[lower, upper) of one comparison over an integer domain."""
    if isinstance(flt, EqualTo):
        return value, value + 1
    if isinstance(flt, GreaterThan):
        return value + 1, None
    if isinstance(flt, GreaterThanOrEqual):
        return value, None
    if isinstance(flt, LessThan):
        return None, value
    return None, value + 1  # LessThanOrEqual


def _apply_range(bounds: Bounds, column: str, flt: Filter, value: int) -> Bounds:
    lower, upper = _range_bounds(flt, value)
    if column == "offset":
        return replace(
            bounds,
            offset_lower=_tighter(bounds.offset_lower, lower, True),
            offset_upper=_tighter(bounds.offset_upper, upper, False),
        )
    return replace(
        bounds,
        ts_lower_us=_tighter(bounds.ts_lower_us, lower, True),
        ts_upper_us=_tighter(bounds.ts_upper_us, upper, False),
    )


def _apply_set(bounds: Bounds, column: str, values: Iterable[object]) -> Bounds:
    if column == "topic":
        topics = frozenset(v for v in values if type(v) is str)
        return replace(bounds, topics=topics if bounds.topics is None else bounds.topics & topics)
    parts = frozenset(v for v in values if type(v) is int)
    current = bounds.partitions
    return replace(bounds, partitions=parts if current is None else current & parts)


def push_filters(filters: Iterable[Filter]) -> tuple[Bounds, list[Filter]]:
    """Fold the pushable filters into Bounds; return the ones Spark must still evaluate."""
    bounds = NO_BOUNDS
    rejected: list[Filter] = []
    for flt in filters:
        attribute: tuple[str, ...] = getattr(flt, "attribute", ())  # not on the base Filter
        column = attribute[0] if len(attribute) == 1 else None
        if isinstance(flt, IsNotNull) and column in _NEVER_NULL:
            continue
        if column in ("topic", "partition") and isinstance(flt, (EqualTo, In)):
            values = flt.value if isinstance(flt, In) else [flt.value]
            bounds = _apply_set(bounds, column, values)
            continue
        if column == "offset" and isinstance(flt, _COMPARISONS) and type(flt.value) is int:
            bounds = _apply_range(bounds, "offset", flt, flt.value)
            continue
        if column == "timestamp" and isinstance(flt, _COMPARISONS):
            micros = _to_us(flt.value)
            if micros is not None:
                bounds = _apply_range(bounds, "timestamp", flt, micros)
                continue
        rejected.append(flt)
    return bounds, rejected


def ts_lower_ms(bounds: Bounds) -> int | None:
    """The smallest record timestamp (ms) that can satisfy the lower bound: the seek target."""
    if bounds.ts_lower_us is None:
        return None
    return -(-bounds.ts_lower_us // 1000)  # ceil: a record at ms t is at t*1000 µs


def ts_upper_ms(bounds: Bounds) -> int | None:
    """The smallest record timestamp (ms) excluded by the upper bound."""
    if bounds.ts_upper_us is None:
        return None
    return -(-bounds.ts_upper_us // 1000)
