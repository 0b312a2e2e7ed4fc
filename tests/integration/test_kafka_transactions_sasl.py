"""Transactions on a SASL listener with the authorizer on: confluent-kafka's
transactional producer for a principal granted Write on its TransactionalId (and on
the topic) commits; one without the TransactionalId right is refused at
init_transactions with TRANSACTIONAL_ID_AUTHORIZATION_FAILED (docs/security.md)."""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka as ck
import confluent_kafka.admin
import pytest

from broker.security.acl import AclBinding
from broker.security.acl_store import AclStore
from tests.broker.security.conftest import add_user
from tests.conftest import BrokerFactory
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S

pytestmark = pytest.mark.integration

TOPIC = "tx-orders"


def _config(port: int, user: str) -> dict[str, object]:
    return {
        "bootstrap.servers": f"127.0.0.1:{port}",
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": user,
        "sasl.password": f"{user}-pw",
    }


def test_transactional_id_acls_on_a_sasl_listener(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    for user in ("alice", "eve", "admin"):
        add_user(data, user, f"{user}-pw")
    topic_rights = [
        AclBinding.parse(f"User:{who}", "*", "Topic", TOPIC, "Literal", op, "Allow")
        for who in ("alice", "eve")
        for op in ("Write", "Read", "Describe")
    ]
    AclStore(data).add(
        [
            *topic_rights,
            AclBinding.parse("User:alice", "*", "TransactionalId", "alice-", "Prefixed", "Write",
                             "Allow"),
            AclBinding.parse("User:alice", "*", "Group", "*", "Literal", "Read", "Allow"),
        ]
    )  # fmt: skip
    broker = broker_factory(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms=SCRAM-SHA-512",
        "authorizer=on",
        "super.users=User:admin",
    )
    admin = ck.admin.AdminClient(_config(broker.port, "admin"))
    admin.create_topics([ck.admin.NewTopic(TOPIC, 1)])[TOPIC].result(CLIENT_TIMEOUT_S)

    producer = ck.Producer({**_config(broker.port, "alice"), "transactional.id": "alice-1"})
    producer.init_transactions(CLIENT_TIMEOUT_S)
    producer.begin_transaction()
    producer.produce(TOPIC, value=b"granted")
    producer.commit_transaction(CLIENT_TIMEOUT_S)

    refused = ck.Producer({**_config(broker.port, "eve"), "transactional.id": "alice-2"})
    with pytest.raises(ck.KafkaException) as raised:
        refused.init_transactions(CLIENT_TIMEOUT_S)
    assert raised.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED

    consumer = ck.Consumer(
        {
            **_config(broker.port, "alice"),
            "group.id": "alice-readers",
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.partition.eof": True,
        }
    )
    consumer.assign([ck.TopicPartition(TOPIC, 0, 0)])
    values = []
    deadline = time.monotonic() + CLIENT_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.2)
            if message is None:
                continue
            if message.error() is not None:
                break  # the end of the partition
            values.append(message.value())
    finally:
        consumer.close()
    assert values == [b"granted"]
