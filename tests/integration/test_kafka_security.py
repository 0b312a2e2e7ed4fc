"""Kafka clients nobody here wrote (kafka-python, confluent-kafka) against the real
broker over SASL_SSL with SCRAM-SHA-512 and ACLs: login, produce, consume, wrong
password, and a denied principal getting Kafka's authorization error."""

from __future__ import annotations

import contextlib
import gc
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest

from broker.security.acl import AclBinding
from broker.security.acl_store import AclStore
from tests.broker.security.conftest import Pki, add_user, make_pki
from tidelog import Client, Security

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.errors

pytestmark = pytest.mark.integration

TIMEOUT_S = 20
TOPIC = "kx-orders"


@pytest.fixture
def secured(broker_factory, tmp_path: Path) -> tuple[str, Pki, Any]:
    pki = make_pki(tmp_path / "pki")
    data = tmp_path / "data"
    add_user(data, "alice", "alice-pw")
    add_user(data, "eve", "eve-pw")
    AclStore(data).add(
        [
            AclBinding.parse("User:alice", "*", "Topic", "kx-", "Prefixed", op, "Allow")
            for op in ("Write", "Read", "Create", "Describe")
        ]
        + [AclBinding.parse("User:alice", "*", "Group", "*", "Literal", "Read", "Allow")]
    )
    broker = broker_factory(
        "listeners=SASL_SSL://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        *pki.tls_sets(),
        "authorizer=on",
    )
    address = f"127.0.0.1:{broker.port}"
    security = Security(
        "SASL_SSL",
        ssl_cafile=str(pki.ca_file),
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="alice",
        sasl_plain_password="alice-pw",
    )
    with Client(address, security=security) as client:
        client.create_topic(TOPIC)
    return address, pki, broker


def _kafka_python(address: str, pki: Pki, user: str, password: str) -> dict[str, object]:
    return {
        "bootstrap_servers": address,
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        "ssl_cafile": str(pki.ca_file),
    }


def _confluent(address: str, pki: Pki, user: str, password: str) -> dict[str, object]:
    return {
        "bootstrap.servers": address,
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": password,
        "ssl.ca.location": str(pki.ca_file),
    }


@contextlib.contextmanager
def _collect_abandoned_client() -> Iterator[None]:
    """kafka-python leaves its wake-up socketpair open when its constructor raises;
    collect it here, or its ResourceWarning is blamed on whichever test runs next."""
    try:
        yield
    finally:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ResourceWarning)
            gc.collect()


@pytest.fixture(scope="module", autouse=True)
def _collect_kafka_python_leftovers() -> Iterator[None]:
    """kafka-python clients refused a login leave sockets behind in cycles; collect them
    when this module ends, or their ResourceWarning is blamed on a later test."""
    yield
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        gc.collect()


def _assert_login_refused(config: dict[str, Any]) -> None:
    """In a function of its own, so that nothing of the failed client outlives it (the
    caught exception's frames hold it) when `_collect_abandoned_client` collects."""
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(**config)


def test_kafka_python_over_sasl_ssl(secured: tuple[str, Pki, Any]) -> None:
    address, pki, broker = secured
    producer = kafka.KafkaProducer(
        **_kafka_python(address, pki, "alice", "alice-pw"), enable_idempotence=False, acks="all"
    )
    for i in range(3):
        producer.send(TOPIC, value=b"v%d" % i, partition=0)
    producer.flush(timeout=TIMEOUT_S)
    producer.close()
    consumer = kafka.KafkaConsumer(
        **_kafka_python(address, pki, "alice", "alice-pw"),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=5000,
    )
    consumer.assign([kafka.TopicPartition(TOPIC, 0)])
    assert [m.value for m in consumer] == [b"v0", b"v1", b"v2"]
    consumer.close()
    with _collect_abandoned_client():
        _assert_login_refused(_kafka_python(address, pki, "alice", "wrong"))
    eve = kafka.KafkaConsumer(
        **_kafka_python(address, pki, "eve", "eve-pw"), enable_auto_commit=False
    )
    eve.assign([kafka.TopicPartition(TOPIC, 0)])
    assert eve.poll(timeout_ms=3000) == {}  # kafka-python retries; it reads nothing
    denied = [e for e in broker.events("request_denied") if e["principal"] == "User:eve"]
    assert denied and denied[0]["resource_name"] == TOPIC and denied[0]["protocol"] == "kafka"
    eve.close()


def test_confluent_kafka_over_sasl_ssl(secured: tuple[str, Pki, Any]) -> None:
    address, pki, broker = secured
    delivered: list[object] = []
    producer = confluent_kafka.Producer(_confluent(address, pki, "alice", "alice-pw"))
    for i in range(3):
        producer.produce(
            TOPIC, b"c%d" % i, partition=0, on_delivery=lambda e, m: delivered.append(e)
        )
    assert producer.flush(TIMEOUT_S) == 0 and delivered == [None, None, None]
    consumer = confluent_kafka.Consumer(
        {
            **_confluent(address, pki, "alice", "alice-pw"),
            "group.id": "kx",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([confluent_kafka.TopicPartition(TOPIC, 0, 0)])
    values = []
    for _ in range(50):
        message = consumer.poll(0.5)
        if message is not None and message.error() is None:
            values.append(message.value())
        if len(values) == 3:
            break
    consumer.close()
    assert values == [b"c0", b"c1", b"c2"]
    errors: list[object] = []
    eve = confluent_kafka.Producer(
        {**_confluent(address, pki, "eve", "eve-pw"), "message.timeout.ms": 10000}
    )
    eve.produce(TOPIC, b"x", partition=0, on_delivery=lambda e, m: errors.append(e))
    eve.flush(TIMEOUT_S)
    assert errors and errors[0].code() == confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    logged = broker.output()
    assert "alice-pw" not in logged and "eve-pw" not in logged
    assert any(e["principal"] == "User:alice" for e in broker.events("authentication_succeeded"))
