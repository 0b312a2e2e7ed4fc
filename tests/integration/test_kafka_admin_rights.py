"""The new admin APIs on a SASL broker with the authorizer on, through kafka-python's
classes: a principal with the rights Kafka asks (an ACL, or a super user) is served, one
without gets Kafka's authorization error and changes nothing."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import confluent_kafka
import pytest

from broker.security.acl import AclBinding
from broker.security.acl_store import AclStore
from tests.broker.security.conftest import add_user
from tests.conftest import BrokerProcess
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S
from tests.integration.kp_wire import KpWire

pytestmark = pytest.mark.integration

TOPIC_DENIED, CLUSTER_DENIED = 29, 31
SETTINGS = (
    "listeners=SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms=PLAIN",
    "authorizer=on",
    "super.users=User:admin",
    "connection.failed.authentication.delay.ms=0",
)
QUOTA_ENTRY = {
    "entity": [{"entity_type": "client-id", "entity_name": "rights"}],
    "ops": [{"key": "producer_byte_rate", "value": 1e6, "remove": False}],
}
EPOCH_TOPICS = [
    {
        "topic": "rights",
        "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
    }
]


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Path) -> BrokerProcess:
    data = tmp_path / "data"
    for name in ("admin", "alice", "bob"):
        add_user(data, name, f"{name}-pw")
    AclStore(data).add(
        [
            AclBinding.parse("User:alice", "*", "Cluster", "kafka-cluster", "Literal", op, "Allow")
            for op in ("DescribeConfigs", "AlterConfigs")
        ]
        + [AclBinding.parse("User:alice", "*", "Topic", "rights", "Literal", "Describe", "Allow")]
    )
    broker = broker_factory(*SETTINGS)
    admin = confluent_kafka.Producer({
        "bootstrap.servers": broker.bootstrap, "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": "admin-pw",
    })  # fmt: skip
    admin.produce("rights", b"one")
    assert admin.flush(CLIENT_TIMEOUT_S) == 0
    return broker


def _wire(broker: BrokerProcess, name: str) -> KpWire:
    wire = KpWire(broker.address)
    wire.login(name, f"{name}-pw")
    return wire


def test_quotas_need_the_cluster_config_rights(broker: BrokerProcess) -> None:
    with _wire(broker, "bob") as bob:
        altered = bob.ask(49, 1, entries=[QUOTA_ENTRY], validate_only=False)
        assert [e.error_code for e in altered.entries] == [CLUSTER_DENIED]
        described = bob.ask(48, 1, components=[], strict=False)
        assert (described.error_code, described.entries) == (CLUSTER_DENIED, None)
    with _wire(broker, "alice") as alice:
        altered = alice.ask(49, 1, entries=[QUOTA_ENTRY], validate_only=False)
        assert [e.error_code for e in altered.entries] == [0]
        described = alice.ask(48, 1, components=[], strict=False)
        assert described.error_code == 0
        assert [(v.key, v.value) for v in described.entries[0].values] == [
            ("producer_byte_rate", 1e6)
        ]


def test_scram_users_need_the_cluster_rights(broker: BrokerProcess) -> None:
    upsert = {"name": "carol", "mechanism": 1, "iterations": 4096,
              "salt": b"s" * 16, "salted_password": b"p" * 32}  # fmt: skip
    with _wire(broker, "alice") as alice:  # no Alter or Describe on the cluster
        altered = alice.ask(51, 0, deletions=[], upsertions=[upsert])
        assert [(r.user, r.error_code) for r in altered.results] == [("carol", CLUSTER_DENIED)]
        described = alice.ask(50, 0, users=None)
        assert described.error_code == CLUSTER_DENIED
    with _wire(broker, "admin") as admin:
        described = admin.ask(50, 0, users=None)
        assert sorted(r.user for r in described.results) == ["admin", "alice", "bob"]
        altered = admin.ask(51, 0, deletions=[], upsertions=[upsert])
        assert [(r.user, r.error_code) for r in altered.results] == [("carol", 0)]


def test_offset_for_leader_epoch_needs_describe_on_the_topic(broker: BrokerProcess) -> None:
    with _wire(broker, "bob") as bob:
        answer = bob.ask(23, 4, replica_id=-1, topics=EPOCH_TOPICS)
        assert answer.topics[0].partitions[0].error_code == TOPIC_DENIED
    with _wire(broker, "alice") as alice:
        answer = alice.ask(23, 4, replica_id=-1, topics=EPOCH_TOPICS)
        part = answer.topics[0].partitions[0]
        assert (part.error_code, part.leader_epoch, part.end_offset) == (0, 0, 1)
