"""Kafka batches stored as the producer sent them (issue 35), against the real broker:
a Kafka fetch returns the producer's bytes (offsets and leader epoch aside), also from
the segment file by sendfile; a msgpack fetch gets §3 batches unless it says
`kafka_batches`; both layouts in one partition read back through both protocols."""

from __future__ import annotations

import struct
import warnings
from collections.abc import Iterator

import confluent_kafka
import pytest

import tidelog
from protocol import batch as tidelog_batch
from protocol.batch import ANY_LAYOUT, F_MAGIC, KAFKA_MAGIC, MAGIC, BatchWalk, encode_batch
from protocol.kafka import records as kafka_records
from protocol.kafka.messages import FETCH, PRODUCE
from tests.conftest import BrokerProcess, start_broker
from tests.integration.kafka_helpers import KafkaSocket

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = pytest.mark.integration

_INT64 = struct.Struct(">q")
# What a broker rewrites in a stored Kafka batch (outside its CRC): the base offset
# (bytes 0-7) and the partition leader epoch (bytes 12-15).
_EPOCH = slice(12, 16)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("stored-as-sent") / "data")
    yield process
    assert process.stop() == 0


def _kafka_python_batch(count: int, value: bytes = b"v" * 100, codec: int = 0) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 30,
    )  # fmt: skip
    for i in range(count):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=value,
                       headers=[("h", b"x")])  # fmt: skip
    return bytes(builder.build())


def _create(broker: BrokerProcess, topic: str) -> None:
    client = tidelog.Client(broker.bootstrap)
    try:
        client.create_topic(topic, 1)
    finally:
        client.close()


def _produce(sock: KafkaSocket, topic: str, records: bytes) -> dict:
    body = {
        "transactional_id": None, "acks": 1, "timeout_ms": 5000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }  # fmt: skip
    return sock.call(PRODUCE, 7, body)["responses"][0]["partition_responses"][0]


def _fetch(sock: KafkaSocket, topic: str, offset: int, max_bytes: int = 1 << 24) -> bytes:
    answer = sock.call(FETCH, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": max_bytes,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": topic, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "log_start_offset": -1, "partition_max_bytes": max_bytes}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip
    part = answer["responses"][0]["partitions"][0]
    assert part["error_code"] == 0, part
    records: bytes = part["records"]
    return records


def _as_sent(stored: bytes, base_offset: int, sent: bytes) -> bytes:
    """A stored Kafka batch with the producer's base offset (0) and leader epoch put
    back: the stored ones are the assigned offset and 0."""
    assert _INT64.unpack_from(stored, 0)[0] == base_offset
    assert stored[_EPOCH] == b"\0\0\0\0"
    return _INT64.pack(0) + stored[8:12] + sent[_EPOCH] + stored[16:]


def _split(data: bytes) -> list[tuple[int, bytes]]:
    walk = BatchWalk(data, layout=ANY_LAYOUT, whole=False)
    return [(f[F_MAGIC], data[pos : pos + f[1] + 12]) for pos, f in walk]


@pytest.mark.parametrize("count", [3, 2_000])  # an answer of bytes; one sent by sendfile
def test_a_kafka_fetch_returns_the_producers_bytes(broker: BrokerProcess, count: int) -> None:
    topic = f"verbatim-{count}"
    _create(broker, topic)
    sent = [_kafka_python_batch(count), _kafka_python_batch(count, codec=1)]  # none, gzip
    with KafkaSocket(broker.address) as sock:
        for batch in sent:
            assert _produce(sock, topic, batch)["error_code"] == 0
        fetched = _fetch(sock, topic, 0)
    got = _split(fetched)
    assert [magic for magic, _ in got] == [KAFKA_MAGIC, KAFKA_MAGIC]
    bases = [0, count]
    assert [_as_sent(b, base, x) for (_, b), base, x in zip(got, bases, sent, strict=True)] == sent


def test_what_confluent_kafka_sent_is_what_the_segment_holds(broker: BrokerProcess) -> None:
    """librdkafka's batches are stored untouched but for offsets and leader epoch, and
    a Kafka fetch sends the segment's bytes."""
    topic = "verbatim-confluent"
    _create(broker, topic)
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "linger.ms": 50, "compression.type": "lz4"}
    )
    for i in range(500):
        producer.produce(topic, key=b"k%d" % i, value=b"x" * 200, partition=0)
    assert producer.flush(30) == 0
    segment = broker.data_dir / f"{topic}-0" / "00000000000000000000.log"
    on_disk = segment.read_bytes()
    with KafkaSocket(broker.address) as sock:
        assert _fetch(sock, topic, 0) == on_disk
    batches = _split(on_disk)
    assert {magic for magic, _ in batches} == {KAFKA_MAGIC}
    assert sum(kafka_records.read_batch_header(b).record_count for _, b in batches) == 500


def test_both_layouts_in_one_partition_through_both_protocols(broker: BrokerProcess) -> None:
    topic = "both-layouts"
    client = tidelog.Client(broker.bootstrap)
    try:
        _read_both_ways(broker, client, topic)
    finally:
        client.close()


def _read_both_ways(broker: BrokerProcess, client: tidelog.Client, topic: str) -> None:
    client.create_topic(topic, 1)
    client.produce(topic, 0, encode_batch([(b"a", b"msgpack-0", None, 1_700_000_000_000)]))
    with KafkaSocket(broker.address) as sock:
        kafka_sent = _kafka_python_batch(2)
        assert _produce(sock, topic, kafka_sent)["base_offset"] == 1
        client.produce(topic, 0, encode_batch([(b"b", b"msgpack-3", None, 1_700_000_000_001)]))
        from_kafka = _fetch(sock, topic, 0)
    # Kafka's view: every batch v2, the Kafka one as sent, the Tidelog ones converted.
    kafka_view = _split(from_kafka)
    assert [magic for magic, _ in kafka_view] == [KAFKA_MAGIC] * 3
    assert _as_sent(kafka_view[1][1], 1, kafka_sent) == kafka_sent
    # A msgpack reader that does not say kafka_batches: §3 batches only, as before.
    plain = client.fetch(topic, 0, 0).records
    assert [magic for magic, _ in _split(plain)] == [MAGIC] * 3
    values = [r.value for r in tidelog_batch.iter_records(plain)]
    assert values == [b"msgpack-0", b"v" * 100, b"v" * 100, b"msgpack-3"]
    # One that says kafka_batches: the batches as stored.
    body = {
        "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20, "kafka_batches": True,
        "topics": [{"topic": topic, "partitions": [
            {"partition": 0, "offset": 0, "max_bytes": 1 << 20}]}],
    }  # fmt: skip
    answer = client.request("fetch", body)
    stored = answer["topics"][0]["partitions"][0]["records"]
    assert [magic for magic, _ in _split(stored)] == [MAGIC, KAFKA_MAGIC, MAGIC]
    assert _as_sent(_split(stored)[1][1], 1, kafka_sent) == kafka_sent
