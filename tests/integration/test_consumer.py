"""The Consumer's fetch-ahead pipeline against the real broker."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from protocol.batch import encode_batch
from tests.conftest import BrokerProcess, start_broker
from tidelog.client import Client
from tidelog.consumer import Consumer, TopicPartition

pytestmark = pytest.mark.integration

BATCHES = 20
BATCH_RECORDS = 100
TOTAL = BATCHES * BATCH_RECORDS


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("consumer") / "data")
    with Client(process.bootstrap) as admin:
        admin.create_topic("ahead")
        for b in range(BATCHES):
            values = [b"%d" % (b * BATCH_RECORDS + i) for i in range(BATCH_RECORDS)]
            admin.produce("ahead", 0, encode_batch([(None, v, None, 1) for v in values]))
    yield process
    assert process.stop() == 0


def small_fetches(broker: BrokerProcess, **options: object) -> Consumer:
    """About one batch per fetch, so reading the topic takes many fetches ahead."""
    return Consumer(
        bootstrap_servers=broker.bootstrap,
        auto_offset_reset="earliest",
        max_partition_fetch_bytes=1_000,
        consumer_timeout_ms=500,
        **options,  # type: ignore[arg-type]
    )


def test_commits_between_polls_keep_every_record(broker: BrokerProcess) -> None:
    tp = TopicPartition("ahead", 0)
    values: list[bytes] = []
    with small_fetches(broker, group_id="ahead-readers") as consumer:
        consumer.assign([tp])
        polls = 0
        while len(values) < TOTAL:
            polled = consumer.poll(timeout_ms=5_000)
            values += [r.value for r in polled.get(tp, [])]
            consumer.commit()  # a blocking request while the next fetch is on its way
            assert consumer.committed(tp) == consumer.position(tp) == len(values)
            polls += 1
        assert consumer.poll(timeout_ms=0) == {}
    assert values == [b"%d" % i for i in range(TOTAL)]
    assert polls >= BATCHES


def test_seeks_while_a_fetch_is_ahead(broker: BrokerProcess) -> None:
    tp = TopicPartition("ahead", 0)
    with small_fetches(broker) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, 0)
        assert next(consumer).offset == 0
        consumer.seek(tp, 1_234)
        assert [r.offset for r in consumer.poll(timeout_ms=5_000, max_records=3)[tp]] == [
            1_234,
            1_235,
            1_236,
        ]
        consumer.seek(tp, TOTAL - 2)
        assert [r.value for r in consumer] == [b"%d" % (TOTAL - 2), b"%d" % (TOTAL - 1)]
        consumer.seek_to_beginning(tp)
        assert sum(1 for _ in consumer) == TOTAL
