"""Topic ids against the real broker: made at creation, written to each partition's
Kafka `partition.metadata`, the same after a restart, answered in Metadata v10+, and
accepted in place of names by Metadata v12+, Produce v13, Fetch v13+ and DeleteTopics
v6 (an unknown id: UNKNOWN_TOPIC_ID, the connection and its neighbours unharmed)."""

from __future__ import annotations

import uuid
import warnings
from pathlib import Path

import pytest

from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import CREATE_TOPICS, DELETE_TOPICS, FETCH, METADATA, PRODUCE
from storage.topic_id import decode_topic_id
from tests.conftest import start_broker
from tests.integration.kafka_helpers import KafkaSocket

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder

pytestmark = pytest.mark.integration

ZERO = bytes(16)
UNKNOWN_TOPIC_ID = ERRORS_BY_NAME["UNKNOWN_TOPIC_ID"].code


def _batch(value: bytes) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2, compression_type=0, is_transactional=False, producer_id=-1,
        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20,
    )  # fmt: skip
    builder.append(0, timestamp=1_700_000_000_000, key=b"k", value=value, headers=[])
    return bytes(builder.build())


def _create(sock: KafkaSocket, name: str, partitions: int) -> dict:
    body = {"topics": [{"name": name, "num_partitions": partitions, "replication_factor": 1,
                        "assignments": [], "configs": []}],
            "timeout_ms": 5000, "validate_only": False}  # fmt: skip
    return sock.call(CREATE_TOPICS, 7, body)["topics"][0]


def _metadata(sock: KafkaSocket, version: int, topics: list[dict] | None) -> dict:
    body = {"topics": topics, "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False}  # fmt: skip
    return sock.call(METADATA, version, body)


def _file_id(data: Path, topic: str, partition: int) -> bytes:
    text = (data / f"{topic}-{partition}" / "partition.metadata").read_text()
    lines = dict(line.split(": ", 1) for line in text.splitlines())
    assert lines["version"] == "0"
    return decode_topic_id(lines["topic_id"])


def _fetch(sock: KafkaSocket, version: int, topic_id: bytes, offset: int = 0,
           last_fetched_epoch: int = -1) -> dict:  # fmt: skip
    return sock.call(FETCH, version, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
        "isolation_level": 0, "session_id": 0, "session_epoch": -1,
        "topics": [{"topic_id": topic_id, "partitions": [{
            "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
            "last_fetched_epoch": last_fetched_epoch, "log_start_offset": -1,
            "partition_max_bytes": 1 << 20}]}],
        "forgotten_topics_data": [], "rack_id": "",
    })  # fmt: skip


def test_topic_ids_survive_a_restart_and_name_topics(tmp_path: Path) -> None:
    data = tmp_path / "data"
    broker = start_broker(data)
    try:
        with KafkaSocket(broker.address) as sock:
            created = _create(sock, "orders", 2)
            assert created["error_code"] == 0 and created["num_partitions"] == 2
            topic_id = created["topic_id"]
            assert topic_id != ZERO
            assert {c["name"] for c in created["configs"]} >= {"retention.ms", "cleanup.policy"}
            assert _file_id(data, "orders", 0) == _file_id(data, "orders", 1) == topic_id
            [listed] = _metadata(sock, 10, [{"topic_id": ZERO, "name": "orders"}])["topics"]
            assert (listed["name"], listed["topic_id"]) == ("orders", topic_id)
            # Produce v13 by id, then Fetch v13 by id reads it back
            produced = sock.call(PRODUCE, 13, {
                "transactional_id": None, "acks": -1, "timeout_ms": 5000,
                "topic_data": [{"topic_id": topic_id, "partition_data": [
                    {"index": 0, "records": _batch(b"by id")}]}],
            })["responses"]  # fmt: skip
            assert produced[0]["topic_id"] == topic_id
            assert produced[0]["partition_responses"][0]["error_code"] == 0
        assert broker.stop() == 0
        broker = start_broker(data)
        with KafkaSocket(broker.address) as sock:
            [again] = _metadata(sock, 12, [{"topic_id": topic_id, "name": None}])["topics"]
            assert (again["error_code"], again["name"], again["topic_id"]) == (
                0,
                "orders",
                topic_id,
            )
            fetched = _fetch(sock, 13, topic_id)["responses"]
            assert fetched[0]["topic_id"] == topic_id
            part = fetched[0]["partitions"][0]
            assert (part["error_code"], part["high_watermark"]) == (0, 1)
            assert b"by id" in bytes(part["records"])
            # a fetch past the end with last fetched epoch 0: Kafka's diverging epoch
            diverged = _fetch(sock, 13, topic_id, offset=5, last_fetched_epoch=0)
            part = diverged["responses"][0]["partitions"][0]
            assert part["error_code"] == 0
            assert part["diverging_epoch"] == {"epoch": 0, "end_offset": 1}
            # an id no topic has
            stranger = uuid.uuid4().bytes
            unknown = _metadata(sock, 12, [{"topic_id": stranger, "name": None}])["topics"]
            assert [(t["error_code"], t["topic_id"]) for t in unknown] == [
                (UNKNOWN_TOPIC_ID, stranger)
            ]
            part = _fetch(sock, 13, stranger)["responses"][0]["partitions"][0]
            assert part["error_code"] == UNKNOWN_TOPIC_ID
            deleted = sock.call(DELETE_TOPICS, 6, {
                "topics": [{"name": None, "topic_id": topic_id},
                           {"name": None, "topic_id": stranger}], "timeout_ms": 5000,
            })["responses"]  # fmt: skip
            assert [(d["name"], d["error_code"]) for d in deleted] == [
                ("orders", 0),
                (None, UNKNOWN_TOPIC_ID),
            ]
            assert _metadata(sock, 12, [{"topic_id": topic_id, "name": None}])["topics"][0][
                "error_code"
            ] == (UNKNOWN_TOPIC_ID)
    finally:
        broker.stop()


def test_a_topic_made_before_topic_ids_gets_one_at_start(tmp_path: Path) -> None:
    """An older data directory (no partition.metadata): the id is made at load, written,
    and the next start keeps it."""
    data = tmp_path / "data"
    broker = start_broker(data)
    with KafkaSocket(broker.address) as sock:
        assert _create(sock, "old", 1)["error_code"] == 0
    assert broker.stop() == 0
    (data / "old-0" / "partition.metadata").unlink()
    ids = []
    for _ in range(2):
        broker = start_broker(data)
        with KafkaSocket(broker.address) as sock:
            [topic] = _metadata(sock, 12, [{"topic_id": ZERO, "name": "old"}])["topics"]
            ids.append(topic["topic_id"])
        assert broker.stop() == 0
    assert ids[0] == ids[1] == _file_id(data, "old", 0) != ZERO
