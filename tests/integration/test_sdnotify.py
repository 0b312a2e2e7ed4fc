"""systemd readiness: the real broker process tells a fake NOTIFY_SOCKET when it is ready
(after recovery, listeners bound) and when it starts stopping."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from broker.sdnotify import notify
from tests.conftest import BrokerFactory
from tidelog.client import Client

pytestmark = pytest.mark.integration


def test_ready_and_stopping_arrive_on_notify_socket(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    path = tmp_path / "notify.sock"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        listener.settimeout(30)
        broker = broker_factory(env={"NOTIFY_SOCKET": str(path)})
        ready = listener.recv(4096).decode()
        assert ready.splitlines()[0] == "READY=1"
        assert f":{broker.port}" in ready  # STATUS names the bound address
        with Client(broker.bootstrap) as client:  # READY means it serves
            assert client.api_versions()["apis"]
        assert broker.stop() == 0
        assert listener.recv(4096).decode() == "STOPPING=1"


def test_notify_is_a_no_op_outside_systemd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NOTIFY_SOCKET", raising=False)
    assert notify("READY=1") is False


def test_unreachable_notify_socket_is_logged_not_fatal(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("NOTIFY_SOCKET", str(tmp_path / "nobody-listens.sock"))
    assert notify("READY=1") is False
