"""Every verdict of `explain_retention`, and its agreement with the deletion plan."""

from __future__ import annotations

import msgpack
from hypothesis import given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from retention.explain import Verdict, explain_retention, format_duration_ms
from retention.rules import RetentionSettings, plan_deletion
from tests.retention.segments import HOUR_MS, NOW_MS, Seg, log_of, settings

OLD = NOW_MS - 3 * HOUR_MS


def verdicts(log: list[Seg], cfg: RetentionSettings, log_start: int, hw: int) -> list[Verdict]:
    return [s.verdict for s in explain_retention(log, cfg, log_start, hw, NOW_MS).segments]


def test_deletable_by_each_rule_and_the_active_segment_kept() -> None:
    log = log_of(
        (10, 100, NOW_MS), (10, 100, NOW_MS), (10, 100, OLD), (10, 100, NOW_MS), (10, 100, NOW_MS)
    )
    result = explain_retention(log, settings(HOUR_MS, 250), 10, 50, NOW_MS)
    assert [s.verdict for s in result.segments] == [
        Verdict.DELETE_START_OFFSET,
        Verdict.DELETE_SIZE,
        Verdict.DELETE_TIME,
        Verdict.KEEP_WITHIN_RETENTION,
        Verdict.KEEP_ACTIVE,
    ]
    assert "below the log start offset 10" in result.segments[0].reason
    assert "retention.bytes=250" in result.segments[1].reason
    assert "3h0m old" in result.segments[2].reason
    assert "retention.ms=3600000" in result.segments[2].reason
    assert "below retention.bytes=250" in result.segments[3].reason
    assert result.deletable_count == 3
    assert result.deletable_bytes == 300
    assert not result.roll_first


def test_blocked_segment_names_the_segment_that_blocks_it() -> None:
    log = log_of((10, 100, NOW_MS), (10, 100, OLD), (10, 100, NOW_MS))
    result = explain_retention(log, settings(HOUR_MS), 0, 30, NOW_MS)
    assert [s.verdict for s in result.segments] == [
        Verdict.KEEP_WITHIN_RETENTION,
        Verdict.KEEP_BLOCKED,
        Verdict.KEEP_ACTIVE,
    ]
    assert "segment 0 before it is kept (keep_within_retention)" in result.segments[1].reason


def test_high_watermark_guard_verdict() -> None:
    log = log_of((10, 100, OLD), (10, 100, OLD))
    assert verdicts(log, settings(HOUR_MS), 0, 5) == [
        Verdict.KEEP_HIGH_WATERMARK,
        Verdict.KEEP_HIGH_WATERMARK,
    ]


def test_compact_policy_verdict_and_log_start_still_applies() -> None:
    log = log_of((10, 100, OLD), (10, 100, OLD), (10, 100, OLD))
    result = explain_retention(log, settings(HOUR_MS, policy="compact"), 10, 30, NOW_MS)
    assert [s.verdict for s in result.segments] == [
        Verdict.DELETE_START_OFFSET,
        Verdict.KEEP_COMPACT,
        Verdict.KEEP_COMPACT,
    ]
    assert "cleanup.policy=compact" in result.segments[1].reason


def test_future_timestamp_verdict_blocks_later_expired_segments() -> None:
    log = log_of((10, 100, NOW_MS + HOUR_MS), (10, 100, OLD), (10, 100, NOW_MS))
    result = explain_retention(log, settings(HOUR_MS), 0, 30, NOW_MS)
    assert [s.verdict for s in result.segments] == [
        Verdict.KEEP_FUTURE_TIMESTAMP,
        Verdict.KEEP_BLOCKED,
        Verdict.KEEP_ACTIVE,
    ]
    assert result.segments[0].age_ms == -HOUR_MS
    assert "1h0m in the future" in result.segments[0].reason


def test_empty_active_segment_is_kept_and_everything_before_goes() -> None:
    log = [Seg(0, 10, 100, OLD, OLD, is_active=False), Seg(10, 10, 0, -1, OLD, is_active=True)]
    result = explain_retention(log, settings(HOUR_MS), 0, 10, NOW_MS)
    assert [s.verdict for s in result.segments] == [Verdict.DELETE_TIME, Verdict.KEEP_ACTIVE]
    assert "empty" in result.segments[1].reason
    assert result.segments[1].timestamp_from_mtime


def test_delete_all_then_roll_is_explained_on_the_last_segment() -> None:
    log = log_of((10, 100, OLD), (10, 100, OLD))
    result = explain_retention(log, settings(HOUR_MS), 0, 20, NOW_MS)
    assert [s.verdict for s in result.segments] == [Verdict.DELETE_TIME, Verdict.DELETE_TIME]
    assert result.roll_first
    assert "rolls a new empty segment first" in result.segments[-1].reason


def test_slow_topic_active_segment_explains_segment_ms() -> None:
    # One active segment holding old and new records: its newest record is recent.
    log = log_of((100, 5000, NOW_MS - 60_000))
    result = explain_retention(log, settings(HOUR_MS, segment_ms=7 * 24 * HOUR_MS), 0, 100, NOW_MS)
    [seg] = result.segments
    assert seg.verdict is Verdict.KEEP_ACTIVE
    assert "newest record is 1m0s old" in seg.reason
    assert "segment.ms=604800000 (7d0h)" in seg.reason
    assert "segment.ms + retention.ms" in seg.reason


def test_unlimited_retention_says_so() -> None:
    log = log_of((10, 100, OLD), (10, 100, NOW_MS))
    result = explain_retention(log, settings(), 0, 20, NOW_MS)
    assert result.segments[0].verdict is Verdict.KEEP_WITHIN_RETENTION
    assert "retention.ms=-1 (no time limit)" in result.segments[0].reason
    assert "retention.bytes=-1 (no size limit)" in result.segments[0].reason


def test_wire_form_is_plain_msgpack_data() -> None:
    log = log_of((10, 100, OLD), (10, 100, NOW_MS))
    result = explain_retention(log, settings(HOUR_MS, policy="compact,delete"), 0, 20, NOW_MS)
    wire = msgpack.unpackb(msgpack.packb(result.to_wire()))
    assert wire["cleanup_policy"] == ["compact", "delete"]
    assert wire["log_end_offset"] == 20
    assert wire["deletable_segments"] == 1
    assert wire["segments"][0]["verdict"] == "delete_time"
    assert wire["segments"][0]["deletable"] is True
    assert wire["segments"][0]["age_ms"] == 3 * HOUR_MS
    assert wire["segments"][1]["verdict"] == "keep_active"


def test_format_duration() -> None:
    assert [format_duration_ms(ms) for ms in (999, 1000, 61_000, 3_660_000, 90_000_000)] == [
        "999ms",
        "1s",
        "1m1s",
        "1h1m",
        "1d1h",
    ]
    assert format_duration_ms(-1500) == "-1s"


# -- explain never disagrees with the plan -------------------------------------------

segment_specs = st.lists(
    st.tuples(
        st.integers(0, 5),  # record count
        st.integers(0, 300),  # size_bytes
        st.one_of(st.just(-1), st.integers(NOW_MS - 4 * HOUR_MS, NOW_MS + HOUR_MS)),
    ),
    min_size=1,
    max_size=6,
)


@hsettings(max_examples=150, deadline=None)
@given(
    specs=segment_specs,
    retention_ms=st.sampled_from([-1, 0, HOUR_MS, 2 * HOUR_MS]),
    retention_bytes=st.sampled_from([-1, 0, 100, 250, 600]),
    policy=st.sampled_from(["delete", "compact", "compact,delete"]),
    log_start_shift=st.integers(0, 12),
    hw_shift=st.integers(0, 12),
)
def test_explain_verdicts_match_the_plan(
    specs: list[tuple[int, int, int]],
    retention_ms: int,
    retention_bytes: int,
    policy: str,
    log_start_shift: int,
    hw_shift: int,
) -> None:
    log = log_of(*specs)
    leo = log[-1].next_offset
    log_start = min(log_start_shift, leo)
    hw = max(log_start, leo - hw_shift)
    cfg = settings(retention_ms, retention_bytes, policy)
    plan = plan_deletion(log, cfg, log_start, hw, NOW_MS)
    result = explain_retention(log, cfg, log_start, hw, NOW_MS)
    deletable = [s.verdict.deletable for s in result.segments]
    assert deletable == [i < plan.total for i in range(len(log))]
    assert result.roll_first is plan.roll_first
    if plan.total < len(log):
        # The walk stops at a segment kept for a reason of its own, never "blocked".
        assert result.segments[plan.total].verdict is not Verdict.KEEP_BLOCKED
    for seg in result.segments:
        assert seg.reason
        if seg.verdict is Verdict.KEEP_COMPACT:
            assert "delete" not in cfg.cleanup_policy


def test_wire_form_matches_the_explain_retention_schema_exactly() -> None:
    from protocol.retention_schema import API_NAME
    from protocol.schemas import validate_response_body

    old = NOW_MS - 3 * HOUR_MS
    log = log_of((10, 100, old), (10, 100, NOW_MS + 5))
    result = explain_retention(log, settings(HOUR_MS, 250), 0, 20, NOW_MS)
    body = {
        "topic": "t",
        "partitions": [
            {"partition": 0, "error": None, "message": None, **result.to_wire()},
            {"partition": 1, "error": "UNKNOWN_TOPIC_OR_PARTITION", "message": "no"},
        ],
    }
    validated = validate_response_body(API_NAME, msgpack.unpackb(msgpack.packb(body)))
    # Nothing the broker sends is dropped by the client's validation.
    assert validated["partitions"][0] == body["partitions"][0]
    assert validated["partitions"][1]["segments"] == []
