"""Socket-level abuse of a real broker (docs/reliability.md BI-02, BI-03, BI-04, BI-06..BI-08).

Every case runs against one broker process; after each, the abusive sockets are
closed and the broker's open file descriptors must come back to their baseline,
its memory must stay within a bound, and a well-behaved neighbour must still be
served correctly. The neighbour's latency during the abuse is measured and printed
next to its baseline (a JSON line); timings are recorded, never asserted (house rule).
"""

from __future__ import annotations

import gzip
import json
import socket
import struct
import threading
import time
from collections.abc import Iterator

import msgpack
import pytest

from protocol.batch import HEADER, encode_batch
from tests.conftest import BrokerProcess, start_broker
from tests.integration.wire import WireClient, batch
from tests.reliability.harness import open_fds, rss_bytes, wait_until
from tidelog.client import Client

# Small limits so the abuse reaches them quickly.
MAX_FRAME_BYTES = 1024 * 1024
MAX_CONNECTIONS = 100
SETTINGS = (
    f"socket.request.max.bytes={MAX_FRAME_BYTES}",
    f"max.connections={MAX_CONNECTIONS}",
    "connections.max.idle.ms=60000",
)
# Descriptors a broker may hold above its baseline once the abusers are gone
# (segment files opened on demand, the odd connection still closing).
FD_SLACK = 8
# Memory a broker may keep after the abuse (allocator caches, not leaks).
RSS_SLACK_BYTES = 64 * 1024 * 1024
LENGTH = struct.Struct(">I")


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("abuse") / "data", *SETTINGS)
    with Client(process.bootstrap) as client:
        client.create_topic("abuse", 2)
        client.create_topic("neighbour", 1)
    yield process
    assert process.stop() == 0, process.output()[-3000:]


class Neighbour:
    """A well-behaved client that produces and reads back in a loop, timing each round."""

    def __init__(self, bootstrap: str) -> None:
        self.client = Client(bootstrap, request_timeout_ms=60_000)
        self.latencies_s: list[float] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with self.client:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    result = self.client.produce("neighbour", 0, batch(b"hello"), acks=1)
                    fetched = self.client.fetch("neighbour", 0, result.base_offset)
                    assert fetched.records, "neighbour could not read its own record"
                except Exception as exc:
                    self.errors.append(repr(exc))
                    return
                self.latencies_s.append(time.perf_counter() - started)
                time.sleep(0.005)

    def __enter__(self) -> Neighbour:
        self.client.connect()  # before any abuse, so it is not the connection over the limit
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(30)


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] if ordered else 0.0


def measure_baseline(broker: BrokerProcess) -> tuple[int, int, float]:
    with Neighbour(broker.bootstrap) as neighbour:
        wait_until(lambda: len(neighbour.latencies_s) >= 50, 30)
    assert not neighbour.errors
    return open_fds(broker.proc.pid), rss_bytes(broker.proc.pid), p99(neighbour.latencies_s)


def under_abuse(broker: BrokerProcess, name: str, abuse: callable) -> None:  # type: ignore[valid-type]
    """Run `abuse()` beside a neighbour; then check fds, memory and the neighbour."""
    fds_before, rss_before, baseline_p99 = measure_baseline(broker)
    with Neighbour(broker.bootstrap) as neighbour:
        abuse()
        wait_until(lambda: len(neighbour.latencies_s) >= 20, 30)
    assert broker.proc.poll() is None, "broker died:\n" + broker.output()[-3000:]
    assert not neighbour.errors, neighbour.errors
    assert neighbour.latencies_s, "the neighbour was never served"
    pid = broker.proc.pid
    assert wait_until(lambda: open_fds(pid) <= fds_before + FD_SLACK, 20, 0.1), (
        f"fds {open_fds(pid)} vs baseline {fds_before}"
    )
    rss_after = rss_bytes(pid)
    assert rss_after - rss_before < RSS_SLACK_BYTES, (rss_before, rss_after)
    print(
        json.dumps(
            {
                "case": name,
                "neighbour_p99_ms": round(p99(neighbour.latencies_s) * 1000, 2),
                "baseline_p99_ms": round(baseline_p99 * 1000, 2),
                "rss_growth_bytes": rss_after - rss_before,
            }
        )
    )


def frame(obj: object) -> bytes:
    body = msgpack.packb(obj, use_bin_type=True)
    return LENGTH.pack(len(body)) + body


def request(api: str, body: dict, **extra: object) -> dict:
    return {"api": api, "v": 1, "id": 1, "body": body, **extra}


BAD_VALUES = [
    pytest.param(
        request(
            "fetch",
            {"topics": [{"topic": "abuse", "partitions": [{"partition": 0, "offset": True}]}]},
        ),
        "INVALID_REQUEST",
        id="true-for-int",
    ),
    pytest.param(
        request(
            "fetch",
            {"topics": [{"topic": "abuse", "partitions": [{"partition": 0, "offset": 2**63}]}]},
        ),
        "INVALID_REQUEST",
        id="offset-2^63",
    ),
    pytest.param(
        request(
            "fetch",
            {"topics": [{"topic": "abuse", "partitions": [{"partition": 0, "offset": 1.5}]}]},
        ),
        "INVALID_REQUEST",
        id="float-offset",
    ),
    pytest.param(request("fetch", {"topics": "abuse"}), "INVALID_REQUEST", id="str-for-list"),
    pytest.param({"api": "fetch", "v": 1, "body": {}}, "INVALID_REQUEST", id="missing-id"),
    pytest.param(request("nope", {}), "INVALID_REQUEST", id="unknown-api"),
    pytest.param({**request("metadata", {}), "v": 999}, "UNSUPPORTED_VERSION", id="v-999"),
    pytest.param({**request("metadata", {}), "id": True}, "INVALID_REQUEST", id="true-for-id"),
    pytest.param(
        request(
            "produce",
            {
                "acks": 1,
                "timeout_ms": 1000,
                "topics": [{"topic": "abuse", "partitions": [{"partition": 0, "records": 5}]}],
            },
        ),
        "INVALID_REQUEST",
        id="int-for-bin",
    ),
    pytest.param(request("create_topic", {"topic": "../escape"}), None, id="topic-traversal"),
]


@pytest.mark.parametrize(("obj", "code"), BAD_VALUES)
def test_malformed_requests_get_their_error_and_the_connection_stays(
    broker: BrokerProcess, obj: dict, code: str | None
) -> None:
    with WireClient(broker.address, timeout_s=20) as wire:
        wire.send_obj(obj)
        response = wire.recv()
        assert response is not None
        if code is None:  # a per-topic rule, not a shape error
            assert response["error"] == "INVALID_TOPIC_EXCEPTION", response
        else:
            assert response["error"] == code, response
        assert wire.ok("metadata", {"topics": None}) is not None  # still open
    assert not (broker.data_dir.parent / "escape").exists()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(LENGTH.pack(5) + b"\xc1\xc1\xc1\xc1\xc1", id="not-msgpack"),
        pytest.param(frame([1, 2, 3]), id="not-a-map"),
        pytest.param(LENGTH.pack(5001) + b"\x91" * 5000 + b"\xc0", id="nesting-bomb"),
        pytest.param(LENGTH.pack(MAX_FRAME_BYTES + 1), id="oversize-header"),
        pytest.param(LENGTH.pack(2**32 - 1), id="length-2^32-1"),
    ],
)
def test_unreadable_frames_are_answered_then_closed(broker: BrokerProcess, payload: bytes) -> None:
    with WireClient(broker.address, timeout_s=20) as wire:
        wire.send_raw(payload)
        response = wire.recv()
        assert response is not None and response["error"] == "INVALID_REQUEST", response
        assert wire.is_closed_by_peer()


def test_decompression_bomb_is_refused_per_partition(broker: BrokerProcess) -> None:
    """A small gzip batch inflating past the cap: CORRUPT_MESSAGE, neighbours unaffected."""
    inflated = msgpack.packb([[0, 0, None, b"\0" * (80 << 20), []]], use_bin_type=True)
    bomb = bytearray(encode_batch([(None, b"x", [], 1_700_000_000_000)]))
    payload = gzip.compress(inflated, compresslevel=9)
    header = list(HEADER.unpack_from(bomb, 0))
    header[1] = HEADER.size + len(payload) - 12  # batch_length
    header[4] = 1  # attributes: gzip
    out = bytearray(HEADER.pack(*header) + payload)
    import crc32c

    struct.pack_into(">I", out, 13, crc32c.crc32c(bytes(out[17:])))
    with WireClient(broker.address, timeout_s=30) as wire:
        body = wire.ok(
            "produce",
            {
                "acks": 1,
                "timeout_ms": 5000,
                "topics": [
                    {
                        "topic": "abuse",
                        "partitions": [
                            {"partition": 0, "records": bytes(out)},
                            {"partition": 1, "records": batch(b"fine")},
                        ],
                    }
                ],
            },
        )
    parts = {p["partition"]: p for p in body["topics"][0]["partitions"]}
    assert parts[0]["error"] == "CORRUPT_MESSAGE", parts[0]
    assert parts[1]["error"] is None


def test_truncated_frames_then_eof(broker: BrokerProcess) -> None:
    def abuse() -> None:
        for payload in (LENGTH.pack(100)[:2], LENGTH.pack(100), LENGTH.pack(100) + b"\x80" * 50):
            with socket.create_connection(broker.address, timeout=10) as sock:
                sock.sendall(payload)
                sock.shutdown(socket.SHUT_WR)
                assert sock.recv(100) == b""  # closed quietly, no answer

    under_abuse(broker, "truncated-frames", abuse)


def test_pipelined_requests_never_read(broker: BrokerProcess) -> None:
    """100,000 small requests sent without reading a byte: memory stays bounded."""
    one = frame(request("metadata", {"topics": ["abuse"]}))
    sent = [0]

    def abuse() -> None:
        sock = socket.create_connection(broker.address, timeout=10)
        sock.setblocking(False)
        data = one * 100_000
        view = memoryview(data)
        deadline = time.monotonic() + 10
        try:
            while view and time.monotonic() < deadline:
                try:
                    n = sock.send(view[: 1 << 16])
                except BlockingIOError:
                    time.sleep(0.01)
                    continue
                view = view[n:]
            sent[0] = len(data) - len(view)
            time.sleep(1.0)  # the broker holds what it read; the kernel buffers fill
        finally:
            sock.close()

    under_abuse(broker, "pipelined-never-read", abuse)
    assert sent[0] > 0


def test_slowloris_and_silent_connections(broker: BrokerProcess) -> None:
    def abuse() -> None:
        socks = [socket.create_connection(broker.address, timeout=10) for _ in range(40)]
        try:
            for step in range(3):
                for sock in socks[:20]:  # trickle one byte of a frame header
                    sock.sendall(LENGTH.pack(64)[step : step + 1])
                time.sleep(0.3)
        finally:
            for sock in socks:
                sock.close()

    under_abuse(broker, "slowloris", abuse)


def test_connection_flood_and_churn(broker: BrokerProcess) -> None:
    over_limit = [0]

    def abuse() -> None:
        socks = []
        try:
            for _ in range(MAX_CONNECTIONS + 30):
                socks.append(socket.create_connection(broker.address, timeout=10))
            # Past max.connections the broker closes new connections at once.
            for sock in socks[-10:]:
                sock.settimeout(10)
                try:
                    if sock.recv(1) == b"":
                        over_limit[0] += 1
                except ConnectionResetError:
                    over_limit[0] += 1
        finally:
            for sock in socks:
                sock.close()
        for _ in range(2000):  # churn
            with socket.create_connection(broker.address, timeout=10):
                pass

    under_abuse(broker, "flood-and-churn", abuse)
    assert over_limit[0] == 10
