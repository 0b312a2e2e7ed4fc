"""The raw Redis client against a real redis-server (Debian's; skipped where absent)."""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from bench.peers.redis_peer import RawRedisClient, RedisServer
from bench.peers.resp import RespError

pytestmark = pytest.mark.skipif(
    shutil.which("redis-server") is None,
    reason="redis-server is not installed (the bench installs it; CI need not)",
)


@pytest.fixture
def client(tmp_path: Path) -> Iterator[RawRedisClient]:
    server = RedisServer(tmp_path)
    c = RawRedisClient(server.port)
    try:
        yield c
    finally:
        c.close()
        server.stop()
    assert server.process.proc.returncode is not None


def test_produce_then_consume_round_trips_every_record(client: RawRedisClient) -> None:
    values = [bytes([i % 256]) * 100 for i in range(1000)]
    client.setup("s", durable=False)
    assert client.produce("s", values, 2500, time.perf_counter() + 60) == 2000  # whole pipelines
    assert client.consume("s", 10_000) == 2000
    first = client.conn.call("XRANGE", "s", "-", "+", "COUNT", 2)
    assert isinstance(first, list)
    assert [entry[1] for entry in first] == [[b"v", values[0]], [b"v", values[1]]]
    assert client.conn.call("XLEN", "s") == 2000
    client.produce_one("s", values[5])
    assert client.conn.call("XLEN", "s") == 2001
    client.teardown("s")
    assert client.conn.call("EXISTS", "s") == 0


def test_durable_setup_switches_fsync_policy(client: RawRedisClient) -> None:
    client.setup("s", durable=True)
    assert client.conn.call("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"always"]
    client.teardown("s")
    assert client.conn.call("CONFIG", "GET", "appendfsync") == [b"appendfsync", b"everysec"]


def test_an_error_reply_inside_a_pipeline_is_raised(client: RawRedisClient) -> None:
    client.conn.call("SET", "s", "not a stream")
    with pytest.raises(RespError, match="WRONGTYPE"):
        client.produce("s", [b"x" * 10] * 10, 10, time.perf_counter() + 60)
