"""What a peer that has not logged in may take (issue 38 #1, #2), on a real in-process broker.

Raw TCP peers play the attacker; the logged-in client is our own trio client, and
what is checked is behaviour: the attacker's connection closed with its stated
reason, the shared budget untouched, the logged-in client served.
"""

from __future__ import annotations

import struct
import time
from pathlib import Path
from typing import Any

import trio

from protocol.batch import encode_batch
from tests.broker.security.conftest import add_user
from tidelog.aio import open_client
from tidelog.security import Security

SASL = "listeners=SASL_PLAINTEXT://127.0.0.1:0"
LENGTH = struct.Struct(">I")
ANNOUNCED_BYTES = 100 * 1024 * 1024
# The first bytes of a frame announcing ANNOUNCED_BYTES: msgpack's (a fixmap) and
# Kafka's (a Produce v9 header), each enough for the broker to tell them apart.
ATTACK_HEADERS = (
    LENGTH.pack(ANNOUNCED_BYTES) + b"\x84",
    LENGTH.pack(ANNOUNCED_BYTES) + b"\x00\x00\x00\x09",
)
ATTACKERS_PER_PROTOCOL = 3
# Far above the few milliseconds these take: a "does not hang" bound.
GENEROUS_S = 5.0


def alice() -> Security:
    return Security(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password="pw-alice",
    )


def closed_count(handle: Any, reason: str) -> float:
    closed = handle.context.metrics.get("tidelog_connections_closed")
    return float(closed.labels(reason)._value.get())


async def read_to_eof(stream: trio.SocketStream) -> bytes:
    got = b""
    while data := await stream.receive_some(65536):
        got += data
    return got


async def test_a_frame_announced_over_the_pre_login_cap_closes_the_connection(
    secured_broker: Any, tmp_path: Path
) -> None:
    add_user(tmp_path / "data", "alice", "pw-alice")
    sets = (SASL, "queued.max.request.bytes=8388608", "socket.request.read.timeout.ms=120000")
    async with (
        secured_broker(*sets) as handle,
        open_client(f"{handle.host}:{handle.port}", security=alice()) as client,
    ):
        await client.create_topic("orders")
        batch = encode_batch([(None, b"v" * 100, (), None)], now_ms=int(time.time() * 1000))
        await client.produce("orders", 0, batch)
        attackers = []
        for header in ATTACK_HEADERS:
            for _ in range(ATTACKERS_PER_PROTOCOL):
                stream = await trio.open_tcp_stream(handle.host, handle.port)
                await stream.send_all(header)
                attackers.append(stream)
        with trio.fail_after(GENEROUS_S):  # closed, not held until the read timeout
            for stream in attackers:
                await read_to_eof(stream)
                await stream.aclose()
        assert closed_count(handle, "frame_before_login") == len(attackers)
        assert handle.context.memory.statistics().peak_bytes < ANNOUNCED_BYTES
        with trio.fail_after(GENEROUS_S):
            assert len((await client.fetch("orders", 0, 0)).records) > 0


async def test_a_logged_in_client_may_send_frames_over_the_pre_login_cap(
    secured_broker: Any, tmp_path: Path
) -> None:
    add_user(tmp_path / "data", "alice", "pw-alice")
    async with (
        secured_broker(SASL, "sasl.server.max.receive.size=1024") as handle,
        open_client(f"{handle.host}:{handle.port}", security=alice()) as client,
    ):
        await client.create_topic("orders")
        value = b"v" * 4096  # a frame over the cap, after the login
        batch = encode_batch([(None, value, (), None)], now_ms=int(time.time() * 1000))
        await client.produce("orders", 0, batch)
        assert (await client.fetch("orders", 0, 0)).records
