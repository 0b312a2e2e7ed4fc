"""The batching Producer against the in-memory fake broker over loopback."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import iter_records, set_base_offset, validate_batch
from protocol.compression import Compression
from protocol.errors import UnknownTopicOrPartition
from tests.protocol.fakebroker import FakeBroker, serve_in_thread
from tidelog.client import Client
from tidelog.consumer import decode_fetched
from tidelog.pending import PendingBatch
from tidelog.producer import (
    BufferFullError,
    Producer,
    RecordMetadata,
    murmur2,
    partition_for_key,
)


@pytest.fixture
def address() -> Iterator[str]:
    broker = FakeBroker()
    with serve_in_thread(broker) as address:
        with Client(address) as admin:
            admin.create_topic("t", partitions=3)
        yield address


def stored(address: str, partition: int) -> list:
    with Client(address) as client:
        return list(iter_records(client.fetch("t", partition, 0, max_bytes=1 << 24).records))


def test_send_resolves_futures_with_offsets_in_send_order(address: str) -> None:
    with Producer(address, linger_ms=50) as producer:
        futures = [producer.send("t", b"v%d" % i, partition=1) for i in range(100)]
        producer.flush()
        assert all(f.done() for f in futures)
    metas = [f.get(timeout=5) for f in futures]
    assert [m.offset for m in metas] == list(range(100))
    assert all(m.topic == "t" and m.partition == 1 for m in metas)
    assert [r.value for r in stored(address, 1)] == [b"v%d" % i for i in range(100)]


def test_context_manager_flushes_on_exit(address: str) -> None:
    with Producer(address, linger_ms=60_000) as producer:
        future = producer.send("t", b"late", partition=0)
        assert not future.done()
    assert future.get(0) == RecordMetadata("t", 0, 0, future.get(0).timestamp, 0)
    assert [r.value for r in stored(address, 0)] == [b"late"]


def test_records_keep_key_headers_and_timestamp(address: str) -> None:
    with Producer(address) as producer:
        future = producer.send(
            "t", None, key=b"k", headers=[("a", b"1"), ("b", None)], partition=2, timestamp_ms=77
        )
    assert future.get(5).timestamp == 77
    [record] = stored(address, 2)
    assert (record.key, record.value, record.headers, record.timestamp) == (
        b"k",
        None,
        (("a", b"1"), ("b", None)),
        77,
    )


def test_batch_size_splits_batches(address: str) -> None:
    with Producer(address, batch_size=1_000, linger_ms=10_000) as producer:
        futures = [producer.send("t", b"x" * 100, partition=0) for i in range(30)]
    assert [f.get(5).offset for f in futures] == list(range(30))
    with Client(address) as client:
        fetched = client.fetch("t", 0, 0, max_bytes=1 << 20).records
    from protocol.batch import iter_headers

    counts = [h.record_count for _, h in iter_headers(fetched)]
    assert sum(counts) == 30 and len(counts) > 1 and max(counts) <= 9


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(address: str, codec: str) -> None:
    with Producer(address, compression_type=codec) as producer:
        producer.send("t", b"z" * 1000, partition=0)
    with Client(address) as client:
        records = client.fetch("t", 0, 0).records
    header = validate_batch(records)
    assert header.compression == Compression.parse(codec)
    assert [r.value for r in iter_records(records)] == [b"z" * 1000]


def test_send_batch_keeps_order_with_single_sends(address: str) -> None:
    with Producer(address, linger_ms=10_000) as producer:
        first = producer.send("t", b"a", partition=0)
        bulk = producer.send_batch("t", [b"b", b"c"], keys=[b"1", None], partition=0)
        last = producer.send("t", b"d", partition=0)
    assert first.get(5).offset == 0
    assert bulk.get(5).base_offset == 1 and bulk.get(5).count == 2
    assert last.get(5).offset == 3
    assert [(r.key, r.value) for r in stored(address, 0)] == [
        (None, b"a"),
        (b"1", b"b"),
        (None, b"c"),
        (None, b"d"),
    ]


def test_keyed_records_use_kafkas_partitioner(address: str) -> None:
    with Producer(address) as producer:
        futures = {key: producer.send("t", b"v", key=key) for key in (b"a", b"b", b"c", b"dd")}
    for key, future in futures.items():
        assert future.get(5).partition == partition_for_key(key, 3)


def test_murmur2_matches_kafka() -> None:
    # Vectors from Kafka's UtilsTest.testMurmur2 (signed int32 there).
    cases = {
        b"21": -973932308,
        b"foobar": -790332482,
        b"a-little-bit-long-string": -985981536,
        b"a-little-bit-longer-string": -1486304829,
        b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
        b"abc": 479470107,
    }
    for data, expected in cases.items():
        assert murmur2(data) == expected & 0xFFFFFFFF, data


def test_errors_reach_the_futures_and_callbacks(address: str) -> None:
    seen: list[BaseException] = []
    with Producer(address) as producer:
        future = producer.send("t", b"v", partition=9)
        future.add_errback(seen.append)
        producer.flush()
    with pytest.raises(UnknownTopicOrPartition):
        future.get(5)
    assert isinstance(future.exception(), UnknownTopicOrPartition)
    assert len(seen) == 1 and isinstance(seen[0], UnknownTopicOrPartition)


def test_success_callback_gets_metadata(address: str) -> None:
    got: list[RecordMetadata] = []
    done = threading.Event()
    with Producer(address) as producer:
        future = producer.send("t", b"v", partition=0)
        future.add_callback(got.append).add_done_callback(lambda f: done.set())
    assert done.wait(5)
    assert got == [future.get()]


def test_unknown_topic_without_partition_fails_at_send(address: str) -> None:
    with Producer(address) as producer, pytest.raises(UnknownTopicOrPartition):
        producer.send("nope", b"v")


def test_acks_zero_resolves_with_offset_minus_one(address: str) -> None:
    with Producer(address, acks=0) as producer:
        future = producer.send("t", b"v", partition=0)
    assert future.get(5).offset == -1
    assert [r.value for r in stored(address, 0)] == [b"v"]


def test_full_buffer_blocks_then_raises() -> None:
    # A listener that never accepts: requests are sent but never answered.
    silent = socket.create_server(("127.0.0.1", 0))
    address = f"127.0.0.1:{silent.getsockname()[1]}"
    producer = Producer(
        address, buffer_memory=100, batch_size=50, max_block_ms=50, enable_idempotence=False
    )
    futures = []
    with pytest.raises(BufferFullError, match="buffer_memory=100"):
        for _ in range(10):
            futures.append(producer.send("t", b"x" * 40, partition=0))
    assert len(futures) == 1  # 40 bytes + per-record overhead: a second would not fit
    with pytest.raises(TimeoutError, match="flush"):
        producer.flush(timeout=0.05)
    silent.close()  # the broker dies: the connection is reset and the batch fails
    producer.close()
    assert isinstance(futures[0].exception(5), ConnectionError)


def test_connection_failure_fails_the_batch() -> None:
    with Producer("127.0.0.1:1", linger_ms=0, enable_idempotence=False) as producer:
        future = producer.send("t", b"v", partition=0)
        with pytest.raises(ConnectionRefusedError):
            future.get(5)


def test_an_idempotent_producer_retries_until_the_delivery_timeout() -> None:
    started = time.monotonic()
    with Producer(
        "127.0.0.1:1", linger_ms=0, delivery_timeout_ms=500, retry_backoff_ms=50
    ) as producer:
        future = producer.send("t", b"v", partition=0)
        with pytest.raises(ConnectionRefusedError):
            future.get(5)
    assert time.monotonic() - started >= 0.5  # retried, not failed at the first refusal


def test_invalid_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="acks"):
        Producer(acks=2)
    with pytest.raises(ValueError, match="batch_size"):
        Producer(batch_size=0)


def test_encoded_batch_is_a_valid_producer_batch() -> None:
    batch = PendingBatch("t", 0, 0.0)
    batch.keys, batch.values = [b"k", None], [b"v", b"w"]
    batch.headers, batch.timestamps = [(), (("h", b"x"),)], [100, 90]
    encoded = batch.encode(Compression.NONE)
    header = validate_batch(encoded, producer=True)
    assert (header.base_timestamp, header.max_timestamp, header.record_count) == (100, 100, 2)
    assert [(r.timestamp, r.headers) for r in iter_records(encoded)] == [
        (100, ()),
        (90, (("h", b"x"),)),
    ]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"value": "text"}, "key and value"),
        ({"value": b"v", "key": 5}, "key and value"),
        ({"value": b"v", "headers": [(b"k", b"v")]}, "headers"),
        ({"value": b"v", "headers": [("k", "v")]}, "headers"),
        ({"value": b"v", "timestamp_ms": 1.5}, "timestamp_ms"),
    ],
    ids=["str-value", "int-key", "bytes-header-key", "str-header-value", "float-timestamp"],
)
def test_bad_record_types_are_refused_at_send(address: str, kwargs: dict, match: str) -> None:
    with Producer(address) as producer:
        with pytest.raises(TypeError, match=match):
            producer.send("t", partition=0, **kwargs)
        with pytest.raises(TypeError):
            producer.send_batch("t", [b"ok", "bad"], partition=0)  # type: ignore[list-item]
        good = producer.send("t", b"fine", partition=0)
    assert good.get(5).offset == 0


def test_linger_sends_without_a_flush(address: str) -> None:
    with Producer(address, linger_ms=10, batch_size=1 << 20) as producer:
        future = producer.send("t", b"lingered", partition=0)
        assert future.get(timeout=10).offset == 0  # no flush: the linger timer sent it


blobs = st.none() | st.binary(max_size=40)
records = st.lists(
    st.tuples(
        blobs,
        blobs,
        st.lists(st.tuples(st.text(max_size=5), blobs), max_size=3),
        st.integers(0, 2**40),
    ),
    min_size=1,
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(rows=records, codec=st.sampled_from(list(Compression)), base=st.integers(0, 2**40))
def test_encoded_columns_decode_to_the_same_records(
    rows: list[tuple], codec: Compression, base: int
) -> None:
    batch = PendingBatch("t", 3, 0.0)
    batch.keys = [r[0] for r in rows]
    batch.values = [r[1] for r in rows]
    batch.headers = [tuple(r[2]) for r in rows]
    batch.timestamps = [r[3] for r in rows]
    encoded = bytearray(batch.encode(codec))
    validate_batch(encoded, producer=True)  # what the broker checks on produce
    set_base_offset(encoded, 0, base)
    decoded, position = decode_fetched("t", 3, bytes(encoded), base)
    assert position == base + len(rows)
    assert [(r.key, r.value, r.headers, r.timestamp) for r in decoded] == [
        (k, v, tuple(h), ts) for k, v, h, ts in rows
    ]
    assert [r.offset for r in decoded] == list(range(base, base + len(rows)))


def test_requests_with_several_partitions_keep_each_partitions_order(address: str) -> None:
    """Batches of two partitions share requests (the joined path); order holds per partition."""
    with Producer(address, linger_ms=1000, batch_size=200, acks=1) as producer:
        futures = [
            producer.send("t", b"%d" % i, partition=i % 2, timestamp_ms=1_000) for i in range(200)
        ]
        producer.flush()
        metadata = [f.get(timeout=10) for f in futures]
    for partition in (0, 1):
        values = [r.value for r in stored(address, partition)]
        assert values == [b"%d" % i for i in range(partition, 200, 2)]
        offsets = [m.offset for m in metadata if m.partition == partition]
        assert offsets == list(range(100))


def test_send_batch_encodes_in_the_callers_thread(address: str) -> None:
    """A batch that cannot be encoded fails in `send_batch` itself, not later in the sender."""
    with Producer(address) as producer:
        with pytest.raises(ValueError, match="timestamp"):
            producer.send_batch("t", [b"x"], partition=0, timestamp_ms=2**64)
        assert producer.send_batch("t", [b"y"], partition=0).get(timeout=10).count == 1
