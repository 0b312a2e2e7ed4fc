"""Issue 23 finding 3: a config value outside the range its wire encoding holds is refused.

Before the fix, `alter_configs` stored `retention.bytes` = 2**63 and answered `{}`;
from then on every `describe_configs` and `explain_retention` of that topic answered
"unencodable response". Checked on an in-process broker, through real frames.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.config import BrokerConfig
from broker.server import BrokerHandle
from protocol.envelope import ok_response, parse_response
from protocol.errors import InvalidConfig
from protocol.framing import decode_body, encode_body
from protocol.schemas import INT64, validate_response_body
from protocol.settings import INT64_MAX, INT64_MIN, Setting
from storage.config import TOPIC_SETTINGS, LogConfig
from tests.broker.rawconn import RawConn

LONG_MAX = 2**63 - 1  # spelt out: the test must not trust the module under test

# Every int64 topic key whose validator had no upper bound.
UNBOUNDED_BEFORE = (
    "retention.bytes",
    "segment.ms",
    "flush.messages",
    "file.delete.delay.ms",
    "max.compaction.lag.ms",
    "message.timestamp.after.max.ms",
    "segment.jitter.ms",
)


@pytest.mark.parametrize("key", UNBOUNDED_BEFORE)
@pytest.mark.parametrize("value", [LONG_MAX + 1, 2**64 - 1, str(LONG_MAX + 1), str(2**70)])
async def test_alter_above_int64_is_invalid_config_and_describe_still_works(
    inprocess_broker: BrokerHandle, key: str, value: int | str
) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        created = await conn.call("create_topic", {"topic": "t", "partitions": 1})
        assert created["error"] is None
        answer = await conn.call("alter_configs", {"topic": "t", "set": {key: value}})
        assert answer["error"] == "INVALID_CONFIG", answer
        assert key in answer["message"] and str(LONG_MAX) in answer["message"]
        described = await conn.call("describe_configs", {"topic": "t"})
        assert described["error"] is None, described
        explained = await conn.call("explain_retention", {"topic": "t", "partitions": None})
        assert explained["error"] is None, explained


async def test_create_topic_above_int64_is_invalid_config(inprocess_broker: BrokerHandle) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        answer = await conn.call(
            "create_topic",
            {"topic": "c", "partitions": 1, "configs": {"retention.bytes": str(2**64)}},
        )
        assert answer["error"] == "INVALID_CONFIG", answer
        assert "retention.bytes" in answer["message"]
        meta = await conn.call("metadata", {"topics": ["c"]})
        assert meta["body"]["topics"][0]["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


async def test_largest_int64_is_still_accepted(inprocess_broker: BrokerHandle) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        await conn.call("create_topic", {"topic": "m", "partitions": 1})
        answer = await conn.call(
            "alter_configs", {"topic": "m", "set": {"retention.bytes": LONG_MAX}}
        )
        assert answer["error"] is None, answer
        described = await conn.call("describe_configs", {"topic": "m"})
        assert described["body"]["configs"]["retention.bytes"] == {
            "value": LONG_MAX,
            "source": "topic",
        }


# --- every value validation accepts is describable ----------------------------------------

_CONFIG = BrokerConfig.from_props({}, data_dir="/unused")
_NUMERIC = [s for s in TOPIC_SETTINGS if s.type in (int, float)]


def _raw_values(setting: Setting) -> st.SearchStrategy[object]:
    """Values a client may send: near and far outside the bounds, typed or as text."""
    if setting.type is int:
        numbers = st.one_of(
            st.integers(-(2**70), 2**70),
            st.sampled_from([INT64_MIN - 1, INT64_MIN, INT64_MAX, INT64_MAX + 1, 2**64 - 1]),
        )
    else:
        numbers = st.floats(allow_nan=True, allow_infinity=True)  # type: ignore[assignment]
    return st.one_of(numbers, numbers.map(str))


@st.composite
def _setting_and_value(draw: st.DrawFn) -> tuple[Setting, object]:
    setting = draw(st.sampled_from(_NUMERIC))
    return setting, draw(_raw_values(setting))


@settings(max_examples=400, deadline=None)
@given(_setting_and_value())
def test_any_accepted_value_round_trips_through_describe_encoding(
    case: tuple[Setting, object],
) -> None:
    setting, raw = case
    try:
        overrides = {setting.name: setting.parse(raw)}
        LogConfig.from_props(overrides, _CONFIG.log_config)
    except InvalidConfig as exc:
        assert setting.name in exc.message
        return
    body = {"configs": _CONFIG.describe_topic_configs(overrides)}
    wire = decode_body(encode_body(ok_response(7, body).to_wire()))
    answer = validate_response_body("describe_configs", parse_response(wire).body)
    described = answer["configs"][setting.name]
    assert described == {"value": overrides[setting.name], "source": "topic"}
    if setting.type is int:
        INT64.check(described["value"])  # the range Kafka's LONG configs are encoded in


@st.composite
def _synonym_and_value(draw: st.DrawFn) -> tuple[Setting, str, object]:
    setting = draw(st.sampled_from([s for s in _NUMERIC if s.synonyms]))
    synonym = draw(st.sampled_from(setting.synonyms))
    return setting, synonym.name, draw(_raw_values(setting))


@settings(max_examples=300, deadline=None)
@given(_synonym_and_value())
def test_any_accepted_broker_default_round_trips_through_describe_encoding(
    case: tuple[Setting, str, object],
) -> None:
    setting, key, raw = case
    try:
        config = BrokerConfig.from_props({key: str(raw)}, data_dir="/unused")
    except InvalidConfig as exc:
        assert key in exc.message
        return
    body = {"configs": config.describe_topic_configs({})}
    wire = decode_body(encode_body(ok_response(7, body).to_wire()))
    answer = validate_response_body("describe_configs", parse_response(wire).body)
    described = answer["configs"][setting.name]
    assert described["source"] == "broker"
    assert described["value"] == getattr(config.log_config, setting.attr)
    if setting.type is int:
        INT64.check(described["value"])
