"""confluent-kafka 2.16's transactional API (librdkafka) on Apache Kafka and on Tidelog
(issue 36's acceptance): init / begin / produce / send_offsets_to_transaction / commit /
abort, a read_committed and a read_uncommitted consumer, offsets pending in an open
transaction (OffsetFetch require_stable), a fenced zombie. Each broker must give the
model's answer, and both must agree on everything observed (interop/ecosystem/txn_confluent.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from interop.compare import differences
from interop.ecosystem import kafka_io
from interop.ecosystem.txn_confluent import PARTITIONS, observe
from interop.ecosystem.txn_wire import ProducerNames, topic_view
from interop.targets import Target

pytestmark = pytest.mark.interop

UNSTABLE_OFFSET_COMMIT = 88
# (partition, value, committed?) in produce order
OUTPUT = [
    (0, "c1-0", True), (1, "c1-1", True), (0, "c1-2", True), (1, "x2-0", False),
    (0, "x2-1", False), (1, "c3-0", True), (0, "o4-0", False), (0, "c5-0", True),
    (1, "c5-1", True),
]  # fmt: skip


def _observe(target: Target, unique: Callable[[str], str]) -> dict[str, Any]:
    src, dst = unique("txn-cf-in"), unique("txn-cf-out")
    kafka_io.create_topic(target.bootstrap, src, PARTITIONS)
    kafka_io.create_topic(target.bootstrap, dst, PARTITIONS)
    kafka_io.produce(
        target.bootstrap, src, [(i % 2, b"k", f"in-{i}".encode(), [], None) for i in range(6)]
    )
    seen = observe(target.bootstrap, src, dst, unique("txn-cf-group"), unique("txn-cf-id"))
    seen["wire_end"] = topic_view(target.bootstrap, dst, PARTITIONS, ProducerNames())
    return seen


def _values(seen: list[tuple[int, int, str]]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for partition, _offset, value in seen:
        out[partition].append(value)
    return out


def _check_model(seen: dict[str, Any]) -> None:
    committed = {p: [v for q, v, ok in OUTPUT if q == p and ok] for p in range(PARTITIONS)}
    everything = {p: [v for q, v, _ok in OUTPUT if q == p] for p in range(PARTITIONS)}
    assert _values(seen["read_committed"]) == committed
    assert _values(seen["read_uncommitted"]) == everything
    assert seen["committed_1"] == {"offsets": {0: 2, 1: 1}}
    assert seen["committed_2"] == {"offsets": {0: 2, 1: 1}}  # the abort committed nothing
    assert seen["committed_3"] == {"offsets": {0: 3, 1: 2}}
    assert seen["committed_open"]["read_committed"] == {"error": "_TIMED_OUT"}, seen
    assert seen["committed_open"]["read_uncommitted"] == {"offsets": {0: 3, 1: 2}}
    # OffsetFetch v7: UNSTABLE_OFFSET_COMMIT (88) for the partition with pending offsets
    # under require_stable, the last committed offsets without it.
    stable = seen["offset_fetch_open"]["require_stable=True"]["partitions"]
    assert stable["1"][1] == UNSTABLE_OFFSET_COMMIT, seen["offset_fetch_open"]
    unstable = seen["offset_fetch_open"]["require_stable=False"]["partitions"]
    assert unstable == {"0": [3, 0], "1": [2, 0]}
    assert seen["committed_end"] == {"offsets": {0: 3, 1: 2}}  # the zombie's were aborted
    open_ = seen["offsets_open"]
    assert open_["read_committed"][0] == open_["read_uncommitted"][0] - 1
    assert _values(seen["read_open"]) == {
        p: [v for v in committed[p] if not v.startswith("c5")] for p in range(PARTITIONS)
    }
    assert seen["zombie_commit"] in {"_FENCED fatal", "PRODUCER_FENCED fatal"}, seen
    end = seen["offsets_end"]
    assert end["read_committed"] == end["read_uncommitted"]


@pytest.mark.timeout(300)
def test_confluent_transactions_on_kafka_4_4_defaults(
    kafka: Target, unique: Callable[[str], str]
) -> None:
    _check_model(_observe(kafka, unique))


@pytest.mark.timeout(300)
def test_confluent_transactions_as_on_kafka(
    kafka_tv1: Target, tidelog: Target, unique: Callable[[str], str]
) -> None:
    on_kafka = _observe(kafka_tv1, unique)
    _check_model(on_kafka)
    on_tidelog = _observe(tidelog, unique)
    assert differences(on_kafka, on_tidelog) == []
    _check_model(on_tidelog)


@pytest.mark.timeout(300)
def test_one_kafka_broker_twice_looks_the_same(
    kafka_tv1: Target, unique: Callable[[str], str]
) -> None:
    """Nothing run-specific is kept: two runs on one broker agree."""
    assert differences(_observe(kafka_tv1, unique), _observe(kafka_tv1, unique)) == []
