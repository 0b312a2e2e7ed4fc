"""What clients that never log in can take from one that has (issue 38, acceptance).

One broker process with a SASL_SSL listener and small limits. While a logged-in
client produces and fetches in a loop, unauthenticated peers work at the limits:
TCP connections that never start their TLS handshake (more than the connection
limits allow), connections that finish it and announce 100 MB frames, and ones that
send a large zstd-compressed Kafka Produce of many tiny records before any login.
Every request of the logged-in client must complete (each within a generous bound,
far above the few milliseconds it takes: the measured p99 is printed, never
asserted), and the broker's RSS must stay under its budget plus a stated allowance.
`TIDELOG_SOAK_PREAUTH_S` sets how long the abuse runs.
"""

from __future__ import annotations

import os
import socket
import ssl
import struct
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import zstandard

from protocol.batch import encode_batch
from protocol.kafka.codec import RequestHeader, encode_request
from tests.broker.security.conftest import Pki, add_user, make_pki
from tests.conftest import BrokerProcess, start_broker
from tests.reliability.harness import rss_bytes
from tidelog import Client, Security

ABUSE_S = float(os.environ.get("TIDELOG_SOAK_PREAUTH_S", "8"))
BUDGET_BYTES = 64 * 1024 * 1024
# Above the baseline besides the budget: the TLS and read buffers of refused peers
# until a trim collects them, socket buffers, allocator overhead (measured: ~80 MiB).
ALLOWANCE_BYTES = 128 * 1024 * 1024
MAX_CONNECTIONS = 100
MAX_PER_IP = 50
# Loopback addresses the attackers connect from (the logged-in client: 127.0.0.1), so
# the per-address limit is reached by the pending handshakes and not by the others.
PENDING_FROM = "127.0.0.2"
ATTACKERS_FROM = "127.0.0.3"
# More TCP connections than the limits admit, none of them starting a handshake.
PENDING_HANDSHAKES = 120
# Far above the few milliseconds each takes: a "does not hang" bound.
GENEROUS_S = 5.0
LENGTH = struct.Struct(">I")
TOPIC = "paid"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[tuple[BrokerProcess, Pki]]:
    pki = make_pki(tmp_path / "pki")
    data = tmp_path / "data"
    add_user(data, "alice", "pw-alice")
    process = start_broker(
        data,
        "listeners=SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        *pki.tls_sets(),
        f"queued.max.request.bytes={BUDGET_BYTES}",
        f"max.connections={MAX_CONNECTIONS}",
        f"max.connections.per.ip={MAX_PER_IP}",
    )
    yield process, pki
    assert process.stop() == 0, process.output()[-3000:]


def kafka_record_batch(records: int) -> bytes:
    """A Kafka v2 batch of `records` tiny records, zstd-compressed (crc left 0: the
    broker must refuse it before it would look)."""
    # Zigzag varints: length 7, attributes, timestamp and offset deltas, a null key,
    # a one-byte value (random, so the batch stays big compressed), no headers.
    template = np.frombuffer(bytes([7 * 2, 0, 0, 0, 1, 2, 0, 0]), dtype=np.uint8)
    raw = np.tile(template, records)
    raw[6::8] = np.random.default_rng(38).integers(0, 256, records, dtype=np.uint8)
    body = zstandard.ZstdCompressor(level=3).compress(raw.tobytes())
    header = struct.pack(
        ">qiibIhiqqqhii", 0, 49 + len(body), -1, 2, 0, 4, records - 1, 0, 0, -1, -1, -1, records
    )
    return header + body


def kafka_produce(records: bytes) -> bytes:
    body = {
        "transactional_id": None,
        "acks": 1,
        "timeout_ms": 5000,
        "topic_data": [{"name": TOPIC, "partition_data": [{"index": 0, "records": records}]}],
    }
    return encode_request(RequestHeader(0, 7, 1, "preauth"), body)


def tls_connect(broker: BrokerProcess, pki: Pki) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=str(pki.ca_file))
    raw = socket.create_connection(broker.address, timeout=10, source_address=(ATTACKERS_FROM, 0))
    return context.wrap_socket(raw, server_hostname="localhost")


def until_closed(sock: socket.socket) -> None:
    try:
        while sock.recv(65536):
            pass
    except OSError:
        pass
    finally:
        sock.close()


def loop(
    stop: threading.Event, attack: Callable[[], None], counts: dict[str, int], name: str
) -> None:
    while not stop.is_set():
        try:
            attack()
            counts[name] = counts.get(name, 0) + 1
        except OSError:
            counts[name + "_refused"] = counts.get(name + "_refused", 0) + 1
            time.sleep(0.05)


def test_unauthenticated_peers_at_the_limits_leave_a_logged_in_client_served(
    broker: tuple[BrokerProcess, Pki],
) -> None:
    process, pki = broker
    security = Security(
        "SASL_SSL",
        ssl_cafile=str(pki.ca_file),
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password="pw-alice",
    )
    big_produce = kafka_produce(kafka_record_batch(6_000_000))
    small_produce = kafka_produce(kafka_record_batch(300_000))
    assert len(big_produce) > 512 * 1024 > len(small_produce)
    oversized = LENGTH.pack(100 * 1024 * 1024) + b"\x00\x00\x00\x07"

    def announce() -> None:
        sock = tls_connect(process, pki)
        sock.sendall(oversized)
        until_closed(sock)

    def compressed(frame: bytes) -> Callable[[], None]:
        def send() -> None:
            sock = tls_connect(process, pki)
            try:
                sock.sendall(frame)
            except OSError:
                pass  # closed after the header: the rest of it is refused
            until_closed(sock)

        return send

    latencies: list[float] = []
    with Client(process.bootstrap, security=security) as client:
        client.create_topic(TOPIC)
        pid = process.proc.pid
        baseline = peak = rss_bytes(pid)
        pending = []
        for _ in range(PENDING_HANDSHAKES):
            try:
                sock = socket.create_connection(
                    process.address, timeout=10, source_address=(PENDING_FROM, 0)
                )
                pending.append(sock)
            except OSError:
                break
        stop = threading.Event()
        counts: dict[str, int] = {}
        attacks = [("announce", announce), ("big_zstd", compressed(big_produce))]
        attacks += [("small_zstd", compressed(small_produce))]
        threads = [
            threading.Thread(target=loop, args=(stop, attack, counts, name), daemon=True)
            for name, attack in attacks
            for _ in range(2)
        ]
        for thread in threads:
            thread.start()
        try:
            deadline = time.monotonic() + ABUSE_S
            offset = 0
            while time.monotonic() < deadline:
                now_ms = int(time.time() * 1000)
                started = time.monotonic()
                client.produce(TOPIC, 0, encode_batch([(None, b"v" * 200, (), now_ms)]))
                latencies.append(time.monotonic() - started)
                started = time.monotonic()
                fetched = client.fetch(TOPIC, 0, offset)
                latencies.append(time.monotonic() - started)
                assert fetched.records
                offset += 1
                peak = max(peak, rss_bytes(pid))
        finally:
            stop.set()
            for thread in threads:
                thread.join(timeout=30)
            for sock in pending:
                sock.close()
    latencies.sort()
    p99 = latencies[min(len(latencies) - 1, len(latencies) * 99 // 100)]
    print(
        f"preauth abuse: {len(latencies)} requests, p99 {p99 * 1000:.0f} ms, "
        f"max {latencies[-1] * 1000:.0f} ms; RSS baseline {baseline >> 20} MiB, "
        f"peak {peak >> 20} MiB; pending handshakes held {len(pending)}; attacks {counts}"
    )
    assert latencies and latencies[-1] < GENEROUS_S
    assert peak - baseline < BUDGET_BYTES + ALLOWANCE_BYTES, (baseline >> 20, peak >> 20)
    assert counts.get("announce", 0) > 0 and counts.get("big_zstd", 0) > 0
