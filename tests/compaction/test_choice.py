"""Dirty-ratio and cleanable-range arithmetic at its boundaries, and the filthiest-log choice."""

from __future__ import annotations

import pytest

from compaction.choice import (
    CleanableRange,
    LogToClean,
    SegmentView,
    choose_filthiest,
    cleanable_range,
    is_eligible,
    max_compaction_delay_ms,
)

NOW_MS = 1_000_000


def seg(base: int, nxt: int, size: int = 100, ts: int = 0, first_ts: int = -1) -> SegmentView:
    return SegmentView(base, nxt, size, ts, first_ts)


def active(base: int, size: int = 10) -> SegmentView:
    return SegmentView(base, base, size, -1, -1, is_active=True)


# Three closed segments [0,10) [10,20) [20,30) of 100 bytes, active at 30.
LOG = [seg(0, 10, ts=100), seg(10, 20, ts=200), seg(20, 30, ts=300), active(30)]


def measure(segments=LOG, **kw) -> CleanableRange:
    args = dict(
        log_start_offset=0,
        log_end_offset=30,
        high_watermark=30,
        checkpoint=None,
        now_ms=NOW_MS,
        min_compaction_lag_ms=0,
    )
    args.update(kw)
    return cleanable_range(segments, **args)


def test_no_checkpoint_everything_below_active_is_cleanable():
    r = measure()
    assert (r.first_dirty_offset, r.first_uncleanable_offset) == (0, 30)
    assert (r.clean_bytes, r.cleanable_bytes) == (0, 300)
    assert r.dirty_ratio == 1.0
    assert not r.checkpoint_reset


@pytest.mark.parametrize(
    ("checkpoint", "first_dirty", "clean", "cleanable", "reset"),
    [
        pytest.param(10, 10, 100, 200, False, id="at-segment-start"),
        pytest.param(15, 15, 200, 200, False, id="mid-segment-counts-twice-like-kafka"),
        pytest.param(30, 30, 300, 0, False, id="at-log-end"),
        pytest.param(31, 0, 0, 300, True, id="above-log-end-resets"),
        pytest.param(-1, 0, 0, 300, True, id="below-log-start-resets"),
    ],
)
def test_checkpoint_bounds(checkpoint, first_dirty, clean, cleanable, reset):
    r = measure(checkpoint=checkpoint)
    assert r.first_dirty_offset == first_dirty
    assert (r.clean_bytes, r.cleanable_bytes) == (clean, cleanable)
    assert r.checkpoint_reset is reset


def test_checkpoint_below_log_start_resets_to_log_start():
    r = measure(log_start_offset=12, checkpoint=5)
    assert r.first_dirty_offset == 12
    assert r.checkpoint_reset


def test_high_watermark_inside_a_segment_makes_it_uncleanable():
    r = measure(high_watermark=25)
    assert r.first_uncleanable_offset == 20
    assert r.cleanable_bytes == 200
    r = measure(high_watermark=20)
    assert r.first_uncleanable_offset == 20


@pytest.mark.parametrize(
    ("lag_ms", "uncleanable"),
    [
        # A segment is too recent when its largest timestamp > now - lag (strict).
        pytest.param(NOW_MS - 200, 20, id="largest-ts-equal-to-limit-is-old-enough"),
        pytest.param(NOW_MS - 199, 10, id="one-ms-inside-the-lag"),
        pytest.param(NOW_MS - 300, 30, id="all-old-enough"),
        pytest.param(NOW_MS - 99, 0, id="first-segment-too-recent"),
        pytest.param(0, 30, id="no-lag"),
    ],
)
def test_min_compaction_lag(lag_ms, uncleanable):
    r = measure(min_compaction_lag_ms=lag_ms)
    assert r.first_uncleanable_offset == uncleanable
    assert r.cleanable_bytes == uncleanable * 10


def test_min_lag_only_looks_from_first_dirty_on():
    # The first segment is recent but already clean: it does not block the dirty ones.
    segments = [seg(0, 10, ts=NOW_MS), seg(10, 20, ts=1), active(20)]
    r = measure(
        segments, checkpoint=10, log_end_offset=20, high_watermark=20, min_compaction_lag_ms=1000
    )
    assert r.first_uncleanable_offset == 20
    assert r.cleanable_bytes == 100


def test_uncleanable_never_before_first_dirty():
    r = measure(checkpoint=20, high_watermark=5)
    assert r.first_dirty_offset == 20
    # max(first dirty, bound) = 20, aligned to the segment containing it.
    assert r.first_uncleanable_offset == 20
    assert r.cleanable_bytes == 0


def test_only_active_segment():
    r = measure([active(0, size=50)], log_end_offset=7, high_watermark=7)
    assert r.total_bytes == 0
    assert r.dirty_ratio == 0.0


def test_offset_gaps_use_floor_segment():
    # Segment 1 ends at 5 after a cleaning; offset 7 is in the gap before segment 2.
    segments = [seg(0, 5), seg(10, 20), active(20)]
    r = measure(segments, log_end_offset=20, high_watermark=7)
    assert r.first_uncleanable_offset == 0


@pytest.mark.parametrize(
    ("first_ts", "lag_ms", "expected"),
    [
        pytest.param(1000, NOW_MS - 2000, 1000, id="overdue"),
        pytest.param(1000, NOW_MS - 1000, 0, id="exactly-at-lag"),
        pytest.param(1000, NOW_MS - 999, 0, id="within-lag"),
        pytest.param(-1, 1, 0, id="no-timestamp"),
        pytest.param(0, 1, 0, id="zero-timestamp-ignored"),
    ],
)
def test_max_compaction_delay(first_ts, lag_ms, expected):
    segments = [seg(0, 10, first_ts=first_ts), active(10)]
    got = max_compaction_delay_ms(
        segments, first_dirty_offset=0, now_ms=NOW_MS, max_compaction_lag_ms=lag_ms
    )
    assert got == expected


def test_max_compaction_delay_ignores_clean_and_active_segments():
    segments = [seg(0, 10, first_ts=5), seg(10, 20, first_ts=NOW_MS), active(20)]
    segments[-1] = SegmentView(20, 20, 10, 1, 1, is_active=True)
    got = max_compaction_delay_ms(
        segments, first_dirty_offset=10, now_ms=NOW_MS, max_compaction_lag_ms=10
    )
    assert got == 0


def candidate(name, cleanable, clean, min_ratio=0.5, delay=0):
    r = CleanableRange(0, 0, clean, cleanable, False)
    return LogToClean(name, r, delay, min_ratio)


def test_ratio_gate_is_strict():
    assert not is_eligible(candidate("a", 50, 50))  # exactly 0.5
    assert is_eligible(candidate("a", 51, 49))


def test_forced_by_max_lag_needs_cleanable_bytes():
    assert is_eligible(candidate("a", 1, 99, delay=5))
    assert not is_eligible(candidate("a", 0, 99, delay=5))


def test_empty_log_never_eligible():
    assert not is_eligible(candidate("a", 0, 0, min_ratio=0.0, delay=5))


def test_filthiest_wins_and_ineligible_skipped():
    logs = [
        candidate("low", 60, 40),
        candidate("high", 90, 10),
        candidate("gated", 95, 5, min_ratio=0.99),
        candidate("forced", 1, 99, delay=1),
    ]
    best = choose_filthiest(logs)
    assert best is not None and best.log == "high"
    assert choose_filthiest([candidate("x", 10, 90)]) is None
    assert choose_filthiest([candidate("forced", 1, 99, delay=1)]).log == "forced"
