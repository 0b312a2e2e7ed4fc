"""The admin scenarios side by side: Apache Kafka and Tidelog, the same client code, the
same observations; and Kafka still answers what tests/interop/admin_expected.py recorded
(which tests/integration/test_kafka_admin.py holds Tidelog to in CI)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from kafka import KafkaAdminClient
from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

from interop.admin_scenarios import ADMIN_DETAILS
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
BROKER_KEYS_THAT_DIFFER = {
    "log.message.timestamp.after.max.ms",
    "max.connections",  # Tidelog's finite defaults (docs/operations.md)
    "queued.max.request.bytes",
    "log.dir",  # Kafka's default /tmp/kafka-logs; Tidelog has --data-dir
    "log.dirs",
    # set in interop/kafka_server.py's server.properties, not in Tidelog's
    "num.partitions",
    "auto.create.topics.enable",
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
    assert set(tidelog_topic) < set(kafka_topic)  # Kafka has more (tiered storage, ...)
    for key in set(tidelog_topic) - TOPIC_DEFAULTS_THAT_DIFFER:
        assert _view(tidelog_topic[key], read_only=True) == _view(
            kafka_topic[key], read_only=True
        ), key
    shared = (set(tidelog_broker) & set(kafka_broker)) - BROKER_KEYS_THAT_DIFFER
    assert len(shared) > 30
    for key in shared:
        assert _view(tidelog_broker[key], read_only=False) == _view(
            kafka_broker[key], read_only=False
        ), key
    assert all(entry["read_only"] for entry in tidelog_broker.values())
