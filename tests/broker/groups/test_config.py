"""GroupConfig: Kafka's keys and defaults, validated at construction."""

from __future__ import annotations

import pytest

from broker.groups import GroupConfig
from protocol.errors import InvalidConfig


def test_defaults_are_kafkas():
    config = GroupConfig()
    assert config.offsets_retention_ms == 7 * 24 * 3600 * 1000
    assert (config.group_min_session_timeout_ms, config.group_max_session_timeout_ms) == (
        6_000,
        1_800_000,
    )
    assert config.group_initial_rebalance_delay_ms == 3_000


def test_from_properties_by_kafka_key():
    config = GroupConfig.from_properties({"offsets.retention.minutes": "60", "group.max.size": 5})
    assert (config.offsets_retention_minutes, config.group_max_size) == (60, 5)


@pytest.mark.parametrize(
    ("properties", "named"),
    [
        ({"group.max.size": "0"}, "group.max.size"),
        ({"group.max.session.timeout.ms": "1"}, "group.max.session.timeout.ms"),
        ({"offsets.retention.minutes": "x"}, "offsets.retention.minutes"),
        ({"group.bogus": "1"}, "group.bogus"),
    ],
    ids=["max-size-zero", "max-below-min", "not-a-number", "unknown-key"],
)
def test_invalid_settings_name_the_key(properties, named):
    with pytest.raises(InvalidConfig, match=named):
        GroupConfig.from_properties(properties)
