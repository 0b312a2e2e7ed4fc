"""kafka-clients 4.4's transactional producer and its read_committed / read_uncommitted
consumers, on Apache Kafka and on Tidelog (issue 36's acceptance), differentially.

`TxnApp scenario` (interop/jvm_apps) runs two transactional producers whose committed and
aborted transactions interleave over two partitions, leaves one transaction open (the
suite then fetches the partitions raw: LSO, aborted list, batches), fences that producer
with a second instance of its transactional.id, and reads everything back under both
isolation levels. On each broker the reads must be exactly the model below; and the two
brokers must agree on every offset, every ListOffsets answer, every raw Fetch answer
(batches, markers, LSO, high watermark, aborted list) and the zombie's errors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from interop.compare import differences
from interop.ecosystem import kafka_io
from interop.ecosystem.txn_apps import run_scenario
from interop.ecosystem.txn_wire import ProducerNames, topic_view
from interop.targets import Target

pytestmark = pytest.mark.interop

PARTITIONS = 2
# (value, partition, committed?) in send order: what TxnApp.scenario sends. a4-0 is in
# the transaction the second instance of A's transactional.id aborts when it fences A.
SENDS = [
    ("a1-0", 0, False), ("b1-0", 0, True), ("a1-1", 1, False), ("b1-1", 1, True),
    ("a1-2", 0, False), ("a2-0", 1, True), ("a2-1", 1, True), ("b2-0", 0, False),
    ("a3-0", 0, True), ("b3-0", 1, False), ("a3-1", 1, True), ("b3-1", 0, False),
    ("a4-0", 0, False), ("a5-0", 0, True), ("a5-1", 1, True),
]  # fmt: skip


def _values(partition: int, *, committed_only: bool) -> list[str]:
    return [v for v, p, ok in SENDS if p == partition and (ok or not committed_only)]


def _observe(target: Target, unique: Callable[[str], str], tmp: Path) -> dict[str, Any]:
    topic = unique("txn-java")
    kafka_io.create_topic(target.bootstrap, topic, PARTITIONS)
    names = ProducerNames()
    document, while_open = run_scenario(
        target.bootstrap,
        topic,
        unique("txn-java-id"),
        lambda: topic_view(target.bootstrap, topic, PARTITIONS, names),
        tmp / f"txnapp-{target.name}.log",
    )
    # A consumer's order across partitions follows fetch timing, which Kafka does not
    # promise; the comparison is per partition, in offset order.
    for isolation in ("read_committed", "read_uncommitted"):
        document[isolation]["records"] = sorted(document[isolation]["records"])
    return {"app": document, "wire_open": while_open,
            "wire_end": topic_view(target.bootstrap, topic, PARTITIONS, names)}  # fmt: skip


def _by_partition(read: dict[str, Any]) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {p: [] for p in range(PARTITIONS)}
    for partition, _offset, value in read["records"]:
        out[partition].append(value)
    return out


def _check_model(seen: dict[str, Any]) -> None:
    """What any correct broker gives, independent of the other broker."""
    app = seen["app"]
    committed = {p: _values(p, committed_only=True) for p in range(PARTITIONS)}
    everything = {p: _values(p, committed_only=False) for p in range(PARTITIONS)}
    assert _by_partition(app["read_committed"]) == committed
    assert _by_partition(app["read_uncommitted"]) == everything
    # Offsets strictly increase within a partition (exactly once, in order).
    for read in (app["read_committed"], app["read_uncommitted"]):
        for p in range(PARTITIONS):
            offsets = [o for part, o, _v in read["records"] if part == p]
            assert offsets == sorted(set(offsets))
    # Fenced: the zombie's send and commit fail, with ProducerFencedException (Kafka at
    # transaction.version 1) or the abortable InvalidProducerEpochException (at 2, where
    # the epoch is bumped per transaction); the abort that follows is fenced on both.
    fenced = {"ProducerFencedException", "InvalidProducerEpochException"}
    assert {app["zombie_send"], app["zombie_commit"]} <= fenced, app
    assert app["zombie_abort"] == "ProducerFencedException", app
    # While A's transaction was open, partition 0's LSO was its first offset; at the end
    # both isolation levels answer the high watermark.
    a4 = next(o for v, _p, o in app["sends"] if v == "a4-0")
    assert app["offsets_open"]["read_committed"]["0"] == a4
    assert app["offsets_open"]["read_uncommitted"]["0"] == a4 + 1
    assert app["offsets_end"]["read_committed"] == app["offsets_end"]["read_uncommitted"]
    open_p0 = seen["wire_open"]["read_committed"]["0"]
    assert (open_p0["last_stable_offset"], open_p0["high_watermark"]) == (a4, a4 + 1)
    end = seen["wire_end"]["read_committed"]
    for p in range(PARTITIONS):
        assert end[str(p)]["last_stable_offset"] == end[str(p)]["high_watermark"]
        assert end[str(p)]["aborted"], f"partition {p}: no aborted transactions listed"


@pytest.mark.timeout(300)
def test_java_transactions_on_kafka_4_4_defaults(
    kafka: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """The model holds on Kafka as formatted by default (transaction.version 2) too."""
    _check_model(_observe(kafka, unique, tmp_path))


@pytest.mark.timeout(600)
def test_java_transactions_and_isolation_as_on_kafka(
    kafka_tv1: Target, tidelog: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    on_kafka = _observe(kafka_tv1, unique, tmp_path)
    _check_model(on_kafka)
    on_tidelog = _observe(tidelog, unique, tmp_path)
    assert differences(on_kafka, on_tidelog) == []
    _check_model(on_tidelog)


@pytest.mark.timeout(300)
def test_one_kafka_broker_twice_looks_the_same(
    kafka_tv1: Target, unique: Callable[[str], str], tmp_path: Path
) -> None:
    """The observation keeps nothing run-specific (names, producer ids, clocks): two runs
    on one broker agree, so a difference with Tidelog is Tidelog's."""
    first = _observe(kafka_tv1, unique, tmp_path)
    assert differences(first, _observe(kafka_tv1, unique, tmp_path)) == []
