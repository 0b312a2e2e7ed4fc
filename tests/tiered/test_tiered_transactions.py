"""Transactions on a tiered topic (docs/tiered-storage.md, docs/transactions.md): once
the segments holding committed and aborted transactions have left the local disk, a
read_committed Kafka consumer still gets exactly the committed records, in order (the
broker answers the aborted list from the remote segments' `.txnindex` objects), and a
read_uncommitted one gets every record."""

from __future__ import annotations

import json
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


def _uploaded_end(data: Path, topic: str) -> int:
    """The last offset the store holds of `topic`-0 (-1: none), from its manifest."""
    path = data / f"{topic}-0" / "remote-manifest.json"
    if not path.exists():
        return -1
    entries = json.loads(path.read_text())["segments"]
    return max(
        (e["end_offset"] for e in entries if e["state"] == "COPY_SEGMENT_FINISHED"), default=-1
    )


def test_an_open_transaction_holds_uploads_below_its_first_offset(
    broker_factory: BrokerFactory, tmp_path: Path, s3_server: Any
) -> None:
    """Segments at or past the LSO stay local until the transaction is decided: its
    records could still be aborted."""
    data = tmp_path / "data"
    broker = broker_factory(
        *s3_server.broker_options(),
        "remote.log.manager.task.interval.ms=100",
        "log.initial.task.delay.ms=0",
        data_dir=data,
        env=s3_server.env,
    )
    topic = "tiered-open-txn"
    with Client(broker.bootstrap) as client:
        client.create_topic(
            topic, 1, {"segment.bytes": SEGMENT_BYTES, "remote.storage.enable": "true"}
        )
    # Batches of PER_TXN records at most (a batch must fit a 16 KiB segment).
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap, "batch.num.messages": PER_TXN})
    for i in range(PER_TXN * 4):  # segments before the transaction: these may go
        plain.produce(topic, value=b"before-%d-" % i + b"x" * VALUE_BYTES, partition=0)
    plain.flush(CLIENT_TIMEOUT_S)
    with Client(broker.bootstrap) as client:
        first_txn_offset = client.list_offsets(topic, 0, "latest").offset  # type: ignore[union-attr]
    producer = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": "open",
            "batch.num.messages": PER_TXN,
        }
    )
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    for i in range(PER_TXN * 4):
        producer.produce(topic, value=b"open-%d-" % i + b"y" * VALUE_BYTES, partition=0)
    producer.flush(CLIENT_TIMEOUT_S)
    for i in range(PER_TXN * 4):  # more rolled segments past the open transaction
        plain.produce(topic, value=b"after-%d-" % i + b"z" * VALUE_BYTES, partition=0)
    plain.flush(CLIENT_TIMEOUT_S)
    deadline = time.monotonic() + 60
    while _uploaded_end(data, topic) < first_txn_offset - 1:
        assert time.monotonic() < deadline, "the segments before the transaction never uploaded"
        time.sleep(0.2)
    time.sleep(2.0)  # twenty uploader ticks: nothing at or past the LSO may follow
    assert _uploaded_end(data, topic) < first_txn_offset
    producer.commit_transaction(CLIENT_TIMEOUT_S)
    with Client(broker.bootstrap) as client:
        end = client.list_offsets(topic, 0, "latest").offset  # type: ignore[union-attr]
    deadline = time.monotonic() + 60
    while _uploaded_end(data, topic) < first_txn_offset + PER_TXN * 4:
        assert time.monotonic() < deadline, "the decided transaction's segments never uploaded"
        time.sleep(0.2)
    assert _uploaded_end(data, topic) < end
