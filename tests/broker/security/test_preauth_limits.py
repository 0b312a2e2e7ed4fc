"""What a peer that has not logged in may take (issue 38 #1, #2), on a real in-process broker.

Raw TCP peers play the attacker; the logged-in client is our own trio client, and
what is checked is behaviour: the attacker's connection closed with its stated
reason, the shared budget untouched, the logged-in client served.
"""

from __future__ import annotations

import errno
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from broker.security.accept import ACCEPT_REPORT_INTERVAL_S, serve_listener
from broker.security.tls import client_context
from protocol.batch import encode_batch
from tests.broker.security.conftest import Pki, add_user
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


async def _held_open(stream: trio.SocketStream) -> bool:
    """Whether the broker keeps `stream` open for a while (a refused one reads EOF)."""
    with trio.move_on_after(0.5):
        return await stream.receive_some(10) != b""
    return True


@pytest.mark.parametrize(
    ("limit", "reason"),
    [("max.connections=3", "limit"), ("max.connections.per.ip=3", "ip_limit")],
)
async def test_tls_handshakes_in_progress_count_against_the_connection_limits(
    secured_broker: Any, pki: Pki, limit: str, reason: str
) -> None:
    async with secured_broker("listeners=SASL_SSL://127.0.0.1:0", *pki.tls_sets(), limit) as handle:
        pending = [await trio.open_tcp_stream(handle.host, handle.port) for _ in range(3)]
        for stream in pending:  # a TCP connection that never starts its handshake
            assert await _held_open(stream)
        extra = await trio.open_tcp_stream(handle.host, handle.port)
        with trio.fail_after(GENEROUS_S):  # refused at accept, not after a handshake
            assert await extra.receive_some(10) == b""
        await extra.aclose()
        assert closed_count(handle, reason) == 1
        for stream in pending:
            await stream.aclose()
        context = client_context(str(pki.ca_file))
        with trio.fail_after(GENEROUS_S):  # their slots come back once they close
            while True:
                tcp = await trio.open_tcp_stream(handle.host, handle.port)
                tls = trio.SSLStream(tcp, context, server_hostname="localhost")
                try:
                    await tls.do_handshake()
                    break
                except trio.BrokenResourceError:
                    await trio.sleep(0.05)
        await tls.aclose()


class _OutOfDescriptors(trio.abc.Listener[trio.SocketStream]):
    """A listener whose accept always fails as the kernel's does at the descriptor limit."""

    def __init__(self) -> None:
        self.accepts = 0

    async def accept(self) -> trio.SocketStream:
        self.accepts += 1
        await trio.lowlevel.checkpoint()
        raise OSError(errno.EMFILE, "Too many open files")

    async def aclose(self) -> None:
        await trio.lowlevel.checkpoint()


async def test_accept_backs_off_and_reports_once_per_interval_when_out_of_descriptors(
    autojump_clock: trio.testing.MockClock,
) -> None:
    listener = _OutOfDescriptors()
    reports: list[int] = []

    async def never_called(stream: trio.SocketStream) -> None:
        raise AssertionError("no connection was accepted")

    seconds = 3 * ACCEPT_REPORT_INTERVAL_S
    async with trio.open_nursery() as nursery:
        report = lambda exc, failures: reports.append(failures)  # noqa: E731
        nursery.start_soon(serve_listener, listener, never_called, nursery, report)
        await trio.sleep(seconds - 0.5)
        nursery.cancel_scope.cancel()
    # A retry every 100 ms (trio's serve_listeners) would be 300 accepts and reports.
    assert listener.accepts < seconds
    assert len(reports) == 3
