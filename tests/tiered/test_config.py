"""Tiered storage's settings: topic keys validated as Kafka does, broker keys, the
broker-wide switch, compacted topics refused with a clear message."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import BrokerConfig
from protocol.errors import InvalidConfig
from storage.config import LogConfig
from storage.manager import LogManager
from storage.remote import load_credentials


def test_topic_keys_defaults_and_follow_retention() -> None:
    config = LogConfig()
    assert (
        config.remote_storage_enable,
        config.local_retention_ms,
        config.local_retention_bytes,
    ) == (
        False,
        -2,
        -2,
    )
    config = LogConfig.from_props({"retention.ms": "5000", "retention.bytes": "9000"})
    assert config.effective_local_retention_ms == 5000
    assert config.effective_local_retention_bytes == 9000
    config = LogConfig.from_props({"local.retention.ms": "10", "local.retention.bytes": "20"})
    assert (config.effective_local_retention_ms, config.effective_local_retention_bytes) == (10, 20)
    assert config.to_props()["remote.storage.enable"] is False


@pytest.mark.parametrize(
    ("props", "message"),
    [
        ({"cleanup.policy": "compact"}, "unsupported for the compacted topics"),
        ({"cleanup.policy": "compact,delete"}, "unsupported for the compacted topics"),
        ({"local.retention.ms": "-1"}, "local.retention.ms: Value must not be -1"),
        (
            {"retention.ms": "100", "local.retention.ms": "101"},
            "must not be more than retention.ms",
        ),
        ({"retention.bytes": "100", "local.retention.bytes": "-1"}, "must not be -1"),
        (
            {"retention.bytes": "100", "local.retention.bytes": "101"},
            "not be more than retention.bytes",
        ),
        ({"local.retention.ms": "-3"}, "local.retention.ms"),
    ],
)
def test_tiered_topic_checks(props: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        LogConfig.from_props({"remote.storage.enable": "true", **props})


def test_checks_apply_only_to_tiered_topics() -> None:
    LogConfig.from_props({"cleanup.policy": "compact", "local.retention.ms": "-1"})
    LogConfig.from_props(
        {"remote.storage.enable": "true", "retention.ms": "-1", "local.retention.ms": "-1"}
    )
    LogConfig.from_props(
        {"remote.storage.enable": "true", "retention.bytes": "100", "local.retention.bytes": "100"}
    )


def test_manager_refuses_tiered_topics_when_the_broker_has_no_store(tmp_path: Path) -> None:
    manager = LogManager(tmp_path / "off")
    manager.open()
    try:
        with pytest.raises(InvalidConfig, match="Tiered Storage functionality is disabled"):
            manager.create_topic("t", 1, {"remote.storage.enable": "true"})
        manager.create_topic("t", 1)
        with pytest.raises(InvalidConfig, match="disabled in the broker"):
            manager.alter_topic_config("t", {"remote.storage.enable": "true"})
    finally:
        manager.close()
    manager = LogManager(tmp_path / "on", remote_storage_system_enable=True)
    manager.open()
    try:
        manager.create_topic("t", 1, {"remote.storage.enable": "true"})
        with pytest.raises(InvalidConfig, match="compacted"):
            manager.alter_topic_config("t", {"cleanup.policy": "compact"})
        with pytest.raises(InvalidConfig, match="invalid to disable remote storage"):
            manager.alter_topic_config("t", {"remote.storage.enable": "false"})
        assert manager.topic_config("t").remote_storage_enable
    finally:
        manager.close()


def test_broker_keys(tmp_path: Path) -> None:
    config = BrokerConfig.from_props({}, data_dir=tmp_path)
    assert config.remote_store_settings is None
    config = BrokerConfig.from_props(
        {
            "remote.log.storage.system.enable": "true",
            "tidelog.remote.storage.endpoint": "http://127.0.0.1:9000",
            "tidelog.remote.storage.bucket": "history",
            "tidelog.remote.storage.prefix": "prod/tidelog",
            "tidelog.remote.storage.path.style": "false",
            "log.local.retention.bytes": "1048576",
        },
        data_dir=tmp_path,
    )
    settings = config.remote_store_settings
    assert settings is not None
    assert (settings.bucket, settings.endpoint, settings.prefix, settings.path_style) == (
        "history",
        "http://127.0.0.1:9000",
        "prod/tidelog",
        False,
    )
    assert config.log_config.local_retention_bytes == 1048576
    with pytest.raises(InvalidConfig, match="needs a bucket"):
        BrokerConfig.from_props({"remote.log.storage.system.enable": "true"}, data_dir=tmp_path)
    with pytest.raises(InvalidConfig, match="not an S3 bucket name"):
        BrokerConfig.from_props(
            {"remote.log.storage.system.enable": "true", "tidelog.remote.storage.bucket": "No_Way"},
            data_dir=tmp_path,
        )
    with pytest.raises(InvalidConfig, match="http"):
        BrokerConfig.from_props(
            {
                "remote.log.storage.system.enable": "true",
                "tidelog.remote.storage.bucket": "abc",
                "tidelog.remote.storage.endpoint": "ftp://x",
            },
            data_dir=tmp_path,
        )


def test_credentials_from_file_or_environment(tmp_path: Path) -> None:
    ini = tmp_path / "credentials"
    ini.write_text("[default]\naws_access_key_id = AK\naws_secret_access_key = SK\n")
    assert load_credentials(str(ini), {}) is not None
    found = load_credentials(str(ini), {"AWS_ACCESS_KEY_ID": "env"})
    assert found is not None and found.access_key_id == "AK"  # the file wins
    env = load_credentials("", {"AWS_ACCESS_KEY_ID": "E", "AWS_SECRET_ACCESS_KEY": "S"})
    assert env is not None and (env.access_key_id, env.secret_access_key) == ("E", "S")
    assert load_credentials("", {}) is None
    plain = tmp_path / "plain"
    plain.write_text("aws_access_key_id=A2\naws_secret_access_key=S2\n")
    assert load_credentials(str(plain), {}).access_key_id == "A2"  # type: ignore[union-attr]
    with pytest.raises(InvalidConfig, match=r"no \[other\] profile"):
        load_credentials(str(ini), {}, profile="other")
    with pytest.raises(InvalidConfig, match="needs aws_access_key_id"):
        (tmp_path / "bad").write_text("[default]\naws_access_key_id = A\n")
        load_credentials(str(tmp_path / "bad"), {})
    with pytest.raises(InvalidConfig, match="missing"):
        load_credentials(str(tmp_path / "missing"), {})
