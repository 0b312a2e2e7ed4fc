"""Idempotent Kafka producers through the Kafka listener of the real broker:
kafka-python's KafkaProducer with its default settings (idempotence on),
confluent-kafka with `enable.idempotence=true`, and a batch sent twice with the same
producer id, epoch and sequence stored once."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Protocol

import confluent_kafka
import pytest

import tidelog
from protocol import batch as tidelog_batch
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import INIT_PRODUCER_ID
from tests.conftest import BrokerFactory, BrokerProcess, start_broker
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S, KafkaSocket
from tests.integration.test_idempotence import ChaosProxy, chaos
from tests.integration.test_kafka_wire import _batch, _produce
from tests.integration.wire import WireClient, values_of

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    process = start_broker(tmp_path_factory.mktemp("kafka-idem") / "data", "num.partitions=1")
    yield process
    assert process.stop() == 0


def _stored(broker: BrokerProcess, topic: str) -> list[tidelog_batch.Record]:
    with tidelog.Client(broker.bootstrap) as client:
        return list(tidelog_batch.iter_records(client.fetch(topic, 0, 0).records))


def test_kafka_python_producer_with_default_settings(broker: BrokerProcess) -> None:
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap)  # idempotence on
    futures = [producer.send("kp-idem", value=b"%03d" % i, partition=0) for i in range(50)]
    producer.flush(timeout=CLIENT_TIMEOUT_S)
    offsets = [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    producer.close()
    assert offsets == list(range(50))
    with tidelog.Client(broker.bootstrap) as client:
        first = tidelog_batch.read_header(client.fetch("kp-idem", 0, 0).records)
    assert first.producer_id >= 0 and first.base_sequence == 0  # stamped by kafka-python
    assert [r.value for r in _stored(broker, "kp-idem")] == [b"%03d" % i for i in range(50)]


def test_a_batch_sent_twice_is_stored_once(broker: BrokerProcess) -> None:
    with KafkaSocket(broker.address) as sock:
        granted = sock.call(INIT_PRODUCER_ID, 1, {
            "transactional_id": None, "transaction_timeout_ms": 60_000,
        })  # fmt: skip
        assert granted["error_code"] == 0
        producer = (granted["producer_id"], granted["producer_epoch"])
        assert _produce(sock, "dup", _batch(b"other"))["error_code"] == 0
        first = _produce(sock, "dup", _batch(b"once", (*producer, 0)), acks=-1)
        again = _produce(sock, "dup", _batch(b"once", (*producer, 0)), acks=-1)
        assert first["error_code"] == again["error_code"] == 0
        assert again["base_offset"] == first["base_offset"] == 1
        gap = _produce(sock, "dup", _batch(b"gap", (*producer, 5)), acks=-1)
        assert gap["error_code"] == ERRORS_BY_NAME["OUT_OF_ORDER_SEQUENCE_NUMBER"].code
        # a transactional id goes to the transaction coordinator (docs/transactions.md)
        transactional = sock.call(INIT_PRODUCER_ID, 1, {
            "transactional_id": "tx", "transaction_timeout_ms": 60_000,
        })  # fmt: skip
        assert transactional["error_code"] == 0
        assert transactional["producer_id"] not in (-1, producer[0])
    assert [r.value for r in _stored(broker, "dup")] == [b"other", b"once"]


def test_confluent_kafka_idempotent_producer(broker: BrokerProcess) -> None:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 5}
    )
    failures: list[object] = []
    for i in range(50):
        producer.produce(
            "ck-idem", value=b"%03d" % i, partition=0,
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )  # fmt: skip
    assert producer.flush(CLIENT_TIMEOUT_S) == 0
    assert failures == []
    with tidelog.Client(broker.bootstrap) as client:
        first = tidelog_batch.read_header(client.fetch("ck-idem", 0, 0).records)
    assert first.producer_id >= 0  # librdkafka got an id and stamped its batches
    assert [r.value for r in _stored(broker, "ck-idem")] == [b"%03d" % i for i in range(50)]


# Records each chaos test sends: enough batches to be in flight across drops and the kill.
CHAOS_RECORDS = 2000
# Seconds a producer may take to deliver everything through the drops and the restart.
CHAOS_DELIVERY_S = 120.0


class ChaosProducer(Protocol):
    """One client library's idempotent producer, sending to partition 0 of one topic."""

    def send(self, value: bytes) -> None: ...

    def flush(self) -> list[int]:
        """Wait for every record sent so far; their offsets, in send order."""
        ...

    def close(self) -> None: ...


def _produce_through_chaos(
    tmp_path: Path,
    broker_factory: BrokerFactory,
    topic: str,
    open_producer: Callable[[str, str], ChaosProducer],
) -> None:
    """Produce behind a proxy that drops its connections, with the broker killed with
    kill -9 and restarted meanwhile; every record acknowledged in order, stored once."""
    proxy = ChaosProxy(("127.0.0.1", 1))  # upstream set once the broker runs
    advertised = f"advertised.listeners=PLAINTEXT://{proxy.address}"
    data = tmp_path / "data"
    broker = broker_factory(advertised, data_dir=data)
    proxy.upstream = broker.address
    with WireClient(broker.address) as c:
        c.create_topic(topic, 1)
    sent = [b"%05d" % i for i in range(CHAOS_RECORDS)]
    producer = open_producer(proxy.address, topic)
    producer.send(sent[0])
    assert producer.flush() == [0]  # the producer has its id and state before the chaos
    restarted = functools.partial(broker_factory, advertised)
    with chaos(proxy, broker, restarted, data) as happened:
        for i, value in enumerate(sent[1:], 1):
            producer.send(value)
            if i % 100 == 99:
                time.sleep(0.05)  # spread the sends over the chaos
        before_last_send = list(happened)
        offsets = producer.flush()
    producer.close()
    proxy.close()
    # The kill came before the last send, so at least that record went to the restarted broker.
    assert "kill -9" in before_last_send and happened.count("drop") >= 3, happened
    assert offsets == list(range(CHAOS_RECORDS))  # acknowledged in order, no offset twice
    with WireClient(proxy.upstream) as c:
        values: list[bytes | None] = []
        while len(values) < CHAOS_RECORDS + 1:
            got = values_of(c.fetch(topic, len(values))["records"])
            if not got:
                break
            values += got
    assert values == sent


class _KafkaPythonProducer:
    """kafka-python's KafkaProducer with its defaults (idempotence on), small batches."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = kafka.KafkaProducer(
            bootstrap_servers=bootstrap, linger_ms=2, batch_size=800
        )
        self._topic = topic
        self._futures: list[Any] = []

    def send(self, value: bytes) -> None:
        self._futures.append(self._producer.send(self._topic, value=value, partition=0))

    def flush(self) -> list[int]:
        self._producer.flush(timeout=CHAOS_DELIVERY_S)
        return [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in self._futures]

    def close(self) -> None:
        self._producer.close()


class _ConfluentProducer:
    """librdkafka's producer with `enable.idempotence=true`; delivery reports give offsets."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self._producer = confluent_kafka.Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "message.timeout.ms": int(CHAOS_DELIVERY_S * 1000),  # outlives the restart
            "linger.ms": 2,
            "batch.num.messages": 20,  # many small batches in flight at each drop
            # librdkafka >= 2.8 forgets every broker and bootstraps again whenever all its
            # connections are down; under drops every few 100 ms that loop never produces.
            "metadata.recovery.strategy": "none",
        })  # fmt: skip
        self._topic = topic
        self._delivered: dict[int, int] = {}
        self._errors: list[str] = []
        self._count = 0

    def _report(
        self, i: int, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message
    ) -> None:
        if err is not None:
            self._errors.append(f"record {i}: {err}")
        else:
            self._delivered[i] = msg.offset()

    def send(self, value: bytes) -> None:
        report = functools.partial(self._report, self._count)
        self._producer.produce(self._topic, value=value, partition=0, on_delivery=report)
        self._producer.poll(0)
        self._count += 1

    def flush(self) -> list[int]:
        assert self._producer.flush(CHAOS_DELIVERY_S) == 0
        assert self._errors == []  # every record delivered without error
        assert sorted(self._delivered) == list(range(self._count))  # each reported once
        return [self._delivered[i] for i in range(self._count)]

    def close(self) -> None:
        """librdkafka's producer is closed when it is garbage-collected."""


def test_kafka_python_retries_through_drops_and_kill_9_store_each_record_once(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    """kafka-python's default producer (idempotence on) through drops and a kill -9."""
    _produce_through_chaos(tmp_path, broker_factory, "kp-chaos", _KafkaPythonProducer)


def test_confluent_kafka_retries_through_drops_and_kill_9_store_each_record_once(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    """librdkafka's idempotent producer through drops and a kill -9: its retries after
    the restart must not store a record twice nor leave a gap."""
    _produce_through_chaos(tmp_path, broker_factory, "ck-chaos", _ConfluentProducer)
