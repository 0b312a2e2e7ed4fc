"""Clients that pipeline fetches and never read their answers (issue 38 #5), on the real broker.

Kafka connections (whose answers are converted in memory) and msgpack ones ask for
large fetches and never read. The broker's RSS must stay within its
`queued.max.request.bytes` budget plus a stated allowance, another consumer must be
served meanwhile, and the memory must go back to the OS once they leave.
"""

from __future__ import annotations

import socket
import struct
import time
from collections.abc import Iterator

import msgpack
import pytest

from protocol.batch import encode_batch
from protocol.kafka.codec import RequestHeader, encode_request
from tests.conftest import BrokerProcess, start_broker
from tests.integration.wire import WireClient
from tests.reliability.harness import rss_bytes, wait_until

BUDGET_BYTES = 64 * 1024 * 1024
# Above the baseline besides the budget: interpreter and allocator overhead, socket
# buffers, one answer being converted per worker thread.
ALLOWANCE_BYTES = 128 * 1024 * 1024
# RSS after the abusers leave may stay this far above the baseline (heap fragments).
RETURN_ALLOWANCE_BYTES = 48 * 1024 * 1024
FETCH_BYTES = 10 * 1024 * 1024
KAFKA_CONNECTIONS = 20
MSGPACK_CONNECTIONS = 10
PIPELINED = 30
ABUSE_S = 6.0
# Far above the milliseconds a fetch takes: a "does not hang" bound.
GENEROUS_S = 10.0
LENGTH = struct.Struct(">I")


@pytest.fixture
def broker(tmp_path) -> Iterator[BrokerProcess]:
    process = start_broker(
        tmp_path / "data",
        f"queued.max.request.bytes={BUDGET_BYTES}",
        "socket.request.max.bytes=16777216",
        "message.max.bytes=2097152",
    )
    with WireClient(process.address) as client:
        client.create_topic("big", 1)
        client.create_topic("other", 1)
        value = b"x" * (1024 * 1024 - 200)
        for _ in range(12):
            batch = encode_batch([(None, value, (), None)], now_ms=int(time.time() * 1000))
            assert client.produce("big", batch)["error"] is None
        small = encode_batch([(None, b"y" * 100, (), None)], now_ms=int(time.time() * 1000))
        assert client.produce("other", small)["error"] is None
    yield process
    assert process.stop() == 0, process.output()[-3000:]


def kafka_fetch(correlation_id: int) -> bytes:
    partition = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": FETCH_BYTES}
    body = {
        "replica_id": -1,
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": FETCH_BYTES,
        "isolation_level": 0,
        "topics": [{"topic": "big", "partitions": [partition]}],
    }
    return encode_request(RequestHeader(1, 4, correlation_id, "nonreader"), body)


def msgpack_fetch(request_id: int) -> bytes:
    partition = {"partition": 0, "offset": 0, "max_bytes": FETCH_BYTES}
    body = {
        "max_wait_ms": 0,
        "min_bytes": 0,
        "max_bytes": FETCH_BYTES,
        "topics": [{"topic": "big", "partitions": [partition]}],
    }
    raw = msgpack.packb({"api": "fetch", "v": 1, "id": request_id, "body": body})
    return LENGTH.pack(len(raw)) + raw


def nonreader(broker: BrokerProcess) -> socket.socket:
    sock = socket.create_connection(broker.address, timeout=30)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)  # we never read
    return sock


def test_clients_that_never_read_stay_within_the_budget_and_others_are_served(
    broker: BrokerProcess,
) -> None:
    pid = broker.proc.pid
    baseline = rss_bytes(pid)
    socks = []
    waits: list[float] = []
    peak = 0
    try:
        for _ in range(KAFKA_CONNECTIONS):
            socks.append(sock := nonreader(broker))
            sock.sendall(b"".join(kafka_fetch(i) for i in range(PIPELINED)))
        for _ in range(MSGPACK_CONNECTIONS):
            socks.append(sock := nonreader(broker))
            sock.sendall(b"".join(msgpack_fetch(i) for i in range(PIPELINED)))
        deadline = time.monotonic() + ABUSE_S
        with WireClient(broker.address, timeout_s=30) as consumer:
            while time.monotonic() < deadline:
                peak = max(peak, rss_bytes(pid))
                started = time.monotonic()
                answer = consumer.fetch("other", 0, max_bytes=1 << 20)
                waits.append(time.monotonic() - started)
                assert answer["error"] is None and answer["records"]
                peak = max(peak, rss_bytes(pid))
                time.sleep(0.05)
    finally:
        for sock in socks:
            sock.close()
    waits.sort()
    p99 = waits[min(len(waits) - 1, len(waits) * 99 // 100)]
    print(
        f"non-readers: baseline {baseline >> 20} MiB, peak {peak >> 20} MiB, "
        f"consumer fetches {len(waits)}, p99 {p99 * 1000:.0f} ms"
    )
    assert max(waits) < GENEROUS_S
    assert peak - baseline < BUDGET_BYTES + ALLOWANCE_BYTES, (baseline >> 20, peak >> 20)
    returned = wait_until(
        lambda: rss_bytes(pid) - baseline < RETURN_ALLOWANCE_BYTES, timeout_s=30, step_s=0.5
    )
    print(f"after they left: {rss_bytes(pid) >> 20} MiB")
    assert returned, (baseline >> 20, rss_bytes(pid) >> 20)
