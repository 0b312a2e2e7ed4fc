"""The tiered retention rules (pure) and the upload token bucket."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from retention.rules import RetentionSettings
from retention.tiered import (
    explain_tiered,
    local_settings,
    plan_local_deletion,
    plan_remote_deletion,
    total_segments,
)
from storage.remote.throttle import TokenBucket, UploadStopped
from tests.retention.segments import HOUR_MS, NOW_MS, Seg, log_of

DELETE = frozenset({"delete"})


def local(bytes_: int = -1, ms: int = -1) -> RetentionSettings:
    return local_settings(ms, bytes_, DELETE)


def test_local_retention_stops_at_the_first_segment_not_uploaded() -> None:
    segments = log_of((10, 100, NOW_MS), (10, 100, NOW_MS), (10, 100, NOW_MS), (0, 0, -1))
    # Size says delete all three; only the first is in the store.
    plan = plan_local_deletion(segments, local(bytes_=0), 0, 30, uploaded_end=10, now_ms=NOW_MS)
    assert plan.total == 1 and plan.size_count == 1
    plan = plan_local_deletion(segments, local(bytes_=0), 0, 30, uploaded_end=30, now_ms=NOW_MS)
    assert plan.total == 3  # never the active one


def test_local_retention_deletes_below_the_log_start_even_if_not_uploaded() -> None:
    segments = log_of((10, 100, NOW_MS), (10, 100, NOW_MS), (0, 0, -1))
    plan = plan_local_deletion(segments, local(), 10, 20, uploaded_end=0, now_ms=NOW_MS)
    assert (plan.start_offset_count, plan.total) == (1, 1)


def test_local_time_retention() -> None:
    old, new = NOW_MS - 3 * HOUR_MS, NOW_MS
    segments = log_of((10, 100, old), (10, 100, new), (0, 0, -1))
    plan = plan_local_deletion(segments, local(ms=HOUR_MS), 0, 20, 20, NOW_MS)
    assert (plan.time_count, plan.total) == (1, 1)


def _remote(base: int, count: int, size: int = 100, ts: int = NOW_MS) -> Seg:
    return Seg(base, base + count, size, ts, ts, False)


def test_total_retention_deletes_remote_segments_and_names_the_new_start() -> None:
    remote = [_remote(0, 10), _remote(10, 10), _remote(20, 10)]
    local_segs = [Seg(20, 30, 100, NOW_MS, NOW_MS, False), Seg(30, 35, 50, NOW_MS, NOW_MS, True)]
    across = total_segments(remote, local_segs, 30)
    assert [(s.base_offset, s.remote) for s in across] == [(0, True), (10, True), (20, True),
                                                            (30, False)]  # fmt: skip
    settings = RetentionSettings(-1, 250, DELETE)
    plan = plan_remote_deletion(across, settings, 0, NOW_MS)
    assert plan.total == 1 and plan.log_start_offset == 10  # 350 - 100 >= 250
    assert plan_remote_deletion(across, RetentionSettings(-1, -1, DELETE), 15, NOW_MS).total == 1


def test_total_retention_never_deletes_what_is_not_uploaded() -> None:
    remote = [_remote(0, 10)]
    local_segs = [Seg(10, 20, 1000, 0, 0, False), Seg(20, 20, 0, -1, NOW_MS, True)]
    across = total_segments(remote, local_segs, 10)
    plan = plan_remote_deletion(across, RetentionSettings(0, 0, DELETE), 0, NOW_MS)
    assert plan.total == 1 and plan.log_start_offset == 10


@given(
    sizes=st.lists(st.integers(1, 500), min_size=1, max_size=12),
    uploaded=st.integers(0, 12),
    limit=st.integers(-1, 3000),
)
def test_plans_never_delete_unuploaded_data(sizes: list[int], uploaded: int, limit: int) -> None:
    """Across both plans: no offset the store lacks is ever deleted from the disk, and
    total retention deletes only remote segments, oldest first."""
    segments = [Seg(10 * i, 10 * i + 10, s, NOW_MS - i, NOW_MS - i, False)
                for i, s in enumerate(sizes)]  # fmt: skip
    segments.append(Seg(10 * len(sizes), 10 * len(sizes), 0, -1, NOW_MS, True))
    uploaded = min(uploaded, len(sizes))
    uploaded_end = 10 * uploaded
    lp = plan_local_deletion(segments, local(bytes_=limit, ms=0), 0, segments[-1].next_offset,
                             uploaded_end, NOW_MS)  # fmt: skip
    assert lp.total <= uploaded and lp.total < len(segments)
    remote = segments[:uploaded]
    across = total_segments(remote, segments, uploaded_end)
    rp = plan_remote_deletion(across, RetentionSettings(0, limit, DELETE), 0, NOW_MS)
    assert rp.total <= uploaded
    if rp.total:
        assert rp.log_start_offset == across[rp.total].base_offset


def test_explain_shows_each_tier() -> None:
    remote = [_remote(0, 10), _remote(10, 10)]
    local_segs = [Seg(10, 20, 100, NOW_MS, NOW_MS, False), Seg(20, 30, 100, NOW_MS, NOW_MS, False),
                  Seg(30, 30, 0, -1, NOW_MS, True)]  # fmt: skip
    wire = explain_tiered(local_segs, remote, RetentionSettings(-1, 200, DELETE),
                          local(bytes_=0), 0, 30, 20, 20, NOW_MS)  # fmt: skip
    rows = {r["base_offset"]: r for r in wire["segments"]}
    assert [r["tier"] for r in wire["segments"]] == ["remote", "both", "local", "local"]
    assert rows[0]["remote_verdict"] == "delete_size"
    assert (
        rows[10]["verdict"] == "delete_size"
        and rows[10]["remote_verdict"] == "keep_within_retention"
    )
    assert rows[20]["verdict"] == "keep_not_uploaded" and rows[20]["remote_verdict"] is None
    assert rows[30]["verdict"] == "keep_active"
    assert wire["local_log_start_offset"] == 10 and wire["remote_storage_enable"]


def test_token_bucket_paces_uploads() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(s: float) -> None:
        slept.append(s)
        now[0] += s

    bucket = TokenBucket(1000, clock=lambda: now[0], sleep=sleep)
    bucket.consume(1000)  # the burst
    assert slept == []
    bucket.consume(500)
    assert sum(slept) == pytest.approx(0.5)
    now[0] += 10  # idle: the bucket refills to its burst only
    slept.clear()
    bucket.consume(1500)
    assert sum(slept) == pytest.approx(0.5)
    assert bucket.throttled_s == pytest.approx(1.0)


def test_token_bucket_stop_interrupts_a_throttled_upload() -> None:
    bucket = TokenBucket(10)
    bucket.consume(10)
    failed: list[BaseException] = []

    def upload() -> None:
        try:
            bucket.consume(1000)  # ~100 s at 10 B/s
        except UploadStopped as exc:
            failed.append(exc)

    thread = threading.Thread(target=upload)
    thread.start()
    bucket.stop()
    thread.join(timeout=5)
    assert not thread.is_alive() and failed
    with pytest.raises(UploadStopped):
        bucket.consume(1)
    assert TokenBucket(None).consume(10**12) is None  # unlimited
