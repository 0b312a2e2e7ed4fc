"""BrokerConfig: Kafka names and defaults, server.properties parsing, errors naming keys."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import (
    BROKER_CONFIG_DEFS,
    BrokerConfig,
    parse_host_port,
    parse_overrides,
    parse_properties,
    suggest_key,
)
from protocol.errors import InvalidConfig
from storage.config import LogConfig


def test_defaults_are_kafkas_and_bind_loopback(tmp_path: Path) -> None:
    cfg = BrokerConfig.from_sources(data_dir=tmp_path)
    assert cfg.listen == ("127.0.0.1", 9092)
    assert cfg.metrics_listen == ("127.0.0.1", 9644)
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.connections_max_idle_ms == 600000
    assert cfg.log_retention_check_interval_ms == 300000
    assert cfg.log_initial_task_delay_ms == 30000
    assert cfg.num_partitions == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.message_max_bytes == 1048588
    assert cfg.log_config == LogConfig()


def test_properties_file_with_comments_separators_and_continuations() -> None:
    text = (
        "# Log Retention Policy\n"
        "! also a comment\n"
        "\n"
        "log.retention.hours=24\n"
        "log.segment.bytes : 1048576\n"
        "num.partitions 3\n"
        "log.cleanup.policy=compact,\\\n"
        "    delete\n"
    )
    assert parse_properties(text) == {
        "log.retention.hours": "24",
        "log.segment.bytes": "1048576",
        "num.partitions": "3",
        "log.cleanup.policy": "compact,delete",
    }


def test_file_then_overrides_build_topic_defaults(tmp_path: Path) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text("log.retention.hours=24\nlog.segment.bytes=1048576\nnum.partitions=3\n")
    cfg = BrokerConfig.from_sources(
        config_file=conf,
        overrides=["log.segment.bytes=2097152", "log.cleanup.policy=compact"],
        data_dir=tmp_path / "data",
    )
    assert cfg.num_partitions == 3
    assert cfg.log_config.retention_ms == 24 * 3_600_000
    assert cfg.log_config.segment_bytes == 2097152  # --set wins over the file
    assert cfg.log_config.cleanup_policy == frozenset({"compact"})


def test_finest_time_unit_wins() -> None:
    cfg = BrokerConfig.from_props(
        {"log.retention.hours": "1", "log.retention.ms": "5000"}, data_dir="/d"
    )
    assert cfg.log_config.retention_ms == 5000


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("log.retention.msec", "log.retention.ms"),
        ("retention.ms", "log.retention.ms"),
        ("socket.request.max.byte", "socket.request.max.bytes"),
        ("num.partition", "num.partitions"),
    ],
)
def test_unknown_key_names_it_and_suggests_closest(key: str, suggestion: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        BrokerConfig.from_props({key: "1"}, data_dir="/d")
    assert repr(key) in info.value.message
    assert suggest_key(key) == suggestion
    assert repr(suggestion) in info.value.message


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("num.partitions", "0"),
        ("num.partitions", "many"),
        ("auto.create.topics.enable", "yes"),
        ("socket.request.max.bytes", "0"),
        ("log.segment.bytes", "13"),
        ("log.cleanup.policy", "shred"),
        ("log.retention.hours", "a day"),
        ("log.message.timestamp.type", "WallTime"),
        ("connections.max.idle.ms", "-1"),
    ],
)
def test_invalid_value_names_the_broker_key(key: str, value: str) -> None:
    with pytest.raises(InvalidConfig) as info:
        BrokerConfig.from_props({key: value}, data_dir="/d")
    assert key in info.value.message


def test_negative_broker_retention_means_unlimited() -> None:
    cfg = BrokerConfig.from_props({"log.retention.ms": "-5"}, data_dir="/d")
    assert cfg.log_config.retention_ms == -1


def test_data_dir_from_log_dirs_and_flag_wins(tmp_path: Path) -> None:
    assert BrokerConfig.from_props({"log.dirs": "/a"}).data_dir == Path("/a")
    assert BrokerConfig.from_props({"log.dirs": "/a"}, data_dir="/b").data_dir == Path("/b")
    with pytest.raises(InvalidConfig, match=r"log\.dirs"):
        BrokerConfig.from_props({})
    with pytest.raises(InvalidConfig, match="one data directory"):
        BrokerConfig.from_props({"log.dirs": "/a,/b"})


def test_missing_config_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfig, match="--config"):
        BrokerConfig.from_sources(config_file=tmp_path / "nope.properties", data_dir=tmp_path)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("[::1]:0", ("::1", 0)),
        (":9092", ("", 9092)),
    ],
)
def test_host_port(text: str, expected: tuple[str, int]) -> None:
    assert parse_host_port(text, "--listen") == expected


@pytest.mark.parametrize("text", ["9092", "host:http", "host:70000"])
def test_bad_host_port_names_the_option(text: str) -> None:
    with pytest.raises(InvalidConfig, match="--listen"):
        parse_host_port(text, "--listen")


def test_set_requires_key_value() -> None:
    assert parse_overrides(["a=b=c"]) == {"a": "b=c"}
    with pytest.raises(InvalidConfig, match="key=value"):
        parse_overrides(["novalue"])


def test_describe_sources_default_broker_topic() -> None:
    cfg = BrokerConfig.from_props({"log.retention.ms": "1000"}, data_dir="/d")
    described = cfg.describe_topic_configs({"segment.bytes": "4096"})
    assert described["segment.bytes"] == {"value": 4096, "source": "topic"}
    assert described["retention.ms"] == {"value": 1000, "source": "broker"}
    assert described["cleanup.policy"] == {"value": "delete", "source": "default"}


def test_every_broker_key_default_passes_its_own_validator() -> None:
    for definition in BROKER_CONFIG_DEFS.values():
        if definition.default != "":
            assert definition.parse(definition.text(definition.default)) == definition.default


def test_kafka_settings_node_id_advertised_listeners_and_kafka_listen(tmp_path: Path) -> None:
    config = BrokerConfig.from_sources(
        overrides=["node.id=7", "advertised.listeners=PLAINTEXT://broker.example:9093"],
        data_dir=tmp_path,
        kafka_listen="127.0.0.1:29092",
    )
    assert (config.node_id, config.kafka_listen) == (7, ("127.0.0.1", 29092))
    assert config.advertised_listeners == "PLAINTEXT://broker.example:9093"
    assert BrokerConfig.from_props({}, data_dir=tmp_path).kafka_listen is None


@pytest.mark.parametrize(
    "value", ["broker.example:9093", "PLAINTEXT://broker.example", "PLAINTEXT://:x", "A://h:70000"]
)
def test_advertised_listeners_must_be_name_host_port(tmp_path: Path, value: str) -> None:
    with pytest.raises(InvalidConfig, match=r"advertised\.listeners"):
        BrokerConfig.from_props({"advertised.listeners": value}, data_dir=tmp_path)
