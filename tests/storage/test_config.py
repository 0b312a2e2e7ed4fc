from __future__ import annotations

import pytest

from protocol.errors import InvalidConfig
from storage.config import LONG_MAX, TOPIC_CONFIG_DEFS, LogConfig

PROTOCOL_TOPIC_KEYS = {
    "retention.ms", "retention.bytes", "segment.bytes", "segment.ms", "segment.jitter.ms",
    "segment.index.bytes", "index.interval.bytes", "flush.messages", "flush.ms",
    "cleanup.policy", "min.cleanable.dirty.ratio", "min.compaction.lag.ms",
    "max.compaction.lag.ms", "delete.retention.ms", "file.delete.delay.ms",
    "max.message.bytes", "message.timestamp.type",
}  # fmt: skip
# Topic keys Kafka gives no broker-level default (KIP-405: a broker-wide
# remote.storage.enable would also hit compacted topics, which refuse it).
TOPIC_ONLY_KEYS = {"remote.storage.enable"}


def test_every_protocol_key_is_defined_with_a_synonym_and_doc() -> None:
    assert set(TOPIC_CONFIG_DEFS) >= PROTOCOL_TOPIC_KEYS
    for definition in TOPIC_CONFIG_DEFS.values():
        assert definition.doc
        assert bool(definition.synonyms) is (definition.name not in TOPIC_ONLY_KEYS)
        assert definition.parse(definition.default) == definition.default


def test_defaults_are_kafkas() -> None:
    config = LogConfig()
    assert config.segment_bytes == 1 << 30
    assert config.segment_ms == 7 * 24 * 3600 * 1000
    assert config.segment_index_bytes == 10 * 1024 * 1024
    assert config.index_interval_bytes == 4096
    assert config.max_message_bytes == 1048588
    assert config.flush_messages == LONG_MAX
    assert config.cleanup_policy == frozenset({"delete"})
    assert config.file_delete_delay_ms == 60000


def test_from_props_parses_strings_and_lists() -> None:
    config = LogConfig.from_props(
        {"segment.bytes": "2048", "cleanup.policy": "compact, delete", "flush.messages": 1}
    )
    assert config.segment_bytes == 2048
    assert config.cleanup_policy == frozenset({"compact", "delete"})
    assert config.compacted and config.flush_messages == 1
    assert config.to_props()["cleanup.policy"] == "compact,delete"


@pytest.mark.parametrize(
    ("props", "needle"),
    [
        ({"segment.bytes": "1"}, "segment.bytes"),
        ({"segment.bytes": "ten"}, "segment.bytes"),
        ({"segment.bytes": 1.5}, "segment.bytes"),
        ({"segment.bytes": True}, "segment.bytes"),
        ({"retention.ms": "-5"}, "retention.ms"),
        ({"cleanup.policy": "shred"}, "cleanup.policy"),
        ({"cleanup.policy": ""}, "cleanup.policy"),
        ({"min.cleanable.dirty.ratio": "1.5"}, "min.cleanable.dirty.ratio"),
        ({"message.timestamp.type": "Now"}, "message.timestamp.type"),
        ({"no.such.key": "1"}, "no.such.key"),
        ({"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"}, "max.compaction.lag.ms"),
    ],
)
def test_invalid_values_name_the_key(props: dict, needle: str) -> None:
    with pytest.raises(InvalidConfig, match=needle.replace(".", r"\.")):
        LogConfig.from_props(props)


def test_from_props_keeps_defaults_for_unset_keys() -> None:
    base = LogConfig(segment_bytes=4096)
    assert LogConfig.from_props({"retention.ms": "5"}, base).segment_bytes == 4096


def test_broker_synonyms_first_wins_and_scale() -> None:
    config = LogConfig.from_broker_props(
        {"log.retention.hours": "2", "log.retention.minutes": "3", "log.roll.hours": 1}
    )
    assert config.retention_ms == 3 * 60_000
    assert config.segment_ms == 3_600_000
    assert LogConfig.from_broker_props({"log.retention.ms": "-7"}).retention_ms == -1
    with pytest.raises(InvalidConfig, match=r"log\.segment\.bytes"):
        LogConfig.from_broker_props({"log.segment.bytes": "3"})


def test_max_segment_ms_for_compacted_topics() -> None:
    config = LogConfig(cleanup_policy=frozenset({"compact"}), max_compaction_lag_ms=10)
    assert config.max_segment_ms == 10
    assert LogConfig(max_compaction_lag_ms=10).max_segment_ms == LogConfig().segment_ms


@pytest.mark.parametrize("key", ["log.retention.ms", "log.retention.hours", "log.roll.ms"])
def test_unparsable_broker_synonym_is_invalid_config_naming_it(key: str) -> None:
    with pytest.raises(InvalidConfig, match=key.replace(".", r"\.")):
        LogConfig.from_broker_props({key: "abc"})
