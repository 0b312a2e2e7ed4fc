"""Every record's timestamp is checked, not the batch header's (issue 23, finding 7).

As Kafka's LogValidator: with CreateTime, each record's timestamp (base + delta)
must lie within message.timestamp.before.max.ms / after.max.ms of now; -1 means
"no timestamp" and passes; other negative timestamps are refused. The error names
the record.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import encode_batch, validate_batch
from protocol.errors import InvalidTimestamp
from storage.config import LogConfig
from tests.storage.helpers import BASE_TS, ManualClock, open_test_log

HOUR_MS = 3_600_000
YEAR_MS = 365 * 24 * HOUR_MS
BOUNDED = LogConfig(message_timestamp_before_max_ms=HOUR_MS, message_timestamp_after_max_ms=HOUR_MS)


def _batch(*timestamps: int) -> bytes:
    return encode_batch([(b"k", f"v{i}".encode(), None, ts) for i, ts in enumerate(timestamps)])


def _append(tmp_path: Path, records: bytes, config: LogConfig = BOUNDED) -> int:
    log = open_test_log(tmp_path, config, clock=ManualClock(BASE_TS))
    return log.append(records).base_offset


def test_a_record_a_year_old_behind_a_current_base_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidTimestamp, match=r"record 1 .*before.max.ms"):
        _append(tmp_path, _batch(BASE_TS, BASE_TS - YEAR_MS, BASE_TS))


def test_a_record_in_the_future_behind_a_current_base_is_refused(tmp_path: Path) -> None:
    # max_timestamp is the header's claim, checked against the records: the future
    # record makes it the max, so the header check alone would have caught it too.
    # The past one is what only a per-record check sees.
    with pytest.raises(InvalidTimestamp, match=r"record 2 .*after.max.ms"):
        _append(tmp_path, _batch(BASE_TS, BASE_TS, BASE_TS + 2 * HOUR_MS))


def test_a_delta_making_a_negative_timestamp_is_refused(tmp_path: Path) -> None:
    unbounded = LogConfig()
    with pytest.raises(InvalidTimestamp, match=r"record 1 .*negative"):
        _append(tmp_path, _batch(1000, -4000), unbounded)


def test_a_base_timestamp_of_minus_one_exempts_no_record(tmp_path: Path) -> None:
    with pytest.raises(InvalidTimestamp, match=r"record 1 "):
        _append(tmp_path, _batch(-1, BASE_TS - YEAR_MS))


def test_records_without_a_timestamp_pass(tmp_path: Path) -> None:
    assert _append(tmp_path, _batch(-1, -1, -1)) == 0


def test_records_without_a_timestamp_mixed_with_current_ones_pass(tmp_path: Path) -> None:
    assert _append(tmp_path, _batch(BASE_TS, -1, BASE_TS - 1000, -1)) == 0


def test_records_inside_the_bounds_pass(tmp_path: Path) -> None:
    batch = _batch(BASE_TS - HOUR_MS, BASE_TS, BASE_TS + HOUR_MS)
    assert _append(tmp_path, batch) == 0


def test_a_log_append_time_topic_checks_nothing(tmp_path: Path) -> None:
    config = LogConfig(
        message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=HOUR_MS
    )
    assert _append(tmp_path, _batch(BASE_TS, BASE_TS - YEAR_MS), config) == 0


@pytest.mark.parametrize("count", [300, 5], ids=["large", "small"])
def test_one_bad_record_in_a_large_batch_is_named(tmp_path: Path, count: int) -> None:
    """The bad record is found wherever it sits, not only at the ends the bounds see."""
    timestamps = [BASE_TS] * count
    timestamps[count - 2] = BASE_TS - YEAR_MS
    with pytest.raises(InvalidTimestamp, match=rf"record {count - 2} "):
        _append(tmp_path, _batch(*timestamps))
    assert _append(tmp_path / "ok", _batch(*[BASE_TS - HOUR_MS] * count)) == 0


def test_an_old_base_with_ordered_records_names_the_first_record(tmp_path: Path) -> None:
    """All deltas >= 0: the base is the smallest timestamp, and it is checked too."""
    with pytest.raises(InvalidTimestamp, match=r"record 0 .*before.max.ms"):
        _append(tmp_path, _batch(BASE_TS - YEAR_MS, BASE_TS, BASE_TS))


_TIMESTAMPS = st.one_of(
    st.just(-1),
    st.integers(-5, 5),
    st.integers(BASE_TS - 2 * HOUR_MS, BASE_TS + 2 * HOUR_MS),
    st.integers(0, 2**62),
)


@settings(max_examples=300, deadline=None)
@given(timestamps=st.lists(_TIMESTAMPS, min_size=1, max_size=300))
def test_a_batch_is_refused_exactly_when_a_record_is_out_of_bounds(timestamps: list[int]) -> None:
    """Whichever path finds the bounds (ordered deltas, numpy, map), the verdict is the
    model's: every record is -1 or a timestamp >= 0 within [now - before, now + after]."""
    low, high = BASE_TS - HOUR_MS, BASE_TS + HOUR_MS
    bad = [i for i, ts in enumerate(timestamps) if ts != -1 and not (max(low, 0) <= ts <= high)]
    batch = _batch(*timestamps)
    if bad:
        with pytest.raises(InvalidTimestamp, match=rf"record {bad[0]} "):
            validate_batch(batch, producer=True, timestamp_bounds=(low, high))
    else:
        validate_batch(batch, producer=True, timestamp_bounds=(low, high))
