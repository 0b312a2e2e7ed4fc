"""Kafka's own Java tools against a bootstrap address, parsed: the real Kafka, and the
console and consumer-group tools and the perf tools against Tidelog too (issue 19 item 5;
kafka-topics.sh and kafka-configs.sh against Tidelog are in test_admin_java_tools.py)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

import pytest

from interop import java_tools as tools
from interop.targets import Target

# Every tool is a JVM start (1-3 s, far more on a loaded machine); a test runs up to eight.
JAVA_TOOLS_TEST_TIMEOUT_S = 600
pytestmark = [pytest.mark.interop, pytest.mark.timeout(JAVA_TOOLS_TEST_TIMEOUT_S)]
T = TypeVar("T")

PERF_RECORDS = 20_000
# Against Tidelog the perf tools only have to work (bench/ measures throughput).
TIDELOG_PERF_RECORDS = 500
# A console consumer joins its group and commits within seconds on either broker.
LIVE_GROUP_TIMEOUT_S = 60.0
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


@pytest.fixture(params=["kafka", "tidelog"])
def target(request: pytest.FixtureRequest) -> Target:
    """The same tool steps against Apache Kafka and against Tidelog."""
    return request.getfixturevalue(request.param)


def test_console_producer_consumer_and_consumer_groups(
    target: Target, unique: Callable[[str], str]
) -> None:
    bootstrap = target.bootstrap
    topic, group = unique("jconsole"), unique("jgroup")
    tools.create_topic(bootstrap, topic, 1)
    sent = [("k1", "one"), ("k2", "two words"), ("k1", "three")]
    tools.console_produce(bootstrap, topic, sent)
    got = tools.console_consume(bootstrap, topic, len(sent), group=group)
    assert [(r["key"], r["value"]) for r in got] == sent
    assert [(r["partition"], r["offset"]) for r in got] == [(0, 0), (0, 1), (0, 2)]
    assert {r["timestamp_type"] for r in got} == {"CreateTime"}

    assert group in tools.list_groups(bootstrap)
    (row,) = tools.describe_group(bootstrap, group)
    assert (row["group"], row["topic"], row["partition"]) == (group, topic, 0)
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (3, 3, 0)


def test_console_tools_with_headers_and_a_group_reset_and_deleted(
    target: Target, unique: Callable[[str], str]
) -> None:
    """Headers through both console tools; a group's lag, its reset to the earliest
    offsets while empty (the consumer reads everything again), then its deletion."""
    bootstrap = target.bootstrap
    topic, group = unique("jheaders"), unique("jreset")
    tools.create_topic(bootstrap, topic, 1)
    headers = [[("h1", "v1"), ("h2", "v2")], [("h1", "second")], [("h3", "x")]]
    sent = [("k1", "one"), ("k2", "two"), ("k3", "three")]
    tools.console_produce(bootstrap, topic, sent, headers=headers)

    first = tools.console_consume(bootstrap, topic, 2, group=group, headers=True)
    assert [(r["key"], r["value"], r["headers"]) for r in first] == [
        (k, v, h) for (k, v), h in list(zip(sent, headers, strict=True))[:2]
    ]
    (row,) = tools.describe_group(bootstrap, group)
    assert (row["current_offset"], row["log_end_offset"], row["lag"]) == (2, 3, 1)
    state = tools.group_state(bootstrap, group)
    assert (state["state"], state["members"]) == ("Empty", "0")

    # Without --from-beginning the group's committed offset is where it resumes.
    (rest,) = tools.console_consume(bootstrap, topic, 1, group=group, from_beginning=False)
    assert (rest["offset"], rest["key"]) == (2, "k3")

    assert tools.reset_offsets_to_earliest(bootstrap, group, topic) == [
        {"topic": topic, "partition": 0, "offset": 0}
    ]
    (row,) = tools.describe_group(bootstrap, group)
    assert (row["current_offset"], row["lag"]) == (0, 3)
    again = tools.console_consume(bootstrap, topic, 3, group=group, from_beginning=False)
    assert [r["offset"] for r in again] == [0, 1, 2]

    assert "was successful" in tools.delete_group(bootstrap, group)
    assert group not in tools.list_groups(bootstrap)


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


def test_perf_tools_against_tidelog(tidelog: Target, unique: Callable[[str], str]) -> None:
    """kafka-producer-perf-test and kafka-consumer-perf-test complete against Tidelog
    (a few records: that they work; bench/ measures throughput)."""
    topic = unique("jperf-tidelog")
    tools.create_topic(tidelog.bootstrap, topic, 1)
    produced = tools.producer_perf(tidelog.bootstrap, topic, TIDELOG_PERF_RECORDS, 100, "all")
    assert produced.records == TIDELOG_PERF_RECORDS
    consumed = tools.consumer_perf(tidelog.bootstrap, topic, TIDELOG_PERF_RECORDS)
    assert consumed["data.consumed.in.nMsg"] == TIDELOG_PERF_RECORDS
    assert consumed["data.consumed.in.MB"] == pytest.approx(
        TIDELOG_PERF_RECORDS * 100 / 2**20, rel=1e-2
    )


def test_consumer_groups_on_a_live_group(target: Target, unique: Callable[[str], str]) -> None:
    """kafka-consumer-groups on a group with a running console consumer: its member
    (consumer id, host as Kafka writes it, client id) on every partition, state Stable,
    and --delete refused while it is not empty."""
    bootstrap = target.bootstrap
    topic, group = unique("jlive"), unique("jlivegroup")
    tools.create_topic(bootstrap, topic, 2)
    tools.console_produce(bootstrap, topic, [("a", "1"), ("b", "2"), ("c", "3")])
    with tools.running_console_consumer(bootstrap, topic, group):
        state = _wait_for(
            lambda: tools.group_state(bootstrap, group), lambda s: s["state"] == "Stable"
        )
        assert (state["assignment_strategy"], state["members"]) == ("range", "1")
        rows = _wait_for(
            lambda: tools.describe_group(bootstrap, group),
            lambda rows: sum(r["current_offset"] or 0 for r in rows) == 3,
        )
        assert [r["partition"] for r in rows] == [0, 1]
        assert {r["client_id"] for r in rows} == {"console-consumer"}
        assert {r["host"] for r in rows} == {"/127.0.0.1"}  # Java's InetAddress.toString
        assert len({r["consumer_id"] for r in rows}) == 1
        assert sum(r["log_end_offset"] for r in rows) == 3
        assert {r["lag"] for r in rows} == {0}
        # The tool reports the refusal on stdout and exits 0, against both brokers.
        refused = tools.delete_group(bootstrap, group)
        assert "GroupNotEmptyException: The group is not empty." in refused
        assert group in tools.list_groups(bootstrap)


def _wait_for(probe: Callable[[], T], done: Callable[[T], bool]) -> T:
    """Poll a tool until the group reaches what `done` checks (a join takes seconds; until
    the consumer's first join the tools say the group does not exist)."""
    deadline = time.monotonic() + LIVE_GROUP_TIMEOUT_S
    while True:
        try:
            value = probe()
        except tools.ToolError:
            if time.monotonic() > deadline:
                raise
        else:
            if done(value) or time.monotonic() > deadline:
                return value
        time.sleep(1)
