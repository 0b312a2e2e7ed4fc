"""Kafka's own Java tools against a bootstrap address (the real Kafka here), parsed."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest

from interop import java_tools as tools
from interop.targets import Target

pytestmark = pytest.mark.interop

PERF_RECORDS = 20_000
RETENTION_MS = "3600000"


def test_topics_and_configs(kafka: Target, unique: Callable[[str], str]) -> None:
    topic = unique("jtopic")
    created = tools.create_topic(kafka.bootstrap, topic, 3, {"cleanup.policy": "compact"})
    assert created == f"Created topic {topic}."
    assert topic in tools.list_topics(kafka.bootstrap)
    described = tools.describe_topic(kafka.bootstrap, topic)
    assert described["name"] == topic
    assert described["partition_count"] == 3
    assert described["replication_factor"] == 1
    assert described["configs"]["cleanup.policy"] == "compact"
    assert [p["partition"] for p in described["partitions"]] == [0, 1, 2]

    tools.alter_topic_config(kafka.bootstrap, topic, {"retention.ms": RETENTION_MS})
    assert tools.describe_topic_config(kafka.bootstrap, topic) == {
        "cleanup.policy": "compact",
        "retention.ms": RETENTION_MS,
    }
    with pytest.raises(tools.ToolError, match="already exists"):
        tools.create_topic(kafka.bootstrap, topic, 3)

    tools.delete_topic(kafka.bootstrap, topic)
    deadline = time.monotonic() + 30
    while topic in tools.list_topics(kafka.bootstrap) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert topic not in tools.list_topics(kafka.bootstrap)


def test_console_producer_consumer_and_consumer_groups(
    kafka: Target, unique: Callable[[str], str]
) -> None:
    topic, group = unique("jconsole"), unique("jgroup")
    tools.create_topic(kafka.bootstrap, topic, 1)
    sent = [("k1", "one"), ("k2", "two words"), ("k1", "three")]
    tools.console_produce(kafka.bootstrap, topic, sent)
    got = tools.console_consume(kafka.bootstrap, topic, len(sent), group=group)
    assert [(r["key"], r["value"]) for r in got] == sent
    assert [(r["partition"], r["offset"]) for r in got] == [(0, 0), (0, 1), (0, 2)]
    assert {r["timestamp_type"] for r in got} == {"CreateTime"}

    assert group in tools.list_groups(kafka.bootstrap)
    (row,) = tools.describe_group(kafka.bootstrap, group)
    assert (row["group"], row["topic"], row["partition"]) == (group, topic, 0)
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (3, 3, 0)


@pytest.mark.parametrize("acks", ["1", "all"])
def test_perf_tools(kafka: Target, unique: Callable[[str], str], acks: str) -> None:
    topic = unique(f"jperf-{acks}")
    tools.create_topic(kafka.bootstrap, topic, 1)
    produced = tools.producer_perf(kafka.bootstrap, topic, PERF_RECORDS, 100, acks)
    assert produced.records == PERF_RECORDS
    assert produced.records_per_s > 0
    assert 0 <= produced.p50_ms <= produced.p99_ms <= produced.max_latency_ms + 1
    consumed = tools.consumer_perf(kafka.bootstrap, topic, PERF_RECORDS)
    assert consumed["data.consumed.in.nMsg"] == PERF_RECORDS
    assert consumed["data.consumed.in.MB"] == pytest.approx(PERF_RECORDS * 100 / 2**20, rel=1e-3)
    assert consumed["nMsg.sec"] > 0


def test_a_failing_tool_reports_its_stderr(kafka: Target) -> None:
    with pytest.raises(tools.ToolError, match="does not exist"):
        tools.describe_topic(kafka.bootstrap, "no-such-topic-anywhere")
