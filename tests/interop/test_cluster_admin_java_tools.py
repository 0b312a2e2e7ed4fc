"""Kafka's cluster-administration tools against Tidelog and Apache Kafka alike:
kafka-topics --alter --partitions, kafka-leader-election, kafka-reassign-partitions
--list, kafka-log-dirs, kafka-features describe and GetOffsetShell --time -3 (Kafka's
own classes from Maven's kafka-tools jar, interop/java_tools.py), each printing the
same on both brokers."""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import confluent_kafka
import pytest

from interop import java_tools as tools
from interop.targets import Target

pytestmark = pytest.mark.interop

TOOLS = "org.apache.kafka.tools."
# Offsets from now: records older than retention.ms (7 days) may be deleted at once.
STAMP_OFFSETS_MS = (-500, -100, -900)


def _run(main: str, bootstrap: str, *args: str) -> str:
    return tools.run_tool(TOOLS + main, ["--bootstrap-server", bootstrap, *args]).stdout


def _produce(bootstrap: str, topic: str) -> None:
    """Three records into partition 0, each delivery checked (flush alone hides errors)."""
    producer = confluent_kafka.Producer({"bootstrap.servers": bootstrap})
    errors: list[object] = []
    now_ms = int(time.time() * 1000)
    for timestamp in (now_ms + offset for offset in STAMP_OFFSETS_MS):
        producer.produce(
            topic, b"v" * 100, key=b"k", partition=0, timestamp=timestamp,
            on_delivery=lambda error, _message: errors.append(error),
        )  # fmt: skip
    assert producer.flush(60) == 0
    assert errors == [None, None, None]


@pytest.mark.parametrize("target", ["kafka", "tidelog"])
def test_cluster_admin_tools(
    kafka: Target, tidelog: Target, target: str, unique: Callable[[str], str]
) -> None:
    bootstrap = kafka.bootstrap if target == "kafka" else tidelog.bootstrap
    topic = unique("grow")
    tools.create_topic(bootstrap, topic, 1)
    _produce(bootstrap, topic)

    _run("TopicCommand", bootstrap, "--alter", "--topic", topic, "--partitions", "3")
    assert tools.describe_topic(bootstrap, topic)["partition_count"] == 3
    with pytest.raises(tools.ToolError, match="2 would not be an increase"):
        _run("TopicCommand", bootstrap, "--alter", "--topic", topic, "--partitions", "2")

    elected = _run(
        "LeaderElectionCommand", bootstrap,
        "--election-type", "preferred", "--topic", topic, "--partition", "0",
    )  # fmt: skip
    assert elected == f"Valid replica already elected for partitions {topic}-0\n"
    listed = _run("reassign.ReassignPartitionsCommand", bootstrap, "--list")
    assert listed == "No partition reassignments found.\n"

    dirs = _run("LogDirsCommand", bootstrap, "--describe", "--topic-list", topic)
    [broker] = json.loads(dirs.splitlines()[-1])["brokers"]
    [log_dir] = broker["logDirs"]
    sizes = {p["partition"]: p["size"] for p in log_dir["partitions"]}
    assert set(sizes) == {f"{topic}-{p}" for p in range(3)} and log_dir["error"] is None
    assert sizes[f"{topic}-0"] > 300 and sizes[f"{topic}-2"] == 0, dirs

    features = _run("FeatureCommand", bootstrap, "describe")
    [line] = [ln for ln in features.splitlines() if ln.startswith("Feature: metadata.version")]
    assert line.split()[1:8] == [
        "metadata.version", "SupportedMinVersion:", "3.3-IV3", "SupportedMaxVersion:",
        "4.4-IV2", "FinalizedVersionLevel:", "4.4-IV2",
    ]  # fmt: skip

    newest = _run("GetOffsetShell", bootstrap, "--topic", topic, "--partitions", "0",
                  "--time", "-3")  # fmt: skip
    assert newest == f"{topic}:0:1\n"  # the record with the largest timestamp
