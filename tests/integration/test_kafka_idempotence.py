"""Idempotent Kafka producers through the Kafka listener of the real broker:
kafka-python's KafkaProducer with its default settings (idempotence on),
confluent-kafka with `enable.idempotence=true`, and a batch sent twice with the same
producer id, epoch and sequence stored once."""

from __future__ import annotations

import functools
import time
import warnings
from collections.abc import Callable, Iterable, Iterator
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


# Records each chaos test sends: enough batches to be in flight across drops and the kill.
CHAOS_RECORDS = 2000
# Seconds a producer may take to deliver everything through the drops and the restart.
CHAOS_DELIVERY_S = 120.0

# Sends the values, paced as they are iterated, to partition 0 of the topic through the
# bootstrap address and returns the offset each was acknowledged at, in send order.
ChaosSend = Callable[[str, str, Iterable[bytes]], list[int]]


def _paced(values: list[bytes], happened: list[str], seen: list[str]) -> Iterator[bytes]:
    """Yield the values spread over the chaos (a pause every 100); once the last one is
    handed to the producer, copy what had happened into `seen`."""
    for i, value in enumerate(values):
        yield value
        if i % 100 == 99:
            time.sleep(0.05)
    seen += happened


def _produce_through_chaos(
    tmp_path: Path, broker_factory: BrokerFactory, topic: str, send: ChaosSend
) -> None:
    """Run `send` behind a proxy that drops its connections, with the broker killed
    with kill -9 and restarted meanwhile; every record acknowledged in order, stored once."""
    proxy = ChaosProxy(("127.0.0.1", 1))  # upstream set once the broker runs
    advertised = f"advertised.listeners=PLAINTEXT://{proxy.address}"
    data = tmp_path / "data"
    broker = broker_factory(advertised, data_dir=data)
    proxy.upstream = broker.address
    with WireClient(broker.address) as c:
        c.create_topic(topic, 1)
    sent = [b"%05d" % i for i in range(CHAOS_RECORDS)]
    restarted = functools.partial(broker_factory, advertised)
    before_last_send: list[str] = []
    with chaos(proxy, broker, restarted, data) as happened:
        offsets = send(proxy.address, topic, _paced(sent, happened, before_last_send))
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


def _send_kafka_python(bootstrap: str, topic: str, values: Iterable[bytes]) -> list[int]:
    producer = kafka.KafkaProducer(bootstrap_servers=bootstrap, linger_ms=2, batch_size=800)
    futures = [producer.send(topic, value=value, partition=0) for value in values]
    producer.flush(timeout=CHAOS_DELIVERY_S)
    offsets = [f.get(timeout=CLIENT_TIMEOUT_S).offset for f in futures]
    producer.close()
    return offsets


def _send_confluent_kafka(bootstrap: str, topic: str, values: Iterable[bytes]) -> list[int]:
    producer = confluent_kafka.Producer({
        "bootstrap.servers": bootstrap,
        "enable.idempotence": True,
        "message.timeout.ms": int(CHAOS_DELIVERY_S * 1000),  # outlives the restart
        "linger.ms": 2,
        "batch.num.messages": 20,  # many small batches in flight at each drop
        # librdkafka >= 2.8 forgets every broker and bootstraps again whenever all its
        # connections are down; under drops every few 100 ms that loop never produces.
        "metadata.recovery.strategy": "none",
    })  # fmt: skip
    delivered: dict[int, int] = {}
    errors: list[str] = []

    def on_delivery(
        i: int, err: confluent_kafka.KafkaError | None, msg: confluent_kafka.Message
    ) -> None:
        if err is not None:
            errors.append(f"record {i}: {err}")
        else:
            delivered[i] = msg.offset()

    count = 0
    for i, value in enumerate(values):
        report = functools.partial(on_delivery, i)
        producer.produce(topic, value=value, partition=0, on_delivery=report)
        producer.poll(0)
        count += 1
    assert producer.flush(CHAOS_DELIVERY_S) == 0
    assert errors == []  # every record delivered without error
    assert sorted(delivered) == list(range(count))  # each reported once
    return [delivered[i] for i in range(count)]


def test_kafka_python_retries_through_drops_and_kill_9_store_each_record_once(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    """kafka-python's default producer (idempotence on) through drops and a kill -9."""
    _produce_through_chaos(tmp_path, broker_factory, "kp-chaos", _send_kafka_python)


def test_confluent_kafka_retries_through_drops_and_kill_9_store_each_record_once(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    """librdkafka's idempotent producer through drops and a kill -9: its retries after
    the restart must not store a record twice nor leave a gap."""
    _produce_through_chaos(tmp_path, broker_factory, "ck-chaos", _send_confluent_kafka)
