"""Kafka's retention boundaries, one predicate at a time, then the passes together."""

from __future__ import annotations

import pytest

from retention.rules import (
    DeleteReason,
    DeletionPlan,
    high_watermark_allows,
    log_start_breached,
    plan_deletion,
    segment_timestamp_ms,
    size_breached,
    size_excess_bytes,
    time_breached,
)
from tests.retention.segments import HOUR_MS, NOW_MS, Seg, log_of, settings

# -- single predicates at their boundaries --------------------------------------------


@pytest.mark.parametrize(
    ("age_ms", "retention_ms", "expected"),
    [
        (HOUR_MS - 1, HOUR_MS, False),
        (HOUR_MS, HOUR_MS, False),  # strictly older than retention.ms
        (HOUR_MS + 1, HOUR_MS, True),
        (10**12, -1, False),  # -1 = unlimited
        (1, 0, True),
        (0, 0, False),
        (-5, 0, False),  # a timestamp in the future
    ],
    ids=["one-below", "equal", "one-above", "unlimited", "zero-ret-1ms", "zero-ret-0ms", "future"],
)
def test_time_breached_is_strict(age_ms: int, retention_ms: int, expected: bool) -> None:
    assert time_breached(NOW_MS - age_ms, NOW_MS, retention_ms) is expected


@pytest.mark.parametrize(
    ("next_base", "log_start", "expected"),
    [(99, 100, True), (100, 100, True), (101, 100, False), (None, 10**9, False)],
    ids=["next-below", "next-equal", "next-above", "last-segment"],
)
def test_log_start_breached_needs_next_base_at_or_below_log_start(
    next_base: int | None, log_start: int, expected: bool
) -> None:
    assert log_start_breached(next_base, log_start) is expected


@pytest.mark.parametrize(
    ("total", "retention", "expected"),
    [(999, 1000, None), (1000, 1000, 0), (1001, 1000, 1), (10**9, -1, None), (0, 0, 0)],
    ids=["one-below", "equal", "one-above", "unlimited", "zero-zero"],
)
def test_size_excess(total: int, retention: int, expected: int | None) -> None:
    assert size_excess_bytes(total, retention) == expected


@pytest.mark.parametrize(
    ("excess", "segment", "expected"),
    [(99, 100, False), (100, 100, True), (101, 100, True), (0, 0, True)],
    ids=["one-below", "equal", "one-above", "empty-segment"],
)
def test_size_breached_keeps_the_log_at_or_above_the_limit(
    excess: int, segment: int, expected: bool
) -> None:
    assert size_breached(excess, segment) is expected


@pytest.mark.parametrize(
    ("upper", "hw", "expected"),
    [(10, 9, False), (10, 10, True), (10, 11, True)],
    ids=["one-below", "equal", "one-above"],
)
def test_high_watermark_guard(upper: int, hw: int, expected: bool) -> None:
    assert high_watermark_allows(upper, hw) is expected


@pytest.mark.parametrize(
    ("largest", "mtime", "expected"),
    [(-1, 555, 555), (0, 555, 0), (123, 555, 123)],
    ids=["no-timestamp-uses-mtime", "zero-is-a-timestamp", "timestamp"],
)
def test_segment_timestamp_falls_back_to_mtime(largest: int, mtime: int, expected: int) -> None:
    seg = Seg(0, 1, 10, largest, mtime, is_active=False)
    assert segment_timestamp_ms(seg) == expected


# -- time pass -----------------------------------------------------------------------


def test_time_pass_deletes_only_expired_segments_in_order() -> None:
    old = NOW_MS - 3 * HOUR_MS
    log = log_of((10, 100, old), (10, 100, old), (10, 100, NOW_MS), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_ms=HOUR_MS), 0, 40, NOW_MS)
    assert plan == DeletionPlan(0, 0, 2, roll_first=False)
    assert plan.steps() == [(DeleteReason.TIME, 2)]


@pytest.mark.parametrize(
    ("age_ms", "deleted"),
    [(HOUR_MS - 1, 0), (HOUR_MS, 0), (HOUR_MS + 1, 1)],
    ids=["one-below", "equal", "one-above"],
)
def test_time_pass_boundary(age_ms: int, deleted: int) -> None:
    log = log_of((10, 100, NOW_MS - age_ms), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_ms=HOUR_MS), 0, 20, NOW_MS)
    assert plan.time_count == deleted


def test_time_pass_stops_at_the_first_segment_that_may_not_go() -> None:
    old = NOW_MS - 3 * HOUR_MS
    log = log_of((10, 100, old), (10, 100, NOW_MS), (10, 100, old), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_ms=HOUR_MS), 0, 40, NOW_MS)
    assert plan.time_count == 1


def test_a_future_timestamp_blocks_every_later_segment() -> None:
    old = NOW_MS - 3 * HOUR_MS
    log = log_of((10, 100, NOW_MS + HOUR_MS), (10, 100, old), (10, 100, NOW_MS))
    assert plan_deletion(log, settings(retention_ms=HOUR_MS), 0, 30, NOW_MS).total == 0


def test_segments_without_timestamps_use_the_file_mtime() -> None:
    log = [
        Seg(0, 10, 100, -1, NOW_MS - 2 * HOUR_MS, is_active=False),
        Seg(10, 20, 100, -1, NOW_MS, is_active=True),
    ]
    plan = plan_deletion(log, settings(retention_ms=HOUR_MS), 0, 20, NOW_MS)
    assert plan.time_count == 1


def test_unlimited_time_retention_deletes_nothing() -> None:
    log = log_of((10, 100, 0), (10, 100, 0))
    assert plan_deletion(log, settings(retention_ms=-1), 0, 20, NOW_MS).total == 0


# -- size pass -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("retention_bytes", "deleted"),
    [(301, 0), (300, 0), (299, 0), (200, 1), (199, 1), (101, 1), (100, 2), (99, 2), (0, 3)],
)
def test_size_pass_arithmetic(retention_bytes: int, deleted: int) -> None:
    # Three segments of 100 bytes; the active one goes only when every segment may.
    log = log_of((10, 100, NOW_MS), (10, 100, NOW_MS), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_bytes=retention_bytes), 0, 30, NOW_MS)
    assert plan.size_count == deleted


def test_size_pass_can_delete_everything_then_roll() -> None:
    log = log_of((10, 100, NOW_MS), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_bytes=0), 0, 20, NOW_MS)
    assert plan == DeletionPlan(0, 2, 0, roll_first=True)


def test_size_pass_stops_at_a_segment_too_big_to_remove() -> None:
    # total 400, limit 250: excess 150; 50 goes (100 left), 200 may not, so 50 after it stays.
    log = log_of((10, 50, NOW_MS), (10, 200, NOW_MS), (10, 50, NOW_MS), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_bytes=250), 0, 40, NOW_MS)
    assert plan.size_count == 1


def test_size_pass_at_exactly_the_limit_still_drops_an_empty_middle_segment() -> None:
    # Kafka's arithmetic: diff = 0 and 0 - 0 >= 0, so a zero-byte old segment goes
    # (e.g. one the cleaner emptied; its offsets are still above the log start).
    log = log_of((5, 0, -1), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(retention_bytes=100), 0, 15, NOW_MS)
    assert plan.size_count == 1


# -- log start pass ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("log_start", "deleted"),
    [(9, 0), (10, 1), (11, 1), (19, 1), (20, 2), (30, 2)],
)
def test_log_start_pass_boundaries(log_start: int, deleted: int) -> None:
    log = log_of((10, 100, NOW_MS), (10, 100, NOW_MS), (10, 100, NOW_MS))
    plan = plan_deletion(log, settings(), log_start, 30, NOW_MS)
    assert plan.start_offset_count == deleted
    assert not plan.roll_first  # the last segment never goes by log start


# -- guards --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("hw", "deleted"),
    [(0, 0), (9, 0), (10, 1), (19, 1), (20, 2), (29, 2), (30, 3)],
)
def test_high_watermark_guard_limits_every_pass(hw: int, deleted: int) -> None:
    log = log_of((10, 100, 0), (10, 100, 0), (10, 100, 0))
    plan = plan_deletion(log, settings(retention_ms=HOUR_MS), 0, hw, NOW_MS)
    assert plan.total == deleted
    assert plan.roll_first is (deleted == 3)


def test_an_empty_last_segment_is_never_deleted() -> None:
    log = log_of((10, 100, 0), (10, 100, 0), (0, 0, -1))
    # Its mtime fallback is NOW_MS: force it "old" to prove the size-0 rule alone keeps it.
    log[-1] = Seg(20, 20, 0, -1, 0, is_active=True)
    plan = plan_deletion(log, settings(retention_ms=HOUR_MS, retention_bytes=0), 0, 20, NOW_MS)
    assert plan.total == 2
    assert not plan.roll_first


def test_a_log_of_one_empty_segment_deletes_nothing() -> None:
    log = [Seg(50, 50, 0, -1, 0, is_active=True)]
    plan = plan_deletion(log, settings(retention_ms=0, retention_bytes=0), 100, 50, NOW_MS)
    assert plan.total == 0


def test_no_segments_means_nothing_to_do() -> None:
    assert plan_deletion([], settings(retention_ms=0), 0, 0, NOW_MS).total == 0


# -- passes together -----------------------------------------------------------------


def test_passes_apply_in_order_log_start_then_size_then_time() -> None:
    old = NOW_MS - 3 * HOUR_MS
    log = log_of(
        (10, 100, NOW_MS),  # below log start
        (10, 100, NOW_MS),  # size: 400 left, limit 250 -> this one goes (300 left)
        (10, 100, old),  # size would leave 200 < 250, but time takes it
        (10, 100, NOW_MS),
        (10, 100, NOW_MS),
    )
    plan = plan_deletion(log, settings(HOUR_MS, 250), 10, 50, NOW_MS)
    assert plan == DeletionPlan(1, 1, 1, roll_first=False)
    assert plan.steps() == [
        (DeleteReason.START_OFFSET, 1),
        (DeleteReason.SIZE, 1),
        (DeleteReason.TIME, 1),
    ]


def test_compact_policy_applies_only_the_log_start_rule() -> None:
    log = log_of((10, 100, 0), (10, 100, 0), (10, 100, 0))
    plan = plan_deletion(log, settings(0, 0, policy="compact"), 10, 30, NOW_MS)
    assert plan == DeletionPlan(1, 0, 0, roll_first=False)


def test_compact_delete_policy_applies_every_rule() -> None:
    log = log_of((10, 100, 0), (10, 100, 0), (10, 100, 0))
    plan = plan_deletion(log, settings(HOUR_MS, policy="compact,delete"), 10, 30, NOW_MS)
    assert plan == DeletionPlan(1, 0, 2, roll_first=True)
