"""More partitions than descriptors, through the real broker (issue 34, item 7), and
every topic accepted at runtime loaded after a clean restart (issue 38, item 4).

The broker runs with RLIMIT_NOFILE fixed (soft = hard) at 400, so it cannot raise
it: 1,200 partitions, three per descriptor. Before segments were opened on demand
it held five descriptors per partition and refused the 600-partition topic; and
loading estimated more per partition than creation did, so topics it had accepted
answered UNKNOWN_TOPIC_OR_PARTITION after a restart.
"""

from __future__ import annotations

from pathlib import Path

from bench.partitions_bench import Broker, fetch_all, produce_all
from tidelog.client import Client

NOFILE = 400
BIG_TOPIC_PARTITIONS = 600
SMALL_TOPICS = 200  # of three partitions each: many topics created one by one at runtime


def _targets() -> list[tuple[str, int]]:
    targets = [("big", p) for p in range(BIG_TOPIC_PARTITIONS)]
    targets += [(f"small{t:03d}", p) for t in range(SMALL_TOPICS) for p in range(3)]
    return targets


def _client(broker: Broker) -> Client:
    return Client(f"127.0.0.1:{broker.port}", request_timeout_ms=120_000)


def test_more_partitions_than_descriptors_take_records_and_survive_a_restart(
    tmp_path: Path,
) -> None:
    targets = _targets()
    broker = Broker(tmp_path / "data", NOFILE)
    try:
        with _client(broker) as client:
            client.create_topic("big", BIG_TOPIC_PARTITIONS)
            for t in range(SMALL_TOPICS):
                client.create_topic(f"small{t:03d}", 3)
            assert produce_all(client, targets) == len(targets)
            assert fetch_all(client, targets) == len(targets)
        assert broker.resources()["fds"] < NOFILE
    finally:
        broker.stop()
    broker = Broker(tmp_path / "data", NOFILE)
    try:
        with _client(broker) as client:
            topics = client.metadata()
            assert [t["topic"] for t in topics if t.get("error")] == []
            assert sum(len(t["partitions"]) for t in topics) == len(targets)
            assert fetch_all(client, targets) == len(targets)
            assert produce_all(client, targets) == len(targets)
        assert broker.resources()["fds"] < NOFILE
    finally:
        broker.stop()
