"""protocol.settings: one declared key parses, bounds-checks and renders itself."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from protocol.errors import InvalidConfig
from protocol.settings import INT64_MAX, INT64_MIN, Setting, check_fields, markdown_table

RETENTION_BYTES = Setting("retention.bytes", "retention_bytes", int, -1, "Size limit.")
SEGMENT_BYTES = Setting(
    "segment.bytes", "segment_bytes", int, 1024, "Roll size.", low=14, high=2**31 - 1
)
RATIO = Setting("ratio", "ratio", float, 0.5, "A ratio.", low=0, high=1)
THROTTLE = Setting("rate", "rate", float, 1.0, "A rate.", low=1)


@pytest.mark.parametrize(
    ("setting", "raw", "value"),
    [
        pytest.param(RETENTION_BYTES, str(INT64_MAX), INT64_MAX, id="int64-max-text"),
        pytest.param(RETENTION_BYTES, INT64_MIN, INT64_MIN, id="int64-min"),
        pytest.param(SEGMENT_BYTES, " 14 ", 14, id="low-bound-stripped"),
        pytest.param(RATIO, "1", 1.0, id="float-high-bound"),
        pytest.param(THROTTLE, "inf", float("inf"), id="unbounded-float-inf"),
    ],
)
def test_values_in_range_parse(setting: Setting, raw: object, value: object) -> None:
    assert setting.parse(raw) == value


@pytest.mark.parametrize(
    ("setting", "raw", "needle"),
    [
        pytest.param(RETENTION_BYTES, str(INT64_MAX + 1), f"in [{INT64_MIN}, {INT64_MAX}]",
                     id="above-int64"),
        pytest.param(RETENTION_BYTES, INT64_MIN - 1, "9223372036854775807", id="below-int64"),
        pytest.param(SEGMENT_BYTES, "13", "in [14, 2147483647]", id="below-low"),
        pytest.param(SEGMENT_BYTES, True, "cannot parse", id="bool-is-not-int"),
        pytest.param(SEGMENT_BYTES, 1.5, "cannot parse", id="float-is-not-int"),
        pytest.param(RATIO, "nan", "in [0, 1]", id="nan"),
        pytest.param(THROTTLE, "0.5", ">= 1", id="below-open-range"),
    ],
)  # fmt: skip
def test_out_of_range_values_name_key_and_range(setting: Setting, raw: object, needle: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        setting.parse(raw)
    assert info.value.message.startswith(setting.name + ":")
    assert needle in info.value.message


def test_an_int_setting_cannot_declare_bounds_beyond_int64() -> None:
    with pytest.raises(AssertionError):
        Setting("x", "x", int, 0, "doc", high=INT64_MAX + 1)


def test_check_fields_catches_a_default_that_drifted() -> None:
    @dataclass(frozen=True)
    class Record:
        segment_bytes: int = 2048

    with pytest.raises(AssertionError, match=r"segment\.bytes"):
        check_fields(Record, [SEGMENT_BYTES])


def test_markdown_table_rows() -> None:
    table = markdown_table([SEGMENT_BYTES, RATIO])
    assert table.splitlines()[2] == "| `segment.bytes` | `1024` | [14, 2147483647] | Roll size. |"
    assert table.splitlines()[3] == "| `ratio` | `0.5` | [0, 1] | A ratio. |"
