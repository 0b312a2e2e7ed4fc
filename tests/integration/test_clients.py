"""The client library (Client, AsyncClient, Producer, Consumer) against the real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import trio

from protocol.batch import encode_batch, iter_records
from protocol.errors import OffsetOutOfRange, TopicAlreadyExists
from tests.conftest import BrokerProcess, start_broker
from tidelog.aio import open_client
from tidelog.client import Client
from tidelog.consumer import Consumer, TopicPartition
from tidelog.producer import Producer

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    """One broker for the module; every test uses its own topic names."""
    process = start_broker(tmp_path_factory.mktemp("clients") / "data")
    yield process
    assert process.stop() == 0


def test_producer_to_consumer_round_trip(broker: BrokerProcess) -> None:
    with Client(broker.bootstrap) as admin:
        admin.create_topic("round", partitions=3)
    sent = {}
    with Producer(broker.bootstrap, compression_type="zstd", linger_ms=20) as producer:
        for i in range(300):
            key = b"key-%d" % (i % 7)
            future = producer.send("round", b"value-%d" % i, key=key, headers=[("i", b"%d" % i)])
            sent[i] = future
        bulk = producer.send_batch("round", [b"bulk-%d" % i for i in range(500)], partition=2)
    metas = {i: f.get(10) for i, f in sent.items()}
    consumer = Consumer(
        "round",
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        consumer_timeout_ms=500,
    )
    with consumer:
        records = list(consumer)
    assert len(records) == 800
    by_place = {(r.partition, r.offset): r for r in records}
    for i, meta in metas.items():
        record = by_place[(meta.partition, meta.offset)]
        assert record.value == b"value-%d" % i and record.headers == (("i", b"%d" % i),)
    # One key, one partition, in send order.
    per_key: dict[bytes, set[int]] = {}
    for record in records:
        if record.key is not None:
            per_key.setdefault(record.key, set()).add(record.partition)
    assert all(len(partitions) == 1 for partitions in per_key.values())
    base = bulk.get(10).base_offset
    bulk_values = [by_place[(2, base + i)].value for i in range(500)]
    assert bulk_values == [b"bulk-%d" % i for i in range(500)]


def test_consumer_resets_after_delete_records(broker: BrokerProcess) -> None:
    tp = TopicPartition("trimmed", 0)
    with Client(broker.bootstrap) as admin:
        admin.create_topic("trimmed")
        admin.produce("trimmed", 0, encode_batch([(None, b"%d" % i, None, i) for i in range(10)]))
        assert admin.delete_records("trimmed", 0, 6) == 6
        with pytest.raises(OffsetOutOfRange):
            admin.fetch("trimmed", 0, 2)
    with Consumer(
        bootstrap_servers=broker.bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=300
    ) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 2)
        assert [r.value for r in consumer] == [b"6", b"7", b"8", b"9"]
        assert consumer.beginning_offsets([tp]) == {tp: 6}
        assert consumer.offsets_for_times({tp: 8})[tp].offset == 8


def test_consumer_trims_the_first_batch_to_the_sought_offset(broker: BrokerProcess) -> None:
    tp = TopicPartition("mid", 0)
    with Client(broker.bootstrap) as admin:
        admin.create_topic("mid")
        admin.produce("mid", 0, encode_batch([(None, b"%d" % i, None, 1) for i in range(100)]))
    with Consumer(bootstrap_servers=broker.bootstrap, consumer_timeout_ms=300) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 57)
        polled = consumer.poll(timeout_ms=5_000, max_records=5)
        assert [r.offset for r in polled[tp]] == [57, 58, 59, 60, 61]
        assert consumer.position(tp) == 62


def test_blocking_client_pipelines_in_order(broker: BrokerProcess) -> None:
    with Client(broker.bootstrap) as client:
        client.create_topic("pipe")
        with pytest.raises(TopicAlreadyExists):
            client.create_topic("pipe")
        body = {
            "acks": 1,
            "timeout_ms": 5_000,
            "topics": [
                {
                    "topic": "pipe",
                    "partitions": [
                        {"partition": 0, "records": encode_batch([(None, b"x", None, 1)])}
                    ],
                }
            ],
        }
        ids = [client.send("produce", body) for _ in range(50)]
        replies = [client.receive() for _ in ids]
        assert [r.id for r in replies] == ids
        offsets = [r.result()["topics"][0]["partitions"][0]["base_offset"] for r in replies]
        assert offsets == list(range(50))
        assert client.produce("pipe", 0, encode_batch([(None, b"y", None, 1)]), acks=0) is None
        assert client.list_offsets("pipe", 0, "latest").offset == 51


async def test_async_client_long_poll_wakes_on_produce(broker: BrokerProcess) -> None:
    async with open_client(broker.bootstrap) as reader, open_client(broker.bootstrap) as writer:
        await writer.create_topic("wake")
        fetched: list[bytes] = []

        async def long_poll() -> None:
            result = await reader.fetch("wake", 0, 0, max_wait_ms=30_000, min_bytes=1)
            fetched.extend(r.value for r in iter_records(result.records))

        # Without the wake-up the fetch would sit out its 30 s: fail well before that.
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(long_poll)
                await trio.sleep(0.2)  # let the fetch reach the broker and start waiting
                batch = encode_batch([(None, b"hello", None, 1)])
                await writer.produce("wake", 0, batch, acks=1)
        assert fetched == [b"hello"]


async def test_async_client_concurrent_producers_share_a_connection(
    broker: BrokerProcess,
) -> None:
    async with open_client(broker.bootstrap) as client:
        await client.create_topic("shared")
        results: list[int] = []

        async def produce(i: int) -> None:
            batch = encode_batch([(None, b"%d" % i, None, 1)])
            answer = await client.produce("shared", 0, batch, acks=-1)
            assert answer is not None
            results.append(answer.base_offset)

        async with trio.open_nursery() as nursery:
            for i in range(40):
                nursery.start_soon(produce, i)
        assert sorted(results) == list(range(40))


def test_consumer_group_commits_and_resumes(broker: BrokerProcess) -> None:
    tp = TopicPartition("resume", 0)
    with Client(broker.bootstrap) as admin:
        admin.create_topic("resume")
        admin.produce("resume", 0, encode_batch([(None, b"%d" % i, None, 1) for i in range(10)]))
    options = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": "readers",
        "auto_offset_reset": "earliest",
        "consumer_timeout_ms": 300,
    }
    with Consumer(**options) as first:  # type: ignore[arg-type]
        first.assign([tp])
        assert first.committed(tp) is None
        read = first.poll(timeout_ms=5_000, max_records=4)[tp]
        assert [r.value for r in read] == [b"0", b"1", b"2", b"3"]
        first.commit()
        assert first.committed(tp) == 4
    with Consumer(**options) as second:  # type: ignore[arg-type]
        second.assign([tp])
        assert [r.value for r in second] == [b"%d" % i for i in range(4, 10)]
        second.commit({tp: 7})
    with Consumer(**options) as third:  # type: ignore[arg-type]
        third.assign([tp])
        assert third.position(tp) == 7
    with (
        Consumer(bootstrap_servers=broker.bootstrap) as no_group,
        pytest.raises(ValueError, match="group_id"),
    ):
        no_group.commit()
