"""The blocking Client over loopback against the in-memory fake broker."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from protocol.batch import decode_records, encode_batch
from protocol.calls import OffsetAndTimestamp
from protocol.errors import (
    OffsetOutOfRange,
    RequestTimedOut,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from tests.protocol.fakebroker import FakeBroker, serve_in_thread
from tidelog.client import Client


@pytest.fixture
def broker() -> FakeBroker:
    return FakeBroker()


@pytest.fixture
def client(broker: FakeBroker) -> Iterator[Client]:
    with serve_in_thread(broker) as address, Client(address, client_id="tests") as client:
        yield client


def batch(*values: bytes, timestamp_ms: int = 1_000) -> bytes:
    return encode_batch([(None, v, None, timestamp_ms) for v in values])


def test_every_api_round_trips(client: Client) -> None:
    versions = client.api_versions()
    assert versions["apis"]["fetch"] == [1, 1]

    client.create_topic("events", partitions=2, configs={"retention.ms": 1000})
    with pytest.raises(TopicAlreadyExists):
        client.create_topic("events")
    [meta] = client.metadata(["events"])
    assert [p["partition"] for p in meta["partitions"]] == [0, 1]
    assert client.describe_configs("events")["retention.ms"] == {"value": "1000", "source": "topic"}
    client.alter_configs("events", set={"segment.bytes": "1024"}, delete=["retention.ms"])
    assert "segment.bytes" in client.describe_configs("events")

    first = client.produce("events", 0, batch(b"a", b"b"), acks=1)
    second = client.produce("events", 0, batch(b"c", timestamp_ms=2_000))
    assert (first.base_offset, second.base_offset) == (0, 2)

    fetched = client.fetch("events", 0, 0)
    assert fetched.high_watermark == 3
    assert [r.value for r in decode_records(fetched.records)] == [b"a", b"b"]

    assert client.list_offsets("events", 0, "earliest") == OffsetAndTimestamp(0, -1)
    assert client.list_offsets("events", 0, "latest").offset == 3
    assert client.list_offsets("events", 0, "max_timestamp") == OffsetAndTimestamp(2, 2_000)
    assert client.offset_for_time("events", 0, 1_500) == OffsetAndTimestamp(2, 2_000)
    assert client.offset_for_time("events", 0, 9_999) is None

    assert client.delete_records("events", 0, 2) == 2
    with pytest.raises(OffsetOutOfRange):
        client.fetch("events", 0, 0)
    client.delete_topic("events")
    assert client.metadata() == []


def test_partition_errors_raise_their_class(client: Client) -> None:
    with pytest.raises(UnknownTopicOrPartition):
        client.produce("missing", 0, batch(b"x"))
    client.create_topic("t")
    with pytest.raises(UnknownTopicOrPartition):
        client.fetch("t", 5, 0)


def test_acks_zero_returns_nothing_and_still_appends(client: Client, broker: FakeBroker) -> None:
    client.create_topic("t")
    assert client.produce("t", 0, batch(b"x"), acks=0) is None
    assert client.list_offsets("t", 0, "latest").offset == 1  # answered after the produce


def test_pipelined_sends_are_received_in_order(client: Client) -> None:
    client.create_topic("t")
    ids = [client.send("produce", produce_body(batch(b"%d" % i))) for i in range(20)]
    assert client.in_flight == 20
    replies = [client.receive() for _ in ids]
    assert [r.id for r in replies] == ids
    offsets = [r.result()["topics"][0]["partitions"][0]["base_offset"] for r in replies]
    assert offsets == list(range(20))


def test_blocking_request_refuses_to_jump_the_pipeline(client: Client) -> None:
    client.send("api_versions", {})
    with pytest.raises(RuntimeError, match="receive"):
        client.api_versions()


def produce_body(records: bytes) -> dict:
    return {
        "acks": 1,
        "timeout_ms": 1000,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": records}]}],
    }


def test_large_fetch_grows_the_receive_buffer(client: Client) -> None:
    client.create_topic("t")
    big = b"v" * (300 * 1024)
    client.produce("t", 0, batch(big, big))
    fetched = client.fetch("t", 0, 0, max_bytes=1)
    assert [r.value for r in decode_records(fetched.records)] == [big, big]


@pytest.fixture
def silent_server() -> Iterator[str]:
    """Accepts connections and reads, but never answers."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def accept() -> None:
        try:
            while True:
                accepted.append(listener.accept()[0])
        except OSError:
            return

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"127.0.0.1:{listener.getsockname()[1]}"
    listener.shutdown(socket.SHUT_RDWR)
    listener.close()
    thread.join(5)
    for conn in accepted:
        conn.close()


def test_timeout_closes_the_connection_and_the_next_call_reconnects(silent_server: str) -> None:
    with Client(silent_server, request_timeout_ms=50) as client:
        with pytest.raises(RequestTimedOut, match="within 50 ms"):
            client.api_versions()
        assert not client.connected
        with pytest.raises(RequestTimedOut):
            client.api_versions()


def test_connection_refused_is_an_os_error() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    listener.close()
    with Client(f"127.0.0.1:{port}") as client, pytest.raises(ConnectionRefusedError):
        client.api_versions()


def test_broker_hanging_up_is_reported() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{listener.getsockname()[1]}"

    def hang_up_once() -> None:
        conn, _ = listener.accept()
        conn.recv(100)
        conn.close()

    thread = threading.Thread(target=hang_up_once, daemon=True)
    thread.start()
    with Client(address) as client:
        with pytest.raises(ConnectionResetError, match="closed the connection"):
            client.api_versions()
        assert not client.connected
    thread.join(5)
    listener.close()


def test_send_with_tail_delivers_every_chunk_through_partial_sends() -> None:
    """A tiny socket buffer makes `sendmsg` stop mid-chunk; every byte still arrives in order."""
    from tidelog.client import _sendmsg_all

    left, right = socket.socketpair()
    left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    left.settimeout(10)
    chunks = [b"head", bytearray(b"a" * 50_000), b"", memoryview(b"b" * 70_001), b"z"]
    received = bytearray()

    def read_slowly() -> None:
        while len(received) < sum(map(len, chunks)):
            data = right.recv(1000)
            if not data:
                break
            received.extend(data)

    reader = threading.Thread(target=read_slowly)
    reader.start()
    try:
        _sendmsg_all(left, chunks)
        reader.join(10)
    finally:
        left.close()
        right.close()
    assert bytes(received) == b"".join(chunks)


def test_produce_with_a_tail_appends_the_joined_batches(client: Client, broker: FakeBroker) -> None:
    from protocol.framing import TAIL_PLACEHOLDER

    client.create_topic("t", 1)
    first, second = batch(b"one", b"two"), batch(b"three")
    body = {
        "acks": 1,
        "timeout_ms": 1000,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": TAIL_PLACEHOLDER}]}],
    }
    client.send_with_tail("produce", body, [first, bytearray(second)])
    [partition] = client.receive().result()["topics"][0]["partitions"]
    assert partition["error"] is None and partition["base_offset"] == 0
    records = client.fetch("t", 0, 0).records
    assert [r.value for r in decode_records(records)] == [b"one", b"two"]
    assert client.list_offsets("t", 0, "latest").offset == 3
