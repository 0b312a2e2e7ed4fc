"""MirrorMaker 2 (4.3.1, dedicated mode) both ways between Tidelog and Apache Kafka, with
Kafka -> Kafka as the oracle (issue 37): records with keys, headers and timestamps, the
topic's configs, a partition added on the source, and a consumer group's committed offsets
translated onto the target (`sync.group.offsets.enabled`).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from interop.ecosystem import kafka_io
from interop.ecosystem.kafka_io import Rec
from interop.ecosystem.mirror_maker import MirrorMaker, exact, mm2_properties
from interop.targets import Target

pytestmark = pytest.mark.interop

RECORDS = 10
GROWN_RECORDS = 3
# Non-default configs, which MirrorMaker 2 copies to the target topic.
TOPIC_CONFIGS = {"retention.ms": "86400000", "max.message.bytes": "500000"}
# MirrorMaker 2 starts three connectors, then polls every 1-2 s (SINGLE_NODE_PROPERTIES).
FOLLOW_TIMEOUT_S = 120.0


def _records(first: int, count: int, partition: int, base_ms: int) -> list[
    tuple[int, bytes, bytes, list[tuple[str, bytes]], int]
]:  # fmt: skip
    return [
        (partition, f"key-{i}".encode(), f"value-{i}".encode(),
         [("seq", str(i).encode()), ("origin", b"mm2-test")], base_ms + i)
        for i in range(first, first + count)
    ]  # fmt: skip


def _content(records: list[Rec]) -> list[tuple[object, ...]]:
    """What replication must keep: partition, offset, key, value, headers, timestamp."""
    return [(r.partition, r.offset, r.key, r.value, r.headers, r.timestamp_ms) for r in records]


def _unique(prefix: str) -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def _mirror(source: Target, target: Target, work_dir: Path) -> dict[str, object]:
    # Fresh aliases too: MirrorMaker 2 keeps its connector configs under them.
    src, dst = _unique("src"), _unique("dst")
    topic, group = _unique("mirrored-"), _unique("mirrored-group-")
    remote = f"{src}.{topic}"
    base_ms = int(time.time() * 1000) - 3_600_000
    kafka_io.create_topic(source.bootstrap, topic, 1, TOPIC_CONFIGS)
    kafka_io.produce(source.bootstrap, topic, _records(0, RECORDS, 0, base_ms))
    committed = kafka_io.consume_and_commit(source.bootstrap, topic, group, RECORDS)
    props = mm2_properties(src, source.bootstrap, dst, target.bootstrap, exact(topic), exact(group))
    with MirrorMaker(work_dir, props, dst) as mm2:

        def alive_and(check: Callable[[], object]) -> object:
            if not mm2.alive():
                raise AssertionError(f"MirrorMaker 2 exited:\n{mm2.log_tail()}")
            return check()

        def follow(what: str, check: Callable[[], object]) -> None:
            try:
                kafka_io.wait_for(what, lambda: alive_and(check), FOLLOW_TIMEOUT_S)
            except TimeoutError as exc:
                raise AssertionError(f"{exc}; MirrorMaker 2 log:\n{mm2.log_tail()}") from None

        def replicated() -> bool:
            return (
                remote in kafka_io.topic_names(target.bootstrap)
                and len(kafka_io.read_all(target.bootstrap, remote)) == RECORDS
            )

        follow(f"{remote} with {RECORDS} records", replicated)
        follow(
            "the topic's configs",
            lambda: all(
                kafka_io.topic_config(target.bootstrap, remote).get(k) == v
                for k, v in TOPIC_CONFIGS.items()
            ),
        )
        follow(
            "the group's offsets translated",
            lambda: kafka_io.committed(target.bootstrap, remote, group) == committed,
        )

        kafka_io.grow_partitions(source.bootstrap, topic, 2)
        kafka_io.produce(source.bootstrap, topic, _records(RECORDS, GROWN_RECORDS, 1, base_ms))
        follow(
            "the new partition and its records",
            lambda: (
                kafka_io.partition_count(target.bootstrap, remote) == 2
                and len(kafka_io.read_all(target.bootstrap, remote)) == RECORDS + GROWN_RECORDS
            ),
        )
        failures = mm2.log_lines(r"Could not create topic-partitions|ERROR")
    source_records = kafka_io.read_all(source.bootstrap, topic)
    target_records = kafka_io.read_all(target.bootstrap, remote)
    assert _content(target_records) == _content(source_records)
    return {
        "records": _content(target_records),
        "configs": {k: kafka_io.topic_config(target.bootstrap, remote)[k] for k in TOPIC_CONFIGS},
        "committed": kafka_io.committed(target.bootstrap, remote, group),
        "failures": failures,
    }


def _normalised(observed: dict[str, object]) -> dict[str, object]:
    """Timestamps are the run's own (an hour ago at produce time): compare them relative."""
    records = observed["records"]
    assert isinstance(records, list)
    base = min(r[5] for r in records)
    return {**observed, "records": [(*r[:5], r[5] - base) for r in records]}


@pytest.fixture(scope="module")
def oracle(
    kafka: Target, kafka_b: Target, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, object]:
    observed = _mirror(kafka, kafka_b, tmp_path_factory.mktemp("mm2-oracle"))
    assert observed["failures"] == []
    return _normalised(observed)


@pytest.mark.timeout(600)
def test_kafka_to_kafka_oracle(oracle: dict[str, object]) -> None:
    assert oracle["configs"] == TOPIC_CONFIGS
    assert oracle["committed"] == {0: RECORDS}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("direction", ["tidelog->kafka", "kafka->tidelog"])
def test_mirror_maker_as_on_kafka(
    kafka: Target, tidelog: Target, oracle: dict[str, object], tmp_path: Path, direction: str
) -> None:
    source, target = (tidelog, kafka) if direction == "tidelog->kafka" else (kafka, tidelog)
    assert _normalised(_mirror(source, target, tmp_path)) == oracle
