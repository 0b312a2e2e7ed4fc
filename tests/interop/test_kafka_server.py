"""The real Kafka broker's lifecycle as the harness drives it: format, ready, stop."""

from __future__ import annotations

import os
import re
import socket
from pathlib import Path

import pytest

from interop.kafka_dist import kafka_classpath, kafka_version, libs_dir
from interop.kafka_server import KafkaServer, KafkaServerError, new_cluster_id
from interop.targets import Target, open_target

pytestmark = pytest.mark.interop


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_jars_come_from_the_pinned_version() -> None:
    assert kafka_classpath() == f"{libs_dir()}/*"
    assert (libs_dir() / f"kafka_2.13-{kafka_version()}.jar").is_file()
    assert (libs_dir() / f"kafka-tools-{kafka_version()}.jar").is_file()


def test_cluster_id_is_base64url_of_16_bytes() -> None:
    ids = {new_cluster_id() for _ in range(100)}
    assert len(ids) == 100
    assert all(re.fullmatch(r"[A-Za-z0-9_-]{22}", i) for i in ids)


def test_broker_serves_then_stops_leaving_no_jvm(tmp_path: Path) -> None:
    with KafkaServer(tmp_path) as server:
        pid = server.pid
        with socket.create_connection(("127.0.0.1", server.port), timeout=5):
            pass
        assert (tmp_path / "kafka-data" / "meta.properties").is_file()
        assert "process.roles=broker,controller" in server.properties_path.read_text()
    assert not _alive(pid)
    with pytest.raises(OSError), socket.create_connection(("127.0.0.1", server.port), timeout=2):
        pass


def test_a_bad_configuration_fails_with_the_brokers_own_message(tmp_path: Path) -> None:
    server = KafkaServer(tmp_path, overrides={"process.roles": "nonsense"})
    with pytest.raises(KafkaServerError, match="nonsense"):
        server.start()


def test_session_target_is_a_bootstrap_address_and_a_pid(kafka: Target) -> None:
    host, port = kafka.bootstrap.rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0
    assert kafka.name == "kafka" and _alive(kafka.pid)


def test_unknown_target_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown target 'redpanda'; known: kafka"):
        open_target("redpanda", tmp_path)
