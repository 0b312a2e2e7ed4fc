"""Kafka clients nobody here wrote, against the real broker on its usual port (issue 19).

kafka-python, aiokafka, confluent-kafka (librdkafka) and kcat produce and consume by
assignment with every compression codec, list and look up offsets, and read what
the other protocol wrote (Tidelog's Producer and `tidelog consume` on the other
side), with keys and values null against empty, headers and timestamps compared
record by record.

Every client runs with its default settings: kafka-python 3's producer is
idempotent by default (InitProducerId, sequence numbers checked by the broker).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from typing import Any

import aiokafka
import confluent_kafka
import confluent_kafka.admin
import pytest

# kafka-python 3.0 loads its bundled schemas with importlib.resources.read_text,
# deprecated in Python 3.11; the suite turns warnings into errors.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

import tidelog
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import METADATA
from tests.conftest import BrokerProcess, start_broker
from tests.integration.kafka_helpers import (
    CLIENT_TIMEOUT_S,
    CODECS,
    RECORDS,
    KafkaSocket,
    base_timestamp_ms,
)

UNKNOWN_TOPIC_OR_PARTITION = ERRORS_BY_NAME["UNKNOWN_TOPIC_OR_PARTITION"].code

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]

Record = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("kafka") / "data", "num.partitions=1")
    yield process
    assert process.stop() == 0


def _expected(topic_base_ms: int) -> list[Record]:
    return [(k, v, h, topic_base_ms + i) for i, (k, v, h) in enumerate(RECORDS)]


# Clients whose producers refuse a null header value (the others write one).
NO_NULL_HEADER_VALUES = frozenset({"kafka-python", "aiokafka"})


def _writable(client: str, records: list[Record]) -> list[Record]:
    """`records` as `client` can write them (null header values as empty)."""
    if client not in NO_NULL_HEADER_VALUES:
        return records
    return [(k, v, [(n, b"" if x is None else x) for n, x in h], t) for k, v, h, t in records]


def _headers(headers: Any) -> list[tuple[str, bytes | None]]:
    return [(str(k), None if v is None else bytes(v)) for k, v in headers or ()]


# --- producers ---------------------------------------------------------------------


def _produce_kafka_python(bootstrap: str, topic: str, codec: str, records: list[Record]) -> None:
    producer = kafka.KafkaProducer(
        bootstrap_servers=bootstrap,
        compression_type=None if codec == "none" else codec,
        acks="all",
        linger_ms=5,
    )
    for key, value, headers, ts in records:
        producer.send(topic, value=value, key=key, headers=headers, partition=0, timestamp_ms=ts)
    producer.flush(timeout=CLIENT_TIMEOUT_S)
    producer.close()


def _produce_aiokafka(bootstrap: str, topic: str, codec: str, records: list[Record]) -> None:
    async def run() -> None:
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            compression_type=None if codec == "none" else codec,
            acks=1,
            linger_ms=5,
        )
        await producer.start()
        try:
            batch = producer.create_batch()
            for key, value, headers, ts in records:
                assert batch.append(key=key, value=value, timestamp=ts, headers=headers)
            batch.close()
            await (await producer.send_batch(batch, topic, partition=0))
        finally:
            await producer.stop()

    asyncio.run(run())


def _produce_confluent(bootstrap: str, topic: str, codec: str, records: list[Record]) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5, "acks": "all"}
    )
    failures: list[Any] = []
    for key, value, headers, ts in records:
        producer.produce(
            topic,
            value=value,
            key=key,
            headers=headers,
            partition=0,
            timestamp=ts,
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert failures == []


def _produce_tidelog(bootstrap: str, topic: str, codec: str, records: list[Record]) -> None:
    with tidelog.Producer(bootstrap, compression_type=codec, acks=-1) as producer:
        for key, value, headers, ts in records:
            producer.send(topic, value=value, key=key, headers=headers, partition=0,
                          timestamp_ms=ts)  # fmt: skip


# --- consumers ---------------------------------------------------------------------


def _consume_kafka_python(bootstrap: str, topic: str, count: int) -> list[Record]:
    consumer = kafka.KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    part = kafka.TopicPartition(topic, 0)
    consumer.assign([part])
    consumer.seek_to_beginning(part)
    got: list[Record] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.key, r.value, _headers(r.headers), r.timestamp) for r in records]
            assert all(r.timestamp_type == 0 for r in records)
    consumer.close()
    return got


def _consume_aiokafka(bootstrap: str, topic: str, count: int) -> list[Record]:
    async def run() -> list[Record]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        await consumer.start()
        got: list[Record] = []
        try:
            part = aiokafka.TopicPartition(topic, 0)
            consumer.assign([part])
            await consumer.seek_to_beginning(part)
            deadline = time.monotonic() + CLIENT_TIMEOUT_S
            while len(got) < count and time.monotonic() < deadline:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [(r.key, r.value, _headers(r.headers), r.timestamp) for r in records]
        finally:
            await consumer.stop()
        return got

    return asyncio.run(run())


def _consume_confluent(bootstrap: str, topic: str, count: int) -> list[Record]:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "unused", "enable.auto.commit": False}
    )
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)])
    got: list[Record] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        kind, ts = message.timestamp()
        assert kind == confluent_kafka.TIMESTAMP_CREATE_TIME
        got.append((message.key(), message.value(), _headers(message.headers()), ts))
    consumer.close()
    return got


def _consume_tidelog(bootstrap: str, topic: str, count: int) -> list[Record]:
    consumer = tidelog.Consumer(bootstrap_servers=bootstrap)
    part = tidelog.TopicPartition(topic, 0)
    consumer.assign([part])
    consumer.seek_to_beginning(part)
    got: list[Record] = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    while len(got) < count and time.monotonic() < deadline:
        for records in consumer.poll(timeout_ms=500).values():
            got += [(r.key, r.value, _headers(r.headers), r.timestamp) for r in records]
    consumer.close()
    return got


PRODUCERS = {
    "kafka-python": _produce_kafka_python,
    "aiokafka": _produce_aiokafka,
    "confluent-kafka": _produce_confluent,
}
CONSUMERS = {
    "kafka-python": _consume_kafka_python,
    "aiokafka": _consume_aiokafka,
    "confluent-kafka": _consume_confluent,
}


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("client", sorted(PRODUCERS))
def test_client_round_trip_every_codec(broker: BrokerProcess, client: str, codec: str) -> None:
    """Each client reads back exactly what it wrote, with each codec it can write."""
    topic = f"rt-{client}-{codec}"
    records = _writable(client, _expected(base_timestamp_ms()))
    PRODUCERS[client](broker.bootstrap, topic, codec, records)
    assert CONSUMERS[client](broker.bootstrap, topic, len(records)) == records


@pytest.mark.parametrize("codec", CODECS)
def test_tidelog_producer_to_kafka_consumers(broker: BrokerProcess, codec: str) -> None:
    """msgpack in, Kafka out: every Kafka client reads what Tidelog's Producer wrote."""
    topic = f"t2k-{codec}"
    records = _expected(base_timestamp_ms())
    _produce_tidelog(broker.bootstrap, topic, codec, records)
    for name, consume in CONSUMERS.items():
        assert consume(broker.bootstrap, topic, len(records)) == records, name


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_producers_to_tidelog_consumer(broker: BrokerProcess, codec: str) -> None:
    """Kafka in, msgpack out: Tidelog's Consumer reads what each Kafka client wrote."""
    for name, produce in PRODUCERS.items():
        topic = f"k2t-{name}-{codec}"
        records = _writable(name, _expected(base_timestamp_ms()))
        produce(broker.bootstrap, topic, codec, records)
        assert _consume_tidelog(broker.bootstrap, topic, len(records)) == records, name


@pytest.mark.parametrize("codec", ["none", "zstd"])
def test_large_batches_cross_both_ways(broker: BrokerProcess, codec: str) -> None:
    """Thousands of records a batch: the column-wise conversion, worker-thread
    conversions and fetches answered from the segment file (sendfile spans)."""
    base = base_timestamp_ms()
    records: list[Record] = [
        (
            b"key-%d" % i if i % 3 else None,
            b"%06d" % i * 20,
            [("i", b"%d" % i)] if i % 5 == 0 else [],
            base + i,
        )
        for i in range(5000)
    ]
    _produce_confluent(broker.bootstrap, f"big-k-{codec}", codec, records)
    assert _consume_tidelog(broker.bootstrap, f"big-k-{codec}", len(records)) == records
    _produce_tidelog(broker.bootstrap, f"big-t-{codec}", codec, records)
    assert _consume_confluent(broker.bootstrap, f"big-t-{codec}", len(records)) == records
    assert _consume_kafka_python(broker.bootstrap, f"big-k-{codec}", len(records)) == records


def test_kafka_producer_to_tidelog_consume_cli(broker: BrokerProcess, tmp_path: Any) -> None:
    """`tidelog consume --format json` prints what confluent-kafka wrote."""
    topic = "k2cli"
    records = _expected(base_timestamp_ms())
    _produce_confluent(broker.bootstrap, topic, "zstd", records)
    out = subprocess.run(
        [sys.executable, "-m", "broker", "consume", topic, "--bootstrap-server",
         broker.bootstrap, "--offset", "start", "-n", str(len(records)), "--format", "json"],
        cwd=tmp_path, capture_output=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    lines = [json.loads(line) for line in out.decode().splitlines()]
    assert [line["offset"] for line in lines] == list(range(len(records)))
    assert [line.get("key") for line in lines] == [
        None if k is None else k.decode() for k, _, _, _ in records
    ]
    assert [line.get("value") for line in lines][:4] == ["v0", "no key", "empty key", ""]
    assert lines[4].get("value") is None
    assert [line["timestamp"] for line in lines] == [ts for *_, ts in records]
    assert lines[0]["headers"] == [{"key": "h", "value": "x"}]
    assert {line["timestamp_type"] for line in lines} == {"CreateTime"}


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_produce_and_consume(broker: BrokerProcess, codec: str) -> None:
    """kcat (Debian's, librdkafka 2.0) writes with each codec and reads back by offset."""
    topic = f"kcat-{codec}"
    lines = "".join(f"key{i}:value{i}\n" for i in range(50))
    subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-P", "-t", topic, "-p", "0", "-K:", "-z", codec],
        input=lines.encode(), timeout=60, check=True,
    )  # fmt: skip
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e",
         "-f", "%o %k %s\\n"],
        capture_output=True, timeout=60, check=True,
    ).stdout.decode()  # fmt: skip
    assert out.splitlines() == [f"{i} key{i} value{i}" for i in range(50)]
    # The codec survives storage: Tidelog's own consumer reads the same records.
    got = _consume_tidelog(broker.bootstrap, topic, 50)
    assert [(k, v) for k, v, _, _ in got] == [
        (f"key{i}".encode(), f"value{i}".encode()) for i in range(50)
    ]


def test_kcat_metadata_lists_this_broker(broker: BrokerProcess) -> None:
    _produce_tidelog(broker.bootstrap, "kcat-meta", "none", _expected(base_timestamp_ms()))
    out = subprocess.run(
        ["kcat", "-b", broker.bootstrap, "-L", "-t", "kcat-meta"],
        capture_output=True, timeout=60, check=True,
    ).stdout.decode()  # fmt: skip
    assert f"broker 1 at {broker.bootstrap} (controller)" in out
    assert 'topic "kcat-meta" with 1 partitions' in out


def test_offsets_earliest_latest_and_by_timestamp(broker: BrokerProcess) -> None:
    """ListOffsets through confluent-kafka, kafka-python and aiokafka agree with what
    was written: earliest, latest, and the first offset at or after a timestamp."""
    topic = "offsets"
    base = base_timestamp_ms()
    records = [(b"k", b"v%d" % i, [], base + 1000 * i) for i in range(10)]
    _produce_confluent(broker.bootstrap, topic, "lz4", records)

    consumer = confluent_kafka.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "o"})
    part = confluent_kafka.TopicPartition(topic, 0)
    assert consumer.get_watermark_offsets(part, timeout=CLIENT_TIMEOUT_S) == (0, 10)
    [found] = consumer.offsets_for_times(
        [confluent_kafka.TopicPartition(topic, 0, base + 3500)], timeout=CLIENT_TIMEOUT_S
    )
    assert found.offset == 4
    [past_end] = consumer.offsets_for_times(
        [confluent_kafka.TopicPartition(topic, 0, base + 60_000)], timeout=CLIENT_TIMEOUT_S
    )
    assert past_end.offset == -1  # Kafka's "no such record": OFFSET_END
    consumer.close()

    kp = kafka.KafkaConsumer(bootstrap_servers=broker.bootstrap)
    kpart = kafka.TopicPartition(topic, 0)
    assert kp.beginning_offsets([kpart]) == {kpart: 0}
    assert kp.end_offsets([kpart]) == {kpart: 10}
    looked_up = kp.offsets_for_times({kpart: base + 5000})[kpart]
    assert (looked_up.offset, looked_up.timestamp) == (5, base + 5000)
    assert kp.offsets_for_times({kpart: base + 60_000}) == {kpart: None}
    kp.close()

    async def aio() -> tuple[Any, Any]:
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap)
        await consumer.start()
        try:
            apart = aiokafka.TopicPartition(topic, 0)
            return await consumer.end_offsets([apart]), await consumer.offsets_for_times(
                {apart: base}
            )
        finally:
            await consumer.stop()

    ends, times = asyncio.run(aio())
    assert list(ends.values()) == [10]
    assert [(t.offset, t.timestamp) for t in times.values()] == [(0, base)]


def test_metadata_auto_creates_and_advertises(broker: BrokerProcess) -> None:
    """A topic a client asks about is created (auto.create.topics.enable), and the
    broker advertises the address the client connected to, node 1, as controller."""
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)
    assert producer.partitions_for("fresh-topic") == {0}
    producer.close()
    admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
    assert {b.id: (b.host, b.port) for b in cluster.brokers.values()} == {
        1: ("127.0.0.1", broker.port)
    }
    assert cluster.controller_id == 1
    with tidelog.Client(broker.bootstrap) as client:
        assert "fresh-topic" in [t["topic"] for t in client.metadata()]


def test_kafka_listen_and_advertised_listeners(tmp_path: Any) -> None:
    """`--kafka-listen` adds a Kafka-only port; `advertised.listeners` and `node.id` are
    what Metadata answers, and the usual port still serves both protocols."""
    process = start_broker(
        tmp_path / "data",
        "node.id=7",
        "advertised.listeners=PLAINTEXT://localhost:19999",
        "auto.create.topics.enable=false",
        extra_args=("--kafka-listen", "127.0.0.1:0"),
    )
    try:
        ready = process.events("broker_ready")[0]
        assert ready["protocols"] == ["tidelog", "kafka"]
        kafka_port = ready["kafka_port"]
        assert ready["kafka_listen"] == f"127.0.0.1:{kafka_port}"
        admin = confluent_kafka.admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{kafka_port}"})
        cluster = admin.list_topics(timeout=CLIENT_TIMEOUT_S)
        assert {b.id: (b.host, b.port) for b in cluster.brokers.values()} == {
            7: ("localhost", 19999)
        }
        assert cluster.controller_id == 7
        with KafkaSocket(("127.0.0.1", kafka_port)) as sock:
            body = {"topics": [{"name": "not-created"}], "allow_auto_topic_creation": True}
            [topic] = sock.call(METADATA, 8, body)["topics"]
            assert topic["error_code"] == UNKNOWN_TOPIC_OR_PARTITION  # auto-creation is off
        # The shared port still answers msgpack clients.
        with tidelog.Client(process.bootstrap) as client:
            assert client.metadata() == []
    finally:
        assert process.stop() == 0


def test_metrics_count_kafka_requests_apart(broker: BrokerProcess) -> None:
    """Kafka requests are counted per Kafka API beside the msgpack series, and the
    bytes of each protocol apart."""
    import urllib.request

    _produce_confluent(broker.bootstrap, "metrics-topic", "none", _expected(base_timestamp_ms()))
    _produce_tidelog(broker.bootstrap, "metrics-topic", "none", _expected(base_timestamp_ms()))
    url = f"http://127.0.0.1:{broker.metrics_port}/metrics"
    text = urllib.request.urlopen(url, timeout=10).read().decode()
    lines = text.splitlines()

    def value(prefix: str) -> float:
        matching = [float(line.split()[-1]) for line in lines if line.startswith(prefix)]
        assert matching, prefix
        return sum(matching)

    assert value('tidelog_kafka_requests_total{api="Produce",error="none"}') >= 1
    assert value('tidelog_kafka_requests_total{api="ApiVersions",error="none"}') >= 1
    assert value('tidelog_requests_total{api="produce",error="none"}') >= 1
    assert value('tidelog_network_bytes_total{direction="in",protocol="kafka"}') > 0
    assert value('tidelog_network_bytes_total{direction="out",protocol="tidelog"}') > 0
