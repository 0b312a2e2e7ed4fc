"""Transactions on a tiered topic (docs/tiered-storage.md, docs/transactions.md): once
the segments holding committed and aborted transactions have left the local disk, a
read_committed Kafka consumer still gets exactly the committed records, in order (the
broker answers the aborted list from the remote segments' `.txnindex` objects), and a
read_uncommitted one gets every record."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from tests.conftest import BrokerFactory
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S
from tests.integration.test_kafka_transactions import _read
from tidelog.client import Client

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]

SEGMENT_BYTES = 16 * 1024
TRANSACTIONS, PER_TXN, VALUE_BYTES = 16, 40, 150


def test_read_committed_below_the_local_log_start_leaves_aborted_records_out(
    broker_factory: BrokerFactory, tmp_path: Path, s3_server: Any
) -> None:
    broker = broker_factory(
        *s3_server.broker_options(),
        "remote.log.manager.task.interval.ms=100",
        "log.initial.task.delay.ms=0",
        data_dir=tmp_path / "data",
        env=s3_server.env,
    )
    topic = "tiered-txn"
    with Client(broker.bootstrap) as client:
        client.create_topic(
            topic,
            1,
            {
                "segment.bytes": SEGMENT_BYTES,
                "remote.storage.enable": "true",
                "local.retention.bytes": SEGMENT_BYTES,
            },
        )
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tiered"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    committed: list[bytes] = []
    every: list[bytes] = []
    for txn in range(TRANSACTIONS):
        producer.begin_transaction()
        values = [b"%d-%d-" % (txn, i) + b"x" * VALUE_BYTES for i in range(PER_TXN)]
        for value in values:
            producer.produce(topic, value=value, partition=0)
        producer.flush(CLIENT_TIMEOUT_S)
        every.extend(values)
        if txn % 3 == 1:
            producer.abort_transaction(CLIENT_TIMEOUT_S)
        else:
            producer.commit_transaction(CLIENT_TIMEOUT_S)
            committed.extend(values)
    # A last committed transaction rolls the segment holding the final marker.
    producer.begin_transaction()
    tail = [b"tail-%d-" % i + b"y" * VALUE_BYTES for i in range(PER_TXN)]
    for value in tail:
        producer.produce(topic, value=value, partition=0)
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    committed.extend(tail)
    every.extend(tail)
    with Client(broker.bootstrap) as client:
        deadline = time.monotonic() + 60
        # Most of the log, aborted transactions included, must be in the store only.
        while (local := client.list_offsets(topic, 0, "earliest_local")) is None or (
            local.offset < PER_TXN * TRANSACTIONS // 2
        ):
            assert time.monotonic() < deadline, "local retention never moved the local start"
            time.sleep(0.2)
        assert client.list_offsets(topic, 0, "earliest").offset == 0  # type: ignore[union-attr]
    assert _read(broker, topic, "read_committed", partitions=1) == committed
    assert _read(broker, topic, "read_uncommitted", partitions=1) == every
