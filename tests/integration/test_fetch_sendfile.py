"""Large fetch answers of the real broker (records sent from the segment files).

Checked against the contract: the frame is exactly the canonical msgpack of the
answer it decodes to, and its records are the same whole batches the small
(copied) reads return, across segment boundaries and several partitions.
"""

from __future__ import annotations

import os
import struct

import msgpack
import pytest

from protocol.batch import encode_batch, iter_headers
from protocol.framing import encode_body
from tests.conftest import BrokerProcess
from tests.integration.wire import WireClient, fetch_body

pytestmark = pytest.mark.integration

LENGTH = struct.Struct(">I")
TOPIC = "big"
SEGMENT_BYTES = 400_000
# Fetches at most this big are copied into the answer (the broker's inline reads).
SMALL_FETCH_BYTES = 32 * 1024


def _raw_answer(client: WireClient, body: dict) -> bytes:
    """Send a fetch and return its response frame's body, as received."""
    client.send("fetch", body)
    header = _recv_exactly(client, 4)
    return _recv_exactly(client, LENGTH.unpack(header)[0])


def _recv_exactly(client: WireClient, n: int) -> bytes:
    data = bytearray()
    while len(data) < n:
        chunk = client.sock.recv(n - len(data))
        assert chunk, "broker closed the connection"
        data += chunk
    return bytes(data)


def _small_reads(client: WireClient, partition: int, offset: int, end: int) -> bytes:
    """The log's batches from `offset` to past `end`, fetched a few at a time."""
    out = bytearray()
    while offset < end:
        got = client.fetch(TOPIC, offset, partition=partition, max_bytes=SMALL_FETCH_BYTES)
        assert got["error"] is None and got["records"]
        out += got["records"]
        offset = max(h.next_offset for _, h in iter_headers(got["records"]))
    return bytes(out)


@pytest.fixture
def loaded(broker_factory) -> BrokerProcess:
    broker = broker_factory(f"log.segment.bytes={SEGMENT_BYTES}")
    with WireClient(broker.address) as client:
        client.create_topic(TOPIC, 2)
        for partition in range(2):
            for i in range(30):  # ~1.2 MB a partition, 3+ segments, batches of varied size
                count = 50 + 37 * i
                values = [os.urandom(20 + (n % 7)) for n in range(count)]
                records = encode_batch([(b"k", v, (), 1_000 + n) for n, v in enumerate(values)])
                assert client.produce(TOPIC, records, partition=partition)["error"] is None
    return broker


@pytest.mark.parametrize(("offset", "max_bytes"), [(0, 1 << 20), (777, 300_000), (3000, 8 << 20)])
def test_a_large_answer_is_canonical_and_holds_the_same_batches(
    loaded: BrokerProcess, offset: int, max_bytes: int
) -> None:
    with WireClient(loaded.address) as client:
        raw = _raw_answer(client, fetch_body(TOPIC, offset, max_bytes=max_bytes))
        answer = msgpack.unpackb(raw, raw=False)
        assert encode_body(answer) == raw
        part = answer["body"]["topics"][0]["partitions"][0]
        records = part["records"]
        assert len(records) > 64 * 1024
        assert len(records) <= max(max_bytes, SEGMENT_BYTES)
        headers = [h for _, h in iter_headers(records)]
        assert headers[0].base_offset <= offset <= headers[0].last_offset
        assert records == _small_reads(client, 0, offset, headers[-1].next_offset)[: len(records)]


def test_several_partitions_in_one_answer(loaded: BrokerProcess) -> None:
    body = fetch_body(TOPIC, 0, max_bytes=1 << 20)
    body["topics"][0]["partitions"].append({"partition": 1, "offset": 100, "max_bytes": 200_000})
    with WireClient(loaded.address) as client:
        raw = _raw_answer(client, body)
        answer = msgpack.unpackb(raw, raw=False)
        assert encode_body(answer) == raw
        first, second = answer["body"]["topics"][0]["partitions"]
        for part, offset in ((first, 0), (second, 100)):
            records = part["records"]
            assert part["error"] is None and len(records) > 64 * 1024
            last = [h for _, h in iter_headers(records)][-1]
            expected = _small_reads(client, part["partition"], offset, last.next_offset)
            assert records == expected[: len(records)]
        # the connection is in step after the two-span frame
        assert client.fetch(TOPIC, 0, max_bytes=100)["error"] is None


def test_readers_that_never_read_do_not_stall_a_neighbour(loaded: BrokerProcess) -> None:
    """Answers waiting for peers that do not read hold no worker thread: others go on."""
    idle = [WireClient(loaded.address) for _ in range(45)]  # more than trio's 40 threads
    try:
        for client in idle:
            for _ in range(4):
                client.send("fetch", fetch_body(TOPIC, 0, max_bytes=1 << 20))
        with WireClient(loaded.address, timeout_s=20) as neighbour:
            for offset in (0, 2000, 4000):
                got = neighbour.fetch(TOPIC, offset, max_bytes=1 << 20)
                assert got["error"] is None and len(got["records"]) > 64 * 1024
    finally:
        for client in idle:
            client.close()


def test_a_long_poll_answered_by_a_large_append(loaded: BrokerProcess) -> None:
    with WireClient(loaded.address) as reader, WireClient(loaded.address) as writer:
        end = writer.partition_call("list_offsets", TOPIC, spec="latest")["offset"]
        reader.send(
            "fetch", fetch_body(TOPIC, end, max_wait_ms=20_000, min_bytes=1, max_bytes=1 << 20)
        )
        values = [os.urandom(100) for _ in range(2000)]  # one ~230 KB batch
        records = encode_batch([(None, v, (), 1_000) for v in values])
        assert writer.produce(TOPIC, records)["error"] is None
        answer = reader.recv()
        assert answer is not None and answer["error"] is None
        part = answer["body"]["topics"][0]["partitions"][0]
        fetched = part["records"]
        assert len(fetched) == len(records) and fetched[12:] == records[12:]  # offset assigned
        assert [h.base_offset for _, h in iter_headers(fetched)] == [end]


def test_a_long_poll_answered_from_the_segment_file(loaded: BrokerProcess) -> None:
    """An append too large to copy wakes the long poll: the answer the handler then
    reads is sent from the segment file (the connection looks for spans in fetch
    answers only), with the bytes that were appended."""
    with WireClient(loaded.address) as reader, WireClient(loaded.address) as writer:
        end = writer.partition_call("list_offsets", TOPIC, spec="latest")["offset"]
        reader.send(
            "fetch", fetch_body(TOPIC, end, max_wait_ms=20_000, min_bytes=1, max_bytes=1 << 20)
        )
        values = [os.urandom(100) for _ in range(2600)]  # ~300 KB: over 256 KiB, under a segment
        records = encode_batch([(None, v, (), 1_000) for v in values])
        assert len(records) > 256 * 1024
        assert writer.produce(TOPIC, records)["error"] is None
        answer = reader.recv()
        assert answer is not None and answer["error"] is None
        fetched = answer["body"]["topics"][0]["partitions"][0]["records"]
        assert len(fetched) == len(records) and fetched[12:] == records[12:]
        assert [h.base_offset for _, h in iter_headers(fetched)] == [end]
