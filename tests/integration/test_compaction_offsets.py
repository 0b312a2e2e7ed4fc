"""Consumer offsets stored in the compacted `__consumer_offsets` topic, on the real broker."""

from __future__ import annotations

import pytest

from protocol.batch import encode_batch
from protocol.errors import InvalidRequest, InvalidTopic, UnknownTopicOrPartition
from protocol.offsets_schema import (
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    commit_offsets,
    fetch_offsets,
)
from tests.conftest import BrokerFactory
from tests.integration.test_compaction import FAST_CLEANER, now_ms, read_all, wait_until
from tidelog.client import Client
from tidelog.consumer import Consumer, TopicPartition

pytestmark = pytest.mark.integration


def test_commit_and_fetch(broker_factory: BrokerFactory):
    broker = broker_factory(*FAST_CLEANER)
    with Client(broker.bootstrap) as client:
        client.create_topic("events", 2)
        assert client.call(fetch_offsets("g1")) == {}
        client.call(
            commit_offsets("g1", {("events", 0): 5, ("events", 1): OffsetAndMetadata(7, "x")})
        )
        client.call(commit_offsets("g2", {("events", 0): 1}))
        assert client.call(fetch_offsets("g1")) == {
            ("events", 0): OffsetAndMetadata(5, ""),
            ("events", 1): OffsetAndMetadata(7, "x"),
        }
        assert client.call(fetch_offsets("g1", [("events", 1)])) == {
            ("events", 1): OffsetAndMetadata(7, "x")
        }
        assert client.call(fetch_offsets("g2", [("events", 1)])) == {}
        answer = client.request(
            "fetch_offsets", {"group": "g2", "topics": [{"topic": "events", "partitions": [1]}]}
        )
        assert answer["topics"][0]["partitions"][0]["offset"] == -1
        with pytest.raises(UnknownTopicOrPartition):
            client.call(commit_offsets("g1", {("nope", 0): 1}))
        with pytest.raises(UnknownTopicOrPartition):
            client.call(commit_offsets("g1", {("events", 5): 1}))
        with pytest.raises(InvalidRequest):
            client.call(commit_offsets("", {("events", 0): 1}))
        assert "commit_offsets" in client.api_versions()["apis"]


# Rolling and cleaning the internal topic needs small segments (clients cannot alter it).
SMALL_OFFSETS_SEGMENTS = (
    "offsets.topic.segment.bytes=2048",
    "log.cleaner.min.cleanable.ratio=0.01",
)


def test_commits_survive_kill_restart_and_compaction(broker_factory: BrokerFactory, tmp_path):
    broker = broker_factory(*FAST_CLEANER, *SMALL_OFFSETS_SEGMENTS)
    with Client(broker.bootstrap) as client:
        client.create_topic("events", 1)
        for offset in range(1, 401):
            client.call(commit_offsets("g", {("events", 0): offset}))
        assert client.describe_configs(OFFSETS_TOPIC)["segment.bytes"]["value"] == 2048
        with pytest.raises(InvalidTopic):
            client.alter_configs(OFFSETS_TOPIC, set={"cleanup.policy": "delete"})
        wait_until(
            lambda: len(read_all(client, OFFSETS_TOPIC)) < 100, "the commits to be compacted"
        )
    broker.kill()
    again = broker_factory(*FAST_CLEANER, data_dir=tmp_path / "data")
    with Client(again.bootstrap) as client:
        assert client.call(fetch_offsets("g")) == {("events", 0): OffsetAndMetadata(400, "")}
        client.call(commit_offsets("g", {("events", 0): 401}))
        assert client.call(fetch_offsets("g"))[("events", 0)].offset == 401


def test_consumer_group_commit_and_resume_across_restart(broker_factory: BrokerFactory, tmp_path):
    broker = broker_factory(*FAST_CLEANER)
    tp = TopicPartition("events", 0)
    with Client(broker.bootstrap) as client:
        client.create_topic("events", 1)
        for i in range(10):
            client.produce("events", 0, encode_batch([(b"k", b"v%d" % i, None, now_ms())]))
    with Consumer(
        "events", bootstrap_servers=broker.bootstrap, group_id="app",
        auto_offset_reset="earliest", consumer_timeout_ms=2000,
    ) as consumer:  # fmt: skip
        assert [next(consumer).offset for _ in range(4)] == [0, 1, 2, 3]
        consumer.commit()
        assert consumer.committed(tp) == 4
    broker.kill()
    again = broker_factory(*FAST_CLEANER, data_dir=tmp_path / "data")
    with Client(again.bootstrap) as client:
        assert client.call(fetch_offsets("app")) == {("events", 0): OffsetAndMetadata(4, "")}
        assert client.metadata(["events"])[0]["partitions"][0]["high_watermark"] == 10
    with Consumer(
        "events", bootstrap_servers=again.bootstrap, group_id="app",
        auto_offset_reset="earliest", consumer_timeout_ms=2000,
    ) as consumer:  # fmt: skip
        assert next(consumer).offset == 4
