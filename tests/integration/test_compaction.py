"""The log cleaner on the real `tidelog serve` process, with a short cleaner backoff.

Segments are tiny (`segment.bytes`), so produced records roll into closed segments
the cleaner may clean; the tests wait for the broker's `log_cleaned` events.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import confluent_kafka as ck
import pytest

from protocol.batch import Record, encode_batch, iter_headers, iter_records
from protocol.errors import InvalidRecord
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.test_cli import cli
from tidelog.client import Client

pytestmark = pytest.mark.integration

HOUR_MS = 3_600_000
FAST_CLEANER = (
    "log.cleaner.backoff.ms=50",
    "log.cleaner.dedupe.buffer.size=1048576",
    "log.initial.task.delay.ms=0",
)
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.bytes": 1024,
    "segment.index.bytes": 4096,
    "min.cleanable.dirty.ratio": 0.01,
}
WAIT_S = 20.0


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def cleanings(broker: BrokerProcess, topic: str) -> list[dict]:
    return [e for e in broker.events("log_cleaned") if e.get("topic") == topic]


def wait_for_cleaning(broker: BrokerProcess, topic: str, after: int = 0) -> dict:
    wait_until(lambda: len(cleanings(broker, topic)) > after, f"a cleaning of {topic}")
    return cleanings(broker, topic)[-1]


def push_into_closed_segments(client: Client, topic: str) -> None:
    """Records of another key: fill the active segment so earlier ones become cleanable."""
    for _ in range(30):
        produce(client, topic, b"filler", b"f" * 50, now_ms())


def of_keys(records: list[Record], prefix: bytes) -> list[Record]:
    return [r for r in records if r.key is not None and r.key.startswith(prefix)]


def wait_until_quiet(broker: BrokerProcess, topic: str, quiet_s: float = 0.5) -> int:
    """Wait for at least one cleaning of `topic` and then none for `quiet_s`; the count."""
    wait_for_cleaning(broker, topic)
    count, since = len(cleanings(broker, topic)), time.monotonic()
    while time.monotonic() - since < quiet_s:
        time.sleep(0.05)
        if len(cleanings(broker, topic)) != count:
            count, since = len(cleanings(broker, topic)), time.monotonic()
    return count


def produce(client: Client, topic: str, key: bytes | None, value: bytes | None, ts: int) -> int:
    result = client.produce(topic, 0, encode_batch([(key, value, None, ts)]))
    assert result is not None
    return result.base_offset


def read_all(client: Client, topic: str) -> list[Record]:
    records: list[Record] = []
    [entry] = client.metadata([topic])
    offset = entry["partitions"][0]["log_start_offset"]
    high = entry["partitions"][0]["high_watermark"]
    while offset < high:
        data = client.fetch(topic, 0, offset).records
        if not data:
            break
        records += [r for r in iter_records(data) if r.offset >= offset]
        offset = max(h.next_offset for _, h in iter_headers(data))
    return records


def latest(records: list[Record]) -> dict[bytes, tuple[int, bytes | None]]:
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for r in records:
        assert r.key is not None
        out[r.key] = (r.offset, r.value)
    return out


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(*FAST_CLEANER)


def test_updates_shrink_to_one_record_per_key_with_original_offsets(broker):
    with Client(broker.bootstrap) as client:
        client.create_topic("c", 1, COMPACTED)
        expected = {}
        for i in range(200):
            key = b"key-%d" % (i % 4)
            expected[key] = (produce(client, "c", key, b"value-%d" % i, now_ms()), b"value-%d" % i)
        push_into_closed_segments(client, "c")
        before = of_keys(read_all(client, "c"), b"key-")
        event = wait_for_cleaning(broker, "c")
        assert event["records_removed"] > 0
        wait_until(lambda: len(of_keys(read_all(client, "c"), b"key-")) == 4, "one per key")
        after = of_keys(read_all(client, "c"), b"key-")
        assert latest(after) == latest(before) == expected
        offsets = [r.offset for r in after]
        assert offsets == sorted(offsets)
        [entry] = client.metadata(["c"])
        assert entry["partitions"][0]["log_start_offset"] == 0
        assert entry["partitions"][0]["high_watermark"] == 230
        # A fetch of a removed offset answers with the next surviving batch.
        first = next(iter_headers(client.fetch("c", 0, 0).records))[1]
        assert first.base_offset == offsets[0] > 0


def test_tombstones_hide_then_disappear(broker):
    with Client(broker.bootstrap) as client:
        client.create_topic("t", 1, {**COMPACTED, "delete.retention.ms": 500})
        for i in range(40):
            produce(client, "t", b"key-%d" % (i % 2), b"v" * 50, now_ms())
        tombstone = produce(client, "t", b"key-0", None, now_ms())
        for i in range(40):
            produce(client, "t", b"other-%d" % (i % 2), b"v" * 50, now_ms())
        wait_until(
            lambda: (
                latest(read_all(client, "t")).get(b"key-0") == (tombstone, None)
                and len([r for r in read_all(client, "t") if r.key == b"key-0"]) == 1
            ),
            "key-0 to be only its tombstone",
        )
        # After delete.retention.ms, a later cleaning removes the tombstone itself.
        time.sleep(0.6)
        for i in range(40):
            produce(client, "t", b"other-%d" % (i % 2), b"w" * 50, now_ms())
        wait_until(lambda: b"key-0" not in latest(read_all(client, "t")), "the tombstone to go")
        assert b"key-1" in latest(read_all(client, "t"))


def test_min_compaction_lag_protects_recent_records(broker):
    with Client(broker.bootstrap) as client:
        config = {**COMPACTED, "min.compaction.lag.ms": HOUR_MS}
        client.create_topic("old", 1, config)
        client.create_topic("new", 1, config)
        for _ in range(60):
            produce(client, "old", b"k", b"v" * 50, now_ms() - 2 * HOUR_MS)
            produce(client, "new", b"k", b"v" * 50, now_ms())
        wait_for_cleaning(broker, "old")
        wait_until(lambda: len(read_all(client, "old")) < 10, "old records to be cleaned")
        # Several backoffs later the recent topic is untouched.
        time.sleep(0.5)
        assert cleanings(broker, "new") == []
        assert len(read_all(client, "new")) == 60


def test_dirty_ratio_gate(broker):
    with Client(broker.bootstrap) as client:
        client.create_topic("g", 1, {**COMPACTED, "min.cleanable.dirty.ratio": 0.01})
        for i in range(120):
            produce(client, "g", b"key-%d" % i, b"v" * 50, now_ms())  # all distinct
        wait_until_quiet(broker, "g")  # everything closed is clean now
        client.alter_configs("g", set={"min.cleanable.dirty.ratio": 0.5})
        # Count again once the gate is up: on a slow machine a cleaning may still have
        # been due at 0.01 after the first quiet spell.
        count = wait_until_quiet(broker, "g")
        for i in range(30):  # a little dirt (a few segments): ratio well under 0.5
            produce(client, "g", b"key-%d" % i, b"w" * 50, now_ms())
        time.sleep(0.5)
        assert len(cleanings(broker, "g")) == count
        client.alter_configs("g", set={"min.cleanable.dirty.ratio": 0.01})
        event = wait_for_cleaning(broker, "g", after=count)
        assert 0.01 < event["dirty_ratio"] < 0.5


def test_unkeyed_produce_to_compacted_topic_is_invalid_record(broker):
    with Client(broker.bootstrap) as client:
        client.create_topic("u", 1, COMPACTED)
        with pytest.raises(InvalidRecord):
            client.produce("u", 0, encode_batch([(None, b"x", None, now_ms())]))
        assert read_all(client, "u") == []


def test_cleaned_log_and_checkpoint_survive_kill_and_restart(broker_factory, tmp_path):
    broker = broker_factory(*FAST_CLEANER)
    with Client(broker.bootstrap) as client:
        client.create_topic("r", 1, COMPACTED)
        for i in range(150):
            produce(client, "r", b"key-%d" % (i % 3), b"value-%d" % i, now_ms())
        push_into_closed_segments(client, "r")
        wait_until(lambda: len(of_keys(read_all(client, "r"), b"key-")) == 3, "one per key")
        before = latest(read_all(client, "r"))
    broker.kill()
    assert (tmp_path / "data" / "cleaner-offset-checkpoint").exists()
    again = broker_factory(*FAST_CLEANER, data_dir=tmp_path / "data")
    with Client(again.bootstrap) as client:
        assert latest(read_all(client, "r")) == before
        names = [p.name for p in (tmp_path / "data" / "r-0").iterdir()]
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]


@pytest.mark.parametrize(
    "failpoint",
    ["replace_segments.after_swap_rename=kill", "replace_segments.after_old_deleted=kill"],
)
def test_broker_killed_inside_a_swap_recovers_every_key(broker_factory, tmp_path, failpoint):
    broker = broker_factory(*FAST_CLEANER, env={"TIDELOG_FAILPOINTS": failpoint})
    expected = {}
    with Client(broker.bootstrap) as client:
        client.create_topic("k", 1, COMPACTED)
        try:  # produce until the cleaner's first swap kills the broker
            for i in range(2000):
                key, value = b"key-%d" % (i % 5), b"value-%d" % i
                expected[key] = (produce(client, "k", key, value, now_ms()), value)
        except OSError:
            pass
    wait_until(lambda: broker.proc.poll() is not None, "the failpoint to kill the broker")
    assert broker.proc.returncode == -9
    again = broker_factory(*FAST_CLEANER, data_dir=tmp_path / "data")
    with Client(again.bootstrap) as client:
        # Every acknowledged latest value is there (a write in flight at the kill may
        # have landed too, and is then the newer latest of its key).
        after = latest(read_all(client, "k"))
        assert all(after[key][0] >= offset for key, (offset, _) in expected.items())
        assert all(
            after[key] == expected[key] for key in expected if after[key][0] == expected[key][0]
        )
        names = [p.name for p in (tmp_path / "data" / "k-0").iterdir()]
        assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
        # Cleanings go on: the closed segments end with one record per key.
        push_into_closed_segments(client, "k")
        wait_until(lambda: len(of_keys(read_all(client, "k"), b"key-")) == 5, "a full cleaning")


def test_a_shadowed_producer_batch_goes_empty_and_outside_clients_read_past_it(
    broker: BrokerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    """An idempotent Kafka producer's newest batch, shadowed by a later tombstone, is
    cleaned like any batch: its value goes at once and never comes back once the
    tombstone goes too; the batch stays only as an empty header (Kafka's RETAIN_EMPTY),
    which librdkafka's consumer, our client and `tidelog dump-log` read past."""
    with Client(broker.bootstrap) as client:
        client.create_topic("r", 1, {**COMPACTED, "delete.retention.ms": 500})
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
        producer.produce("r", key=b"key-r", value=b"old", partition=0)
        assert producer.flush(20) == 0
        produce(client, "r", b"key-r", None, now_ms())
        push_into_closed_segments(client, "r")

        def key_r() -> list[bytes | None]:
            return [r.value for r in read_all(client, "r") if r.key == b"key-r"]

        wait_until(lambda: key_r() == [None], "the old value to go, the tombstone left")
        time.sleep(0.6)
        push_into_closed_segments(client, "r")
        wait_until(lambda: key_r() == [], "the tombstone to go")
        [entry] = client.metadata(["r"])
        high = entry["partitions"][0]["high_watermark"]
    consumer = ck.Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": "r-reader", "enable.auto.commit": False}
    )
    try:
        consumer.assign([ck.TopicPartition("r", 0, 0)])
        seen: list[tuple[int, bytes | None]] = []
        deadline = time.monotonic() + WAIT_S
        while (not seen or seen[-1][0] < high - 1) and time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None:
                assert message.error() is None, message.error()
                seen.append((message.offset(), message.key()))
    finally:
        consumer.close()
    assert seen and seen[-1][0] == high - 1
    assert b"key-r" not in [key for _, key in seen]
    status, out, err = cli(
        broker, capsys, "dump-log", str(broker.data_dir / "r-0" / f"{0:020d}.log")
    )
    assert status == 0, err
    assert "producerId: " in out and "count: 0" in out
