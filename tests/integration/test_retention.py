"""Retention against the real `tidelog serve` process, with small intervals.

Records carry explicit timestamps (hours in the past, or in the future), so time
retention is exercised without waiting for time to pass; the tests wait only for
the broker's retention passes, which run every RETENTION_CHECK_MS.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.batch import encode_batch
from protocol.errors import OffsetOutOfRange, UnknownTopicOrPartition
from protocol.retention_schema import explain_retention
from tests.conftest import ROOT, BrokerFactory, BrokerProcess
from tidelog.client import Client

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
RETENTION_CHECK_MS = 100
FAST_RETENTION = (
    f"log.retention.check.interval.ms={RETENTION_CHECK_MS}",
    "log.initial.task.delay.ms=0",
)
# No pass runs during the test: the explain verdicts stay as produced.
NO_RETENTION_PASS = ("log.retention.check.interval.ms=3600000", "log.initial.task.delay.ms=0")
# With segment.bytes=200 every one-record batch below gets its own segment.
SMALL_SEGMENTS = {"segment.bytes": 200, "segment.index.bytes": 4096}
WAIT_S = 20.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def one_record(ts_ms: int, key: bytes = b"key") -> bytes:
    return encode_batch([(key, b"v" * 100, None, ts_ms)])


BATCH_BYTES = len(one_record(0))


def produce(client: Client, topic: str, *timestamps: int, keys: bool = False) -> None:
    """One batch (so one small segment) per timestamp.

    Retention is paused while producing: otherwise a pass that runs between two
    appends acts on half the data, and the test's expectations (one pass over the
    whole log) hold only when the machine is fast enough.
    """
    entry = client.describe_configs(topic)["retention.ms"]
    client.alter_configs(topic, {"retention.ms": -1})
    for i, ts in enumerate(timestamps):
        key = b"key-%03d" % i if keys else b"key"
        client.produce(topic, 0, one_record(ts, key))
    if entry["source"] == "topic":
        client.alter_configs(topic, {"retention.ms": entry["value"]})
    else:
        client.alter_configs(topic, delete=["retention.ms"])


def partition(client: Client, topic: str) -> dict[str, Any]:
    [entry] = client.metadata([topic])
    return entry["partitions"][0]


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def wait_for_passes(broker: BrokerProcess, count: int = 2) -> None:
    """Wait until `count` more retention passes have finished."""
    target = len(broker.events("retention_pass_finished")) + count
    wait_until(lambda: len(broker.events("retention_pass_finished")) >= target, "retention passes")


def segment_files(broker: BrokerProcess, topic: str, suffix: str) -> list[str]:
    directory = broker.data_dir / f"{topic}-0"
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(suffix))


def verdicts(client: Client, topic: str) -> list[str]:
    [answer] = client.call(explain_retention(topic, [0]))
    return [s["verdict"] for s in answer["segments"]]


@pytest.fixture
def fast_broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(*FAST_RETENTION)


@pytest.fixture
def client(fast_broker: BrokerProcess) -> Iterator[Client]:
    with Client(fast_broker.bootstrap) as c:
        yield c


def test_time_retention_deletes_expired_segments(
    fast_broker: BrokerProcess, client: Client
) -> None:
    client.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    old = now_ms() - 3 * HOUR_MS
    produce(client, "t", old, old, old, now_ms(), now_ms())
    wait_until(lambda: partition(client, "t")["log_start_offset"] == 3, "time retention")
    meta = partition(client, "t")
    assert (meta["segments"], meta["log_end_offset"]) == (2, 5)
    fast_broker.wait_for_event("retention_deleted_segments")
    events = fast_broker.events("retention_deleted_segments")
    assert [(e["reason"], e["base_offsets"]) for e in events] == [("time", [0, 1, 2])]
    assert client.list_offsets("t", 0, "earliest").offset == 3
    with pytest.raises(OffsetOutOfRange):
        client.fetch("t", 0, 0)
    assert verdicts(client, "t") == ["keep_within_retention", "keep_active"]


def test_an_expired_log_rolls_and_keeps_its_end_offset(
    fast_broker: BrokerProcess, client: Client
) -> None:
    client.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    old = now_ms() - 3 * HOUR_MS
    produce(client, "t", old, old)
    wait_until(lambda: partition(client, "t")["log_start_offset"] == 2, "delete all")
    meta = partition(client, "t")
    assert (meta["segments"], meta["log_end_offset"], meta["size_bytes"]) == (1, 2, 0)
    [answer] = client.call(explain_retention("t"))
    [active] = answer["segments"]
    assert (active["verdict"], active["base_offset"]) == ("keep_active", 2)
    assert "empty" in active["reason"]
    assert client.produce("t", 0, one_record(now_ms())).base_offset == 2


def test_size_retention_arithmetic(fast_broker: BrokerProcess, client: Client) -> None:
    limits = {
        "under": 3 * BATCH_BYTES + BATCH_BYTES // 2,  # excess 2.5 batches: 2 go
        "exact": 4 * BATCH_BYTES,  # excess exactly 2 batches: 2 go, 4 stay
        "over": 4 * BATCH_BYTES + 1,  # excess 2 batches - 1: only 1 goes
    }
    for topic, limit in limits.items():
        client.create_topic(topic, 1, {"retention.bytes": limit, **SMALL_SEGMENTS})
        produce(client, topic, *[now_ms()] * 6)
    expected = {"under": 4, "exact": 4, "over": 5}
    wait_until(
        lambda: all(partition(client, t)["segments"] == n for t, n in expected.items()),
        "size retention",
    )
    wait_for_passes(fast_broker)
    for topic, count in expected.items():
        meta = partition(client, topic)
        assert meta["segments"] == count, topic
        assert meta["size_bytes"] == count * BATCH_BYTES >= limits[topic]
        assert meta["log_start_offset"] == 6 - count


def test_delete_records_then_segments_go_at_the_next_pass(
    fast_broker: BrokerProcess, client: Client
) -> None:
    client.create_topic("t", 1, SMALL_SEGMENTS)
    produce(client, "t", *[now_ms()] * 5)
    assert client.delete_records("t", 0, 3) == 3
    wait_until(lambda: partition(client, "t")["segments"] == 2, "log start retention")
    fast_broker.wait_for_event("retention_deleted_segments")
    events = fast_broker.events("retention_deleted_segments")
    assert [(e["reason"], e["base_offsets"]) for e in events] == [("start_offset", [0, 1, 2])]
    assert partition(client, "t")["log_start_offset"] == 3


def test_deleted_files_stay_for_the_delay_then_go(
    fast_broker: BrokerProcess, client: Client
) -> None:
    client.create_topic(
        "t", 1, {"retention.ms": HOUR_MS, "file.delete.delay.ms": 2000, **SMALL_SEGMENTS}
    )
    produce(client, "t", now_ms() - 3 * HOUR_MS, now_ms())
    fast_broker.wait_for_event("retention_deleted_segments")
    deleted = segment_files(fast_broker, "t", ".deleted")
    assert deleted == [
        "00000000000000000000.index.deleted",
        "00000000000000000000.log.deleted",
        "00000000000000000000.timeindex.deleted",
    ]
    wait_until(lambda: not segment_files(fast_broker, "t", ".deleted"), "delayed unlink")
    # The broker logs after the unlink, and its stdout is read by a thread: wait for the line.
    assert fast_broker.wait_for_event("deleted_files_removed")["files"] == 3
    assert segment_files(fast_broker, "t", ".log") == ["00000000000000000001.log"]


def test_deleted_files_are_removed_at_startup_after_a_kill(
    broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    data_dir = tmp_path / "kill-data"
    broker = broker_factory(*FAST_RETENTION, data_dir=data_dir)
    with Client(broker.bootstrap) as client:
        client.create_topic(
            "t", 1, {"retention.ms": HOUR_MS, "file.delete.delay.ms": HOUR_MS, **SMALL_SEGMENTS}
        )
        produce(client, "t", now_ms() - 3 * HOUR_MS, now_ms() - 3 * HOUR_MS, now_ms())
    broker.wait_for_event("retention_deleted_segments")
    assert len(segment_files(broker, "t", ".deleted")) == 6
    broker.kill()
    restarted = broker_factory(*NO_RETENTION_PASS, data_dir=data_dir)
    assert segment_files(restarted, "t", ".deleted") == []
    with Client(restarted.bootstrap) as client:
        meta = partition(client, "t")
        assert (meta["log_start_offset"], meta["log_end_offset"]) == (2, 3)
        assert client.fetch("t", 0, 2).records


def test_compact_topics_keep_their_segments_compact_delete_topics_do_not(
    fast_broker: BrokerProcess, client: Client
) -> None:
    old = now_ms() - 3 * HOUR_MS
    for topic, policy in (("c", "compact"), ("cd", "compact,delete")):
        configs = {"cleanup.policy": policy, "retention.ms": HOUR_MS, **SMALL_SEGMENTS}
        client.create_topic(topic, 1, configs)
        produce(client, topic, old, old, now_ms(), keys=True)
    wait_until(lambda: partition(client, "cd")["log_start_offset"] == 2, "compact,delete")
    wait_for_passes(fast_broker)
    meta = partition(client, "c")
    assert (meta["log_start_offset"], meta["segments"]) == (0, 3)
    assert verdicts(client, "c") == ["keep_compact"] * 3


def test_a_live_config_change_applies_at_the_next_pass(
    fast_broker: BrokerProcess, client: Client
) -> None:
    client.create_topic("t", 1, SMALL_SEGMENTS)
    old = now_ms() - 3 * HOUR_MS
    produce(client, "t", old, old, now_ms())
    wait_for_passes(fast_broker)
    assert partition(client, "t")["segments"] == 3  # default retention.ms: 7 days
    client.alter_configs("t", {"retention.ms": HOUR_MS})
    wait_until(lambda: partition(client, "t")["log_start_offset"] == 2, "config change")


def test_slow_topic_keeps_old_records_in_the_active_segment_until_segment_ms(
    fast_broker: BrokerProcess, client: Client
) -> None:
    # Kafka's FAQ: a record goes only with its segment, and a slow topic's active
    # segment rolls only after segment.ms; until then the old record stays.
    old = now_ms() - 2 * HOUR_MS
    client.create_topic("slow", 1, {"retention.ms": HOUR_MS})  # segment.ms: 7 days
    client.create_topic("rolled", 1, {"retention.ms": HOUR_MS, "segment.ms": HOUR_MS})
    for topic in ("slow", "rolled"):
        produce(client, topic, old, now_ms())
    wait_until(lambda: partition(client, "rolled")["log_start_offset"] == 1, "rolled topic")
    wait_for_passes(fast_broker)
    slow = partition(client, "slow")
    assert (slow["log_start_offset"], slow["segments"]) == (0, 1)
    [answer] = client.call(explain_retention("slow"))
    [segment] = answer["segments"]
    assert segment["verdict"] == "keep_active"
    assert "segment.ms=604800000" in segment["reason"]
    assert "segment.ms + retention.ms" in segment["reason"]


def test_explain_gives_each_verdict_with_its_reason(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(*NO_RETENTION_PASS)
    now, old = now_ms(), now_ms() - 3 * HOUR_MS
    future = now + HOUR_MS // 2
    with Client(broker.bootstrap) as client:
        cases: dict[str, tuple[dict[str, Any], list[int], list[str]]] = {
            "ex-time": ({"retention.ms": HOUR_MS}, [old, now], ["delete_time", "keep_active"]),
            "ex-size": (
                {"retention.bytes": BATCH_BYTES + BATCH_BYTES // 2},
                [now, now, now],
                ["delete_size", "keep_within_retention", "keep_active"],
            ),
            "ex-blocked": (
                {"retention.ms": HOUR_MS},
                [now, old, now],
                ["keep_within_retention", "keep_blocked", "keep_active"],
            ),
            "ex-future": (
                {"retention.ms": HOUR_MS},
                [future, old, now],
                ["keep_future_timestamp", "keep_blocked", "keep_active"],
            ),
            "ex-compact": (
                {"cleanup.policy": "compact", "retention.ms": HOUR_MS},
                [old, old],
                ["keep_compact", "keep_compact"],
            ),
            "ex-start": ({}, [now, now, now], ["delete_start_offset"] * 2 + ["keep_active"]),
        }
        for topic, (configs, timestamps, _) in cases.items():
            client.create_topic(topic, 1, {**configs, **SMALL_SEGMENTS})
            produce(client, topic, *timestamps, keys="compact" in configs.values())
        client.delete_records("ex-start", 0, 2)
        for topic, (_, _, expected) in cases.items():
            assert verdicts(client, topic) == expected, topic

        [answer] = client.call(explain_retention("ex-time"))
        assert answer["retention_ms"] == HOUR_MS
        assert (answer["deletable_segments"], answer["deletable_bytes"]) == (1, BATCH_BYTES)
        first = answer["segments"][0]
        assert first["size_bytes"] == BATCH_BYTES
        assert first["largest_timestamp_ms"] == old
        assert first["age_ms"] >= 3 * HOUR_MS
        assert "older than retention.ms=3600000" in first["reason"]
        [blocked] = [
            s for s in client.call(explain_retention("ex-blocked"))[0]["segments"]
            if s["verdict"] == "keep_blocked"
        ]  # fmt: skip
        assert "segment 0 before it is kept" in blocked["reason"]

        with pytest.raises(UnknownTopicOrPartition):
            client.call(explain_retention("no-such-topic"))
        [bad] = client.call(explain_retention("ex-time", [7]))
        assert bad["error"] == "UNKNOWN_TOPIC_OR_PARTITION"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "broker", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_cli_retention_explain_text_and_json(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(*NO_RETENTION_PASS)
    with Client(broker.bootstrap) as client:
        client.create_topic("events", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
        produce(client, "events", now_ms() - 3 * HOUR_MS, now_ms())
    text = run_cli("retention", "explain", "events", "--bootstrap-server", broker.bootstrap)
    assert text.returncode == 0, text.stderr
    assert "events-0: log start 0, high watermark 2, end 2, 2 segment(s)" in text.stdout
    assert "delete_time" in text.stdout
    assert "keep_active" in text.stdout
    assert "older than retention.ms=3600000" in text.stdout
    as_json = run_cli(
        "retention", "explain", "events", "-p", "0", "--format", "json",
        "--bootstrap-server", broker.bootstrap,
    )  # fmt: skip
    assert as_json.returncode == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert [s["verdict"] for s in body["partitions"][0]["segments"]] == [
        "delete_time",
        "keep_active",
    ]
    missing = run_cli("retention", "explain", "nope", "--bootstrap-server", broker.bootstrap)
    assert missing.returncode == 1
    assert missing.stderr.startswith("error: UNKNOWN_TOPIC_OR_PARTITION:")
