"""Connection behaviour of the real broker: pipelining, acks 0, long polls, bad frames, limits."""

from __future__ import annotations

import socket
import struct
import threading
import time
import urllib.request
from collections.abc import Iterator

import msgpack
import pytest

from tests.conftest import BrokerFactory, BrokerProcess, start_broker
from tests.integration.wire import (
    WireClient,
    batch,
    fetch_body,
    offsets_of,
    values_of,
    wait_until,
)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def shared_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = start_broker(tmp_path_factory.mktemp("wire") / "data")
    yield broker
    assert broker.stop() == 0


def _assert_still_serving(broker: BrokerProcess) -> None:
    with WireClient(broker.address) as other:
        assert other.ok("api_versions", {})["server"] == "tidelog"


def test_pipelined_requests_are_answered_in_order(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as c:
        c.create_topic("pipe")
        ids = []
        frames = b""
        for i in range(60):
            if i % 3 == 0:
                api, body = "produce", {
                    "acks": 1,
                    "timeout_ms": 1000,
                    "topics": [{"topic": "pipe", "partitions": [
                        {"partition": 0, "records": batch(b"%d" % i)}]}],
                }  # fmt: skip
            elif i % 3 == 1:
                api, body = "fetch", fetch_body("pipe", 0)
            else:
                api, body = "metadata", {"topics": ["pipe"]}
            request_id, env = c.envelope(api, body)
            ids.append(request_id)
            payload = msgpack.packb(env, use_bin_type=True)
            frames += struct.pack(">I", len(payload)) + payload
        c.send_raw(frames)  # all 60 before reading anything
        responses = [c.recv() for _ in ids]
        assert [r["id"] for r in responses if r] == ids
        assert all(r["error"] is None for r in responses if r)
        produced = [r["body"]["topics"][0]["partitions"][0]["base_offset"] for r in responses[::3]]
        assert produced == list(range(20))


def test_acks_0_sends_no_response_but_appends(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as c:
        c.create_topic("fire")
        for i in range(5):
            c.send(
                "produce",
                {"acks": 0, "timeout_ms": 1000, "topics": [{"topic": "fire", "partitions": [
                    {"partition": 0, "records": batch(b"%d" % i)}]}]},
            )  # fmt: skip
        marker = c.send("api_versions", {})
        first = c.recv()
        assert first is not None and first["id"] == marker  # nothing came back for acks 0
        fetched = c.fetch("fire", 0)
        assert values_of(fetched["records"]) == [b"0", b"1", b"2", b"3", b"4"]


def test_long_poll_wakes_on_append(shared_broker: BrokerProcess) -> None:
    with (
        WireClient(shared_broker.address) as consumer,
        WireClient(shared_broker.address) as producer,
    ):
        producer.create_topic("poll")
        # Ten minutes: only an append can end this wait within the test's timeout.
        consumer.send("fetch", fetch_body("poll", 0, max_wait_ms=600_000, min_bytes=1))
        producer.produce("poll", batch(b"wake"))
        response = consumer.recv()
        assert response is not None and response["error"] is None
        part = response["body"]["topics"][0]["partitions"][0]
        assert values_of(part["records"]) == [b"wake"]


def test_long_poll_waits_for_min_bytes_across_appends(shared_broker: BrokerProcess) -> None:
    with (
        WireClient(shared_broker.address) as consumer,
        WireClient(shared_broker.address) as producer,
    ):
        producer.create_topic("poll-min")
        one = batch(b"x" * 100)
        consumer.send(
            "fetch", fetch_body("poll-min", 0, max_wait_ms=600_000, min_bytes=3 * len(one))
        )
        for _ in range(3):
            producer.produce("poll-min", one)
        response = consumer.recv()
        assert response is not None
        part = response["body"]["topics"][0]["partitions"][0]
        assert offsets_of(part["records"]) == [0, 1, 2]


def test_long_poll_times_out_empty(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as c:
        c.create_topic("quiet")
        part = c.fetch("quiet", 0, max_wait_ms=50, min_bytes=1)
        assert part["error"] is None and part["records"] == b"" and part["high_watermark"] == 0


def test_long_poll_on_one_connection_does_not_block_others(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as waiting:
        waiting.create_topic("blocked")
        waiting.send("fetch", fetch_body("blocked", 0, max_wait_ms=600_000, min_bytes=1))
        _assert_still_serving(shared_broker)
        with WireClient(shared_broker.address) as producer:
            producer.produce("blocked", batch(b"done"))
        assert waiting.recv() is not None


@pytest.mark.parametrize(
    "payload",
    [b"\xc1", b"\x92\x01", b"\x81\xa1a\xc1"],  # reserved byte; truncated array; bad value
    ids=["reserved-byte", "short-array", "bad-map-value"],
)
def test_undecodable_frame_gets_invalid_request_then_close(
    shared_broker: BrokerProcess, payload: bytes
) -> None:
    with WireClient(shared_broker.address) as c:
        c.send_raw(struct.pack(">I", len(payload)) + payload)
        response = c.recv()
        assert response is not None and response["error"] == "INVALID_REQUEST"
        assert response["id"] == -1
        assert c.is_closed_by_peer()
    _assert_still_serving(shared_broker)


@pytest.mark.parametrize(
    ("obj", "expected"),
    [([1, 2], "got array"), ("hello", "got str"), (42, "got int"), (None, "got nil")],
    ids=["array", "str", "int", "nil"],
)
def test_frame_that_is_not_a_map_is_answered_then_closed(
    shared_broker: BrokerProcess, obj: object, expected: str
) -> None:
    with WireClient(shared_broker.address) as c:
        c.send_obj(obj)
        response = c.recv()
        assert response is not None and response["error"] == "INVALID_REQUEST"
        assert response["message"].endswith(expected)
        assert c.is_closed_by_peer()
    _assert_still_serving(shared_broker)


def test_error_frame_is_answered_after_earlier_pipelined_requests(
    shared_broker: BrokerProcess,
) -> None:
    with WireClient(shared_broker.address) as c:
        first = c.send("api_versions", {})
        c.send_raw(struct.pack(">I", 1) + b"\xc1")
        assert c.recv()["id"] == first  # type: ignore[index]
        assert c.recv()["error"] == "INVALID_REQUEST"  # type: ignore[index]
        assert c.is_closed_by_peer()


@pytest.mark.parametrize(
    "data",
    [b"", b"\x00\x00", struct.pack(">I", 100), struct.pack(">I", 100) + b"\x80" * 99],
    ids=["nothing", "half-header", "header-only", "one-byte-short"],
)
def test_truncated_frames_close_quietly(shared_broker: BrokerProcess, data: bytes) -> None:
    sock = socket.create_connection(shared_broker.address, timeout=30)
    sock.sendall(data)
    sock.shutdown(socket.SHUT_WR)
    assert sock.recv(100) == b""  # closed without an answer
    sock.close()
    _assert_still_serving(shared_broker)


def test_oversize_frames_refused_before_reading_them(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("socket.request.max.bytes=1000")
    for announced in (1001, 2**32 - 1):
        with WireClient(broker.address) as c:
            c.send_raw(struct.pack(">I", announced))  # no body follows: must not wait for it
            response = c.recv()
            assert response is not None and response["error"] == "INVALID_REQUEST"
            assert str(announced) in response["message"]
            assert c.is_closed_by_peer()
    with WireClient(broker.address) as c:  # a frame at the limit is fine
        request_id, env = c.envelope("metadata", {"topics": ["p" * 900]})
        payload = msgpack.packb(env, use_bin_type=True)
        assert len(payload) <= 1000
        c.send_obj(env)
        assert c.recv()["id"] == request_id  # type: ignore[index]


def test_idle_connections_are_closed(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("connections.max.idle.ms=200")
    with WireClient(broker.address) as c:
        c.ok("api_versions", {})
        assert c.is_closed_by_peer()  # closed by the broker, not by a client timeout
    _assert_still_serving(broker)


def test_a_trickled_request_is_cut_off_after_the_read_timeout(
    broker_factory: BrokerFactory,
) -> None:
    """Slowloris: bytes keep coming, so the connection is never idle; the frame deadline
    (socket.request.read.timeout.ms) still closes it, and others are served meanwhile."""
    broker = broker_factory("socket.request.read.timeout.ms=300")
    frame = msgpack.packb({"api": "api_versions", "v": 1, "id": 1, "body": {}})
    wire_bytes = struct.pack(">I", len(frame)) + frame
    with socket.create_connection(broker.address, timeout=10) as slow:
        closed = False
        for byte in wire_bytes[:-1]:  # one byte every 50 ms: ~1.5 s, never complete
            try:
                slow.sendall(bytes([byte]))
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            _assert_still_serving(broker)
            time.sleep(0.05)
        if not closed:
            slow.settimeout(10)
            try:
                closed = slow.recv(1) == b""
            except ConnectionResetError:
                closed = True
        assert closed
    # A request that arrives whole, however slowly its connection started, is served.
    with WireClient(broker.address) as c:
        time.sleep(0.5)
        c.ok("api_versions", {})


def test_long_poll_outlives_the_idle_timeout(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("connections.max.idle.ms=100")
    with WireClient(broker.address) as c:
        c.create_topic("slow")
        part = c.fetch("slow", 0, max_wait_ms=400, min_bytes=1)
        assert part["error"] is None


def test_connection_cap(broker_factory: BrokerFactory) -> None:
    broker = broker_factory("max.connections=2")
    with WireClient(broker.address) as a, WireClient(broker.address) as b:
        a.ok("api_versions", {})
        b.ok("api_versions", {})
        with WireClient(broker.address) as c:
            assert c.is_closed_by_peer()
        a.ok("api_versions", {})

    def served_again() -> bool:  # once the broker has seen a and b go
        try:
            _assert_still_serving(broker)
        except (ConnectionError, AssertionError):
            return False
        return True

    wait_until(served_again)


def test_many_concurrent_clients(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as admin:
        admin.create_topic("crowd", 4)
    errors: list[BaseException] = []

    def worker(n: int) -> None:
        try:
            with WireClient(shared_broker.address) as c:
                for i in range(20):
                    result = c.produce("crowd", batch(b"%d-%d" % (n, i)), partition=n % 4)
                    assert result["error"] is None
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with WireClient(shared_broker.address) as c:
        total = sum(c.fetch("crowd", 0, partition=p)["high_watermark"] for p in range(4))
    assert total == 160


def test_deleting_a_topic_ends_its_long_polls(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as waiting, WireClient(shared_broker.address) as admin:
        admin.create_topic("vanishing")
        waiting.send("fetch", fetch_body("vanishing", 0, max_wait_ms=600_000, min_bytes=1))
        admin.ok("delete_topic", {"topic": "vanishing"})
        response = waiting.recv()
        assert response is not None
        part = response["body"]["topics"][0]["partitions"][0]
        assert part["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def test_connection_churn_leaves_nothing_behind(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    for i in range(200):
        sock = socket.create_connection(broker.address, timeout=30)
        if i % 2:
            sock.sendall(struct.pack(">I", 50) + b"\x80")  # and a half-sent frame
        sock.close()
    _assert_still_serving(broker)

    def connections_gauge() -> float:
        with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics") as r:
            for line in r.read().decode().splitlines():
                if line.startswith("tidelog_connections "):
                    return float(line.split()[1])
        raise AssertionError("no tidelog_connections gauge")

    wait_until(lambda: connections_gauge() == 0)


def test_long_poll_wakes_on_a_recreated_topic(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as consumer, WireClient(shared_broker.address) as admin:
        for round_ in range(3):  # each round's logs are new objects
            admin.create_topic("phoenix")
            consumer.send("fetch", fetch_body("phoenix", 0, max_wait_ms=600_000, min_bytes=1))
            admin.produce("phoenix", batch(b"%d" % round_))
            response = consumer.recv()
            assert response is not None
            assert values_of(response["body"]["topics"][0]["partitions"][0]["records"]) == [
                b"%d" % round_
            ]
            admin.ok("delete_topic", {"topic": "phoenix"})


def test_peer_reset_during_a_large_response_harms_nobody(shared_broker: BrokerProcess) -> None:
    with WireClient(shared_broker.address) as admin:
        admin.create_topic("resets")
        for _ in range(6):
            admin.produce("resets", batch(*[b"x" * 1000] * 900))
    for _ in range(5):
        rude = WireClient(shared_broker.address)
        rude.send("fetch", fetch_body("resets", 0, max_bytes=50 << 20))
        assert rude.sock.recv(1)  # the answer has started: the broker is sending it
        rude.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        rude.close()  # RST while the broker is mid-send
    _assert_still_serving(shared_broker)
    assert shared_broker.proc.poll() is None
