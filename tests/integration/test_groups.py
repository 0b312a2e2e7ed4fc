"""Consumer groups against the real broker process: Tidelog consumers split a topic's
partitions, rebalance when members join, leave or die, commits from a stale
generation are refused, and groups and offsets survive a broker kill -9 and a clean
restart."""

from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from protocol.batch import encode_batch
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.json_child import JsonChild
from tidelog.client import Client
from tidelog.consumer import CommitFailedError, Consumer, TopicPartition

pytestmark = pytest.mark.integration

GROUP_SETTINGS = (
    "group.initial.rebalance.delay.ms=100",
    "group.min.session.timeout.ms=500",
)
SESSION_MS = 2_000
PARTITIONS = 6
PER_PARTITION = 40
CHILD = Path(__file__).with_name("group_child.py")


def wait_until(condition: Callable[[], bool], timeout_s: float, what: str) -> float:
    """Seconds it took for `condition` to hold; fails the test after `timeout_s`."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout_s:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.02)
    return time.monotonic() - started


def fill_topic(broker: BrokerProcess, topic: str, partitions: int = PARTITIONS) -> None:
    with Client(broker.bootstrap) as admin:
        admin.create_topic(topic, partitions)
        for p in range(partitions):
            rows = [(None, b"%d-%d" % (p, i), None, 1) for i in range(PER_PARTITION)]
            admin.produce(topic, p, encode_batch(rows))


def group_consumer(broker: BrokerProcess, group: str, **options: Any) -> Consumer:
    settings: dict[str, Any] = {
        "bootstrap_servers": broker.bootstrap,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "session_timeout_ms": SESSION_MS,
        "heartbeat_interval_ms": 200,
        "max_poll_interval_ms": 3_000,
        "max_poll_records": 7,
    }
    settings.update(options)
    return Consumer(**settings)


class Member:
    """A subscribed consumer polling in its own thread, recording what it got."""

    def __init__(self, broker: BrokerProcess, group: str, topic: str, **options: Any) -> None:
        self.consumer = group_consumer(broker, group, **options)
        self.assigned: frozenset[int] = frozenset()
        self.values: list[bytes] = []
        self.rebalances = 0
        self._stop = threading.Event()
        self._leave = True
        self._error: BaseException | None = None
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _on_assign(self, partitions: set[TopicPartition]) -> None:
        self.assigned = frozenset(tp.partition for tp in partitions)
        self.rebalances += 1

    def _on_revoke(self, partitions: set[TopicPartition]) -> None:
        self.assigned = frozenset()

    def _run(self) -> None:
        try:
            self.consumer.subscribe(
                [self._topic], on_assign=self._on_assign, on_revoke=self._on_revoke
            )
            while not self._stop.is_set():
                for records in self.consumer.poll(timeout_ms=50).values():
                    self.values.extend(r.value for r in records)
        except BaseException as exc:  # reported by stop()
            self._error = exc
        finally:
            if self._leave:
                self.consumer.close()

    def stop(self, *, leave: bool = True) -> None:
        self._leave = leave
        self._stop.set()
        self._thread.join(timeout=30)
        if self._error is not None:
            raise self._error


@pytest.fixture
def broker(broker_factory: BrokerFactory) -> BrokerProcess:
    return broker_factory(*GROUP_SETTINGS)


@pytest.fixture
def members() -> Iterator[list[Member]]:
    started: list[Member] = []
    yield started
    for member in started:
        member.stop()


def split(members: list[Member]) -> list[frozenset[int]]:
    return [m.assigned for m in members]


def is_partition_of_all(assignments: list[frozenset[int]]) -> bool:
    """Every partition held by exactly one member, every member holding some."""
    flat = [p for a in assignments for p in a]
    return sorted(flat) == list(range(PARTITIONS)) and all(assignments)


def all_values() -> list[bytes]:
    return sorted(b"%d-%d" % (p, i) for p in range(PARTITIONS) for i in range(PER_PARTITION))


def test_two_then_three_consumers_split_the_partitions(
    broker: BrokerProcess, members: list[Member]
) -> None:
    fill_topic(broker, "events")
    members.append(Member(broker, "g", "events"))
    wait_until(lambda: members[0].assigned == frozenset(range(PARTITIONS)), 20, "one member")
    members.append(Member(broker, "g", "events"))
    wait_until(lambda: is_partition_of_all(split(members)), 20, "two members split")
    assert sorted(len(a) for a in split(members)) == [3, 3]  # range: 6 / 2
    members.append(Member(broker, "g", "events"))
    wait_until(lambda: is_partition_of_all(split(members)), 20, "three members split")
    assert sorted(len(a) for a in split(members)) == [2, 2, 2]
    # Every record was read once: positions were committed before each handover.
    wait_until(
        lambda: sum(len(m.values) for m in members) >= PARTITIONS * PER_PARTITION, 20, "all read"
    )
    time.sleep(0.3)
    assert sorted(v for m in members for v in m.values) == all_values()
    # A member that leaves hands its partitions over at once (no session timeout).
    leaving = members.pop()
    leaving.stop()
    took = wait_until(lambda: is_partition_of_all(split(members)), 20, "two again")
    assert took < SESSION_MS / 1000
    print(f"leave: partitions moved {took:.2f} s after close()")


@pytest.mark.parametrize("assignor", ["roundrobin", "sticky"])
def test_other_assignors_split_without_overlap(
    broker: BrokerProcess, members: list[Member], assignor: str
) -> None:
    fill_topic(broker, "events")
    strategy = {"partition_assignment_strategy": (assignor,)}
    members.append(Member(broker, "g", "events", **strategy))
    wait_until(lambda: len(members[0].assigned) == PARTITIONS, 20, "one member")
    members.append(Member(broker, "g", "events", **strategy))
    wait_until(lambda: is_partition_of_all(split(members)), 20, "two members split")
    if assignor == "sticky":
        # The first member kept half of what it had; the newcomer got the rest.
        assert len(members[0].assigned) == len(members[1].assigned) == 3


def test_a_killed_consumer_loses_its_partitions_to_the_others(
    broker: BrokerProcess, members: list[Member], tmp_path: Path
) -> None:
    fill_topic(broker, "events")
    with JsonChild(CHILD, broker.bootstrap, "g", "events", cwd=tmp_path) as child:
        events = child.events
        wait_until(lambda: any("assigned" in e for e in events), 20, "child joined")
        members.append(Member(broker, "g", "events"))
        wait_until(
            lambda: (
                len(members[0].assigned) == PARTITIONS // 2
                and sum("committed" in e for e in events) >= 5
            ),
            20,
            "child and member split, child committing",
        )
        child.kill()
        took = wait_until(
            lambda: members[0].assigned == frozenset(range(PARTITIONS)), 20, "partitions moved"
        )
        # Removed within its session timeout (plus a heartbeat interval and a rebalance).
        assert took < SESSION_MS / 1000 + 2.0
        print(f"kill -9: partitions moved {took:.2f} s after the kill (session {SESSION_MS} ms)")
        wait_until(
            lambda: len(members[0].values) + _count_consumed(events) >= PARTITIONS * PER_PARTITION,
            20,
            "everything read",
        )
        time.sleep(0.3)
    child_values = _child_values(events)
    everything = sorted(members[0].values + child_values)
    assert set(everything) == set(all_values())  # no record lost
    duplicates = {v for v in everything if everything.count(v) > 1}
    # Only records the child read without an acknowledged commit after them (the ones
    # it read after its last commit, or before a commit a rebalance refused) are read
    # twice; everything it committed stays read once.
    uncommitted = set(_child_values(_uncommitted(events)))
    assert duplicates <= uncommitted
    assert not duplicates & set(_child_values(_committed(events)))
    print(f"kill -9: {len(duplicates)} records read twice, {len(uncommitted)} uncommitted")


def _child_values(events: list[dict[str, Any]]) -> list[bytes]:
    return [b"%d-%d" % (p, o) for e in events for p, o in e.get("consumed", ())]


def _count_consumed(events: list[dict[str, Any]]) -> int:
    return len(_child_values(events))


def _committed(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The child's `consumed` events whose commit it saw acknowledged."""
    return [
        e for e, after in itertools.pairwise(events) if "consumed" in e and "committed" in after
    ]


def _uncommitted(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    done = {id(e) for e in _committed(events)}
    return [e for e in events if "consumed" in e and id(e) not in done]


def test_a_commit_from_a_stale_generation_is_refused(
    broker: BrokerProcess, members: list[Member]
) -> None:
    fill_topic(broker, "events")
    stale = group_consumer(broker, "g", enable_auto_commit=False, max_poll_interval_ms=1_000)
    try:
        stale.subscribe(["events"])
        stale.poll(timeout_ms=200)
        assert len(stale.assignment()) == PARTITIONS
        stale.commit()
        # Another member joins; `stale` does not poll, so it misses the rebalance.
        members.append(Member(broker, "g", "events", max_poll_interval_ms=1_000))
        wait_until(lambda: members[0].assigned == frozenset(range(PARTITIONS)), 20, "took over")
        with pytest.raises(CommitFailedError, match="rebalanced"):
            stale.commit({TopicPartition("events", 0): 39})
        with Client(broker.bootstrap) as admin:
            committed = admin.request("fetch_offsets", {"group": "g"})
        offsets = {p["partition"]: p["offset"] for p in committed["topics"][0]["partitions"]}
        assert offsets.get(0) != 39
        # Polling again rejoins: the two now share the partitions.
        wait_until(
            lambda: bool(stale.poll(timeout_ms=50) is not None and stale.assignment()),
            20,
            "rejoined",
        )
        wait_until(
            lambda: (
                stale.poll(timeout_ms=10) is not None
                and is_partition_of_all(
                    [frozenset(tp.partition for tp in stale.assignment()), members[0].assigned]
                )
            ),
            20,
            "split after rejoin",
        )
    finally:
        stale.close()


@pytest.mark.parametrize("how", ["kill -9", "clean stop"])
def test_groups_and_offsets_survive_a_broker_restart(
    broker_factory: BrokerFactory, how: str
) -> None:
    broker = broker_factory(*GROUP_SETTINGS)
    port = broker.port
    fill_topic(broker, "events")
    consumer = group_consumer(broker, "g", enable_auto_commit=False)
    consumer.subscribe(["events"])
    read: list[bytes] = []
    while len(read) < 50:
        for records in consumer.poll(timeout_ms=100).values():
            read.extend(r.value for r in records)
    consumer.commit()
    positions = {tp.partition: consumer.position(tp) for tp in consumer.assignment()}
    if how == "kill -9":
        broker.kill()
    else:
        assert broker.stop() == 0  # SIGTERM: drain, close the logs cleanly

    again = broker_factory(
        *GROUP_SETTINGS,
        data_dir=broker.data_dir,
        extra_args=("--listen", f"127.0.0.1:{port}"),
    )
    with Client(again.bootstrap) as admin:
        [described] = admin.request("describe_groups", {"groups": ["g"]})["groups"]
        assert (described["state"], len(described["members"])) == ("Stable", 1)
        fetched = admin.request("fetch_offsets", {"group": "g"})
    committed = {p["partition"]: p["offset"] for p in fetched["topics"][0]["partitions"]}
    assert committed == positions
    # The member carries on with the restarted broker and reads the rest exactly once.
    while len(read) < PARTITIONS * PER_PARTITION:
        for records in consumer.poll(timeout_ms=100).values():
            read.extend(r.value for r in records)
    assert sorted(read) == all_values()
    consumer.close()


def test_a_static_member_restarts_without_a_rebalance(
    broker: BrokerProcess, members: list[Member]
) -> None:
    fill_topic(broker, "events")
    # The dynamic member joins first and leads: a returning static leader would rebalance.
    members.append(Member(broker, "g", "events"))
    wait_until(lambda: len(members[0].assigned) == PARTITIONS, 20, "first member")
    static = group_consumer(broker, "g", group_instance_id="worker-1", enable_auto_commit=False)
    static.subscribe(["events"])
    wait_until(
        lambda: (
            static.poll(timeout_ms=10) is not None
            and is_partition_of_all(
                [frozenset(tp.partition for tp in static.assignment()), members[0].assigned]
            )
        ),
        20,
        "split",
    )
    before = frozenset(tp.partition for tp in static.assignment())
    rebalances = members[0].rebalances
    static.close()  # a static member does not leave the group
    with Client(broker.bootstrap) as admin:
        [described] = admin.request("describe_groups", {"groups": ["g"]})["groups"]
    assert [m["group_instance_id"] for m in described["members"]].count("worker-1") == 1

    again = group_consumer(broker, "g", group_instance_id="worker-1", enable_auto_commit=False)
    try:
        again.subscribe(["events"])
        again.poll(timeout_ms=100)
        assert frozenset(tp.partition for tp in again.assignment()) == before
        time.sleep(1.0)  # several heartbeats of the other member: still no rebalance
        assert members[0].rebalances == rebalances
        assert members[0].assigned | before == frozenset(range(PARTITIONS))
    finally:
        again.close()
