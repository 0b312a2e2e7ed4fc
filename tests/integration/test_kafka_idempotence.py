"""Idempotent Kafka producers through the Kafka listener of the real broker:
kafka-python's KafkaProducer with its default settings (idempotence on),
confluent-kafka with `enable.idempotence=true`, and a batch sent twice with the same
producer id, epoch and sequence stored once."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

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
        refused = sock.call(INIT_PRODUCER_ID, 1, {
            "transactional_id": "tx", "transaction_timeout_ms": 60_000,
        })  # fmt: skip
        assert refused["error_code"] == ERRORS_BY_NAME["INVALID_REQUEST"].code
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


def test_kafka_python_retries_through_drops_and_kill_9_store_each_record_once(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    """kafka-python's default producer behind a proxy that drops its connections and
    a broker killed with kill -9 and restarted: every record acknowledged, stored once."""
    proxy = ChaosProxy(("127.0.0.1", 1))  # upstream set once the broker runs
    advertised = f"advertised.listeners=PLAINTEXT://{proxy.address}"
    data = tmp_path / "data"
    broker = broker_factory(advertised, data_dir=data)
    proxy.upstream = broker.address
    with WireClient(broker.address) as c:
        c.create_topic("kp-chaos", 1)
    total = 2000
    producer = kafka.KafkaProducer(bootstrap_servers=proxy.address, linger_ms=2, batch_size=800)
    restarted = functools.partial(broker_factory, advertised)
    with chaos(proxy, broker, restarted, data) as happened:
        futures = []
        for i in range(total):
            futures.append(producer.send("kp-chaos", value=b"%05d" % i, partition=0))
            if i % 100 == 99:
                time.sleep(0.05)
        producer.flush(timeout=120)
    offsets = [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    producer.close()
    proxy.close()
    assert "kill -9" in happened, happened
    assert offsets == list(range(total))  # acknowledged in order, no offset twice
    with WireClient(proxy.upstream) as c:
        values: list[bytes | None] = []
        while len(values) < total + 1:
            got = values_of(c.fetch("kp-chaos", len(values))["records"])
            if not got:
                break
            values += got
    assert values == [b"%05d" % i for i in range(total)]
