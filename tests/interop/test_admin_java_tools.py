"""Kafka's own admin tools against Tidelog: kafka-topics.sh and kafka-configs.sh
(TopicCommand, ConfigCommand from Maven's kafka-tools jar, interop/java_tools.py), the
same steps tests/interop/test_java_tools.py runs against Apache Kafka, and where both
brokers refuse, the same refusal."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from interop import java_tools as tools
from interop.targets import Target

pytestmark = pytest.mark.interop

RETENTION_MS = "3600000"
# Not dynamic in Kafka either: both brokers refuse to change it without a restart.
STATIC_BROKER_KEY = "num.partitions=3"


def _configs(bootstrap: str, *args: str) -> str:
    return tools.run_tool(tools.CONFIGS, ["--bootstrap-server", bootstrap, *args]).stdout


def test_kafka_topics_and_kafka_configs(tidelog: Target, unique: Callable[[str], str]) -> None:
    bootstrap = tidelog.bootstrap
    topic = unique("jadm")
    assert (
        tools.create_topic(bootstrap, topic, 3, {"cleanup.policy": "compact"})
        == f"Created topic {topic}."
    )
    assert topic in tools.list_topics(bootstrap)
    described = tools.describe_topic(bootstrap, topic)
    assert (described["partition_count"], described["replication_factor"]) == (3, 1)
    assert described["configs"] == {"cleanup.policy": "compact"}
    assert [p["leader"] for p in described["partitions"]] == [1, 1, 1]

    tools.alter_topic_config(bootstrap, topic, {"retention.ms": RETENTION_MS})
    assert tools.describe_topic_config(bootstrap, topic) == {
        "cleanup.policy": "compact",
        "retention.ms": RETENTION_MS,
    }
    _configs(
        bootstrap,
        "--alter",
        "--entity-type",
        "topics",
        "--entity-name",
        topic,
        "--delete-config",
        "cleanup.policy",
    )
    assert tools.describe_topic_config(bootstrap, topic) == {"retention.ms": RETENTION_MS}
    with pytest.raises(tools.ToolError, match="already exists"):
        tools.create_topic(bootstrap, topic, 3)

    tools.delete_topic(bootstrap, topic)
    deadline = time.monotonic() + 30
    while topic in tools.list_topics(bootstrap) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in tools.list_topics(bootstrap)


@pytest.mark.parametrize("target", ["kafka", "tidelog"])
def test_broker_configs_with_kafka_configs(kafka: Target, tidelog: Target, target: str) -> None:
    bootstrap = kafka.bootstrap if target == "kafka" else tidelog.bootstrap
    out = _configs(
        bootstrap, "--describe", "--entity-type", "brokers", "--entity-name", "1", "--all"
    )
    assert out.startswith("All configs for broker 1 are:")
    described = tools.parse_config_description(out)
    assert described["log.retention.hours"] == "168"
    assert described["log.segment.bytes"] == "1073741824"
    assert (
        "log.retention.hours=168 sensitive=false synonyms={DEFAULT_CONFIG:log.retention.hours=168}"
        in out
    )
    with pytest.raises(
        tools.ToolError, match=r"Cannot update these configs dynamically: \[num.partitions\]"
    ):
        _configs(
            bootstrap,
            "--alter",
            "--entity-type",
            "brokers",
            "--entity-name",
            "1",
            "--add-config",
            STATIC_BROKER_KEY,
        )
