"""Memory is bounded broker-wide, not per connection (issue 23 #6), on the real broker.

Clients pipeline large requests and never read; the broker's RSS must stay within its
`queued.max.request.bytes` budget plus a fixed slack, a long poll must not pin the
frames queued behind it once the client is gone, and the memory must come back.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import msgpack
import pytest

from protocol.batch import encode_batch
from tests.conftest import BrokerProcess, start_broker
from tests.integration.wire import WireClient
from tests.reliability.harness import rss_bytes, wait_until

BUDGET_BYTES = 64 * 1024 * 1024
# What the broker may hold above its baseline besides the budget: interpreter and
# allocator overhead, per-connection receive buffers, decoded copies in flight.
SLACK_BYTES = 128 * 1024 * 1024
CONNECTIONS = 8
FRAME_BYTES = 8 * 1024 * 1024
LENGTH = struct.Struct(">I")


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path / "data",
        f"queued.max.request.bytes={BUDGET_BYTES}",
        "socket.request.max.bytes=16777216",
    )
    with WireClient(process.address) as client:
        client.create_topic("big", 1, max_message_bytes=FRAME_BYTES + 1024)
        client.create_topic("idle", 1)
        value = b"x" * (1024 * 1024 - 200)
        for _ in range(12):
            batch = encode_batch([(None, value, (), None)], now_ms=int(time.time() * 1000))
            assert client.produce("big", batch)["error"] is None
        assert len(client.fetch("big", 0, max_bytes=FRAME_BYTES)["records"]) > FRAME_BYTES // 2
    yield process
    assert process.stop() == 0, process.output()[-3000:]


def _frame(request_id: int, api: str, body: dict) -> bytes:
    raw = msgpack.packb({"api": api, "v": 1, "id": request_id, "body": body}, use_bin_type=True)
    return LENGTH.pack(len(raw)) + raw


def _connect(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection(broker.address, timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # we never read
    return sock


def _peak_rss(pid: int, seconds: float) -> int:
    peak, deadline = 0, time.monotonic() + seconds
    while time.monotonic() < deadline:
        peak = max(peak, rss_bytes(pid))
        time.sleep(0.05)
    return peak


def test_pipelined_fetches_never_read_stay_within_the_budget(broker: BrokerProcess) -> None:
    pid = broker.proc.pid
    baseline = rss_bytes(pid)
    fetch = {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": FRAME_BYTES,
        "topics": [
            {
                "topic": "big",
                "partitions": [{"partition": 0, "offset": 0, "max_bytes": FRAME_BYTES}],
            }
        ],
    }
    socks = [_connect(broker) for _ in range(CONNECTIONS * 5)]
    try:
        for sock in socks:
            sock.sendall(b"".join(_frame(i, "fetch", fetch) for i in range(32)))
        peak = _peak_rss(pid, 4.0)
        # Neighbours are still served while the abusers hold the budget.
        with WireClient(broker.address, timeout_s=30) as neighbour:
            assert neighbour.call("api_versions", {})["error"] is None
    finally:
        for sock in socks:
            sock.close()
    print(f"fetch abuse: baseline {baseline >> 20} MiB, peak {peak >> 20} MiB")
    assert peak - baseline < BUDGET_BYTES + SLACK_BYTES, (baseline >> 20, peak >> 20)


def test_a_long_poll_does_not_pin_frames_behind_it_after_a_disconnect(
    broker: BrokerProcess,
) -> None:
    pid = broker.proc.pid
    baseline = rss_bytes(pid)
    long_poll = {
        "max_wait_ms": 60_000,
        "min_bytes": 1,
        "max_bytes": 1024,
        "topics": [
            {"topic": "idle", "partitions": [{"partition": 0, "offset": 0, "max_bytes": 1024}]}
        ],
    }
    filler = {"topics": ["idle"], "padding": b"\0" * (FRAME_BYTES - 1024)}
    socks = [_connect(broker) for _ in range(CONNECTIONS)]
    try:
        for sock in socks:
            sock.sendall(_frame(0, "fetch", long_poll))
        frames = [_frame(i, "metadata", filler) for i in range(1, 16)]
        for sock in socks:
            sock.settimeout(2.0)
            try:
                for frame in frames:
                    sock.sendall(frame)
            except TimeoutError:
                pass  # the broker stopped reading us: TCP pushes back
        peak = _peak_rss(pid, 3.0)
        # One more client whose frames were all delivered, then closes normally (FIN).
        polite = _connect(broker)
        polite.sendall(_frame(0, "fetch", long_poll) + _frame(1, "metadata", {"topics": []}))
        time.sleep(0.5)
        polite.close()
    finally:
        # The abusers' frames are stuck in TCP (the broker stopped reading them), so a
        # FIN could not reach the broker behind them: they go as a killed client does
        # whose kernel resets the connection.
        for sock in socks:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            sock.close()
    print(f"long poll + frames: baseline {baseline >> 20} MiB, peak {peak >> 20} MiB")
    assert peak - baseline < BUDGET_BYTES + SLACK_BYTES, (baseline >> 20, peak >> 20)
    # The clients are gone: their long polls end and the memory comes back, well
    # before the 60 s wait would have.
    assert wait_until(lambda: not _open_client_connections(broker), 10), "connections linger"
    assert wait_until(lambda: rss_bytes(pid) - baseline < SLACK_BYTES, 10), (
        baseline >> 20,
        rss_bytes(pid) >> 20,
    )


def _open_client_connections(broker: BrokerProcess) -> int:
    port = broker.address[1]
    count = 0
    with open("/proc/net/tcp") as table:
        for line in list(table)[1:]:
            local, state = line.split()[1], line.split()[3]
            # ESTABLISHED or CLOSE_WAIT: the broker still holds the connection.
            if int(local.split(":")[1], 16) == port and state in ("01", "08"):
                count += 1
    return count
