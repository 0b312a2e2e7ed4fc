"""The admin scenarios side by side: Apache Kafka and Tidelog, the same client code, the
same observations; and Kafka still answers what tests/interop/admin_expected.py recorded
(which tests/integration/test_kafka_admin.py holds Tidelog to in CI)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from interop.admin_requests import admin_error_codes
from interop.admin_scenarios import ADMIN_DETAILS
from interop.kafka_server import BASE_PROPERTIES
from interop.observed import wait_until
from interop.targets import Target
from tests.interop.admin_expected import ADMIN_DETAILS as RECORDED

pytestmark = pytest.mark.interop


@pytest.mark.parametrize("client", sorted(ADMIN_DETAILS))
def test_tidelog_and_kafka_admin_clients_see_the_same(
    kafka: Target, tidelog: Target, unique: Callable[[str], str], client: str
) -> None:
    on_kafka = ADMIN_DETAILS[client](kafka.bootstrap, unique(f"adm-{client}"))
    on_tidelog = ADMIN_DETAILS[client](tidelog.bootstrap, unique(f"adm-{client}"))
    assert on_tidelog == on_kafka
    assert on_kafka == RECORDED[client]


# Where Tidelog's describe answer differs from Kafka's on purpose (docs/kafka.md, "Config
# differences"), or because interop/kafka_server.py sets the key in Kafka's server.properties.
TOPIC_DEFAULTS_THAT_DIFFER = {"message.timestamp.after.max.ms"}  # Kafka 4: 1 h; Tidelog: none
# Kafka has it as a broker key only; Tidelog lets a topic override it (docs/idempotence.md).
TOPIC_KEYS_ONLY_IN_TIDELOG = {"producer.id.expiration.ms"}
BROKER_KEYS_THAT_DIFFER = {
    "log.message.timestamp.after.max.ms",
    "max.connections",  # Tidelog's finite defaults (docs/operations.md)
    "max.connections.per.ip",
    "group.max.size",
    "sasl.enabled.mechanisms",  # Kafka's GSSAPI is not served; SCRAM by default
    "listeners",  # set per run in interop/kafka_server.py
    "queued.max.request.bytes",
    # uploads at once: 2 on this 2-core kind of machine, Kafka 10 (docs/retention.md)
    "remote.log.manager.copier.thread.pool.size",
    "log.dir",  # Kafka's default /tmp/kafka-logs; Tidelog has --data-dir
    "log.dirs",
    # set in interop/kafka_server.py's server.properties (besides BASE_PROPERTIES)
    "node.id",
    "advertised.listeners",
}


def _described(bootstrap: str, topic: str) -> tuple[dict[str, Any], dict[str, Any]]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics(
            [
                NewTopic(
                    topic, 1, 1, topic_configs={"retention.ms": "1000", "cleanup.policy": "compact"}
                )
            ]
        )
        described = wait_until(
            lambda: admin.describe_configs(
                [ConfigResource(ConfigResourceType.TOPIC, topic)],
                include_synonyms=True,
                config_filter="all",
            )["topic"].get(topic, {}),
            lambda entries: entries.get("retention.ms", {}).get("value") == "1000",
        )
        broker = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "1")],
            include_synonyms=True,
            config_filter="all",
        )["broker"]["1"]
    finally:
        admin.close()
    return described, broker


def _view(entry: dict[str, Any], *, read_only: bool) -> tuple[Any, ...]:
    synonyms = [(s["name"], s["value"], s["source"]) for s in entry["synonyms"]]
    shown = (entry["value"], entry["config_source"], entry["config_type"], synonyms)
    return (*shown, entry["read_only"]) if read_only else shown


def test_describe_configs_of_every_shared_key_as_kafka(
    kafka: Target, tidelog: Target, unique: Callable[[str], str]
) -> None:
    """Every config key Tidelog has, described as Kafka describes it: value, source,
    type, synonyms (and read-only for topic keys; no broker key is dynamic in Tidelog)."""
    kafka_topic, kafka_broker = _described(kafka.bootstrap, unique("cfg"))
    tidelog_topic, tidelog_broker = _described(tidelog.bootstrap, unique("cfg"))
    tidelog_keys = set(tidelog_topic) - TOPIC_KEYS_ONLY_IN_TIDELOG
    assert tidelog_keys < set(kafka_topic)  # Kafka has more (tiered storage, ...)
    for key in tidelog_keys - TOPIC_DEFAULTS_THAT_DIFFER:
        assert _view(tidelog_topic[key], read_only=True) == _view(
            kafka_topic[key], read_only=True
        ), key
    shared = (
        (set(tidelog_broker) & set(kafka_broker)) - BROKER_KEYS_THAT_DIFFER - set(BASE_PROPERTIES)
    )
    assert len(shared) > 30
    differ = {
        key: (
            _view(tidelog_broker[key], read_only=False),
            _view(kafka_broker[key], read_only=False),
        )
        for key in sorted(shared)
        if _view(tidelog_broker[key], read_only=False) != _view(kafka_broker[key], read_only=False)
    }
    assert differ == {}, "\n".join(f"{k}: tidelog {t} kafka {k_}" for k, (t, k_) in differ.items())
    assert all(entry["read_only"] for entry in tidelog_broker.values())


# What Apache Kafka 4.4 answered to interop.admin_requests' cases (recorded from a run).
KAFKA_CODES = {
    "create": [0],
    "create_existing": [36],  # TOPIC_ALREADY_EXISTS
    "replication_factor_3": [38],  # INVALID_REPLICATION_FACTOR
    "replication_factor_0": [38],
    "partitions_0": [37],  # INVALID_PARTITIONS
    "illegal_name": [17],  # INVALID_TOPIC_EXCEPTION
    "name_too_long": [17],
    "collides_in_one_request": [0, 0],  # checked against the topics before the request
    "collides": [0, 17],
    "bad_value": [40],  # INVALID_CONFIG
    "unknown_key": [40],
    "null_value": [40],
    "duplicate_names": [42],  # INVALID_REQUEST
    "cluster_metadata": [42],
    "append_to_scalar": [40],
    "null_set": [42],
    "duplicate_keys": [42],
    "alter_unknown_topic": [3],  # UNKNOWN_TOPIC_OR_PARTITION
    "delete_records_beyond": [1],  # OFFSET_OUT_OF_RANGE
    "delete_records_minus_two": [1],
    "delete_records_no_partition": [3],
    "delete_records_to_end": [0],
    "delete_unknown": [3, 3],
    "delete_twice_in_one": [42],
    "delete": [0],
}


def test_refusals_have_kafkas_error_codes(
    kafka: Target, tidelog: Target, unique: Callable[[str], str]
) -> None:
    on_kafka = admin_error_codes(kafka.bootstrap, unique("codes"))
    assert on_kafka == KAFKA_CODES
    assert admin_error_codes(tidelog.bootstrap, unique("codes")) == on_kafka
