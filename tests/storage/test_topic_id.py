"""Topic ids in Kafka's `partition.metadata`: made at creation, kept across reopen,
given at load to a topic an older Tidelog made, shared by partitions added later."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path

import pytest

from protocol.errors import UnknownTopicOrPartition
from storage.fileio import FileIO
from storage.manager import LogManager
from storage.topic_id import (
    PARTITION_METADATA_FILE,
    ZERO_TOPIC_ID,
    decode_topic_id,
    encode_topic_id,
    new_topic_id,
    read_partition_metadata,
)


def _opened(path: Path) -> LogManager:
    manager = LogManager(path)
    manager.open()
    return manager


def _file(path: Path, topic: str, partition: int) -> str:
    return (path / f"{topic}-{partition}" / PARTITION_METADATA_FILE).read_text()


def test_kafkas_text_form() -> None:
    """Kafka's Uuid.toString: base64url without padding (22 characters)."""
    raw = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8").bytes
    text = encode_topic_id(raw)
    assert text == base64.urlsafe_b64encode(raw).decode()[:22] == "a6e4EJ2tEdGAtADAT9QwyA"
    assert decode_topic_id(text) == raw
    with pytest.raises(ValueError):
        decode_topic_id("short")


def test_new_ids_are_never_reserved() -> None:
    ids = {new_topic_id() for _ in range(2000)}
    assert len(ids) == 2000 and ZERO_TOPIC_ID not in ids
    assert not any(encode_topic_id(i).startswith("-") for i in ids)


def test_created_topic_has_one_id_in_every_partition_and_keeps_it(tmp_path: Path) -> None:
    manager = _opened(tmp_path)
    manager.create_topic("orders", 3)
    topic_id = manager.topic_id("orders")
    expected = f"version: 0\ntopic_id: {encode_topic_id(topic_id)}\n"
    assert [_file(tmp_path, "orders", p) for p in range(3)] == [expected] * 3
    assert manager.topic_by_id(topic_id) == "orders"
    manager.add_partitions("orders", 5)
    assert _file(tmp_path, "orders", 4) == expected
    manager.close()
    again = _opened(tmp_path)
    assert again.topic_id("orders") == topic_id
    assert again.topic_by_id(topic_id) == "orders"
    again.close()


def test_topic_without_the_file_gets_an_id_at_load(tmp_path: Path) -> None:
    manager = _opened(tmp_path)
    manager.create_topic("old", 2)
    manager.close()
    for partition in range(2):
        (tmp_path / f"old-{partition}" / PARTITION_METADATA_FILE).unlink()
    again = _opened(tmp_path)
    topic_id = again.topic_id("old")
    assert [read_partition_metadata(FileIO(), tmp_path / f"old-{p}") for p in range(2)] == [
        topic_id
    ] * 2
    again.close()
    assert _opened(tmp_path).topic_id("old") == topic_id


def test_one_partition_missing_its_file_gets_the_others_id(tmp_path: Path) -> None:
    manager = _opened(tmp_path)
    manager.create_topic("t", 2)
    topic_id = manager.topic_id("t")
    manager.close()
    (tmp_path / "t-0" / PARTITION_METADATA_FILE).write_text("garbage\n")
    again = _opened(tmp_path)
    assert again.topic_id("t") == topic_id
    assert read_partition_metadata(FileIO(), tmp_path / "t-0") == topic_id


def test_deleted_topic_leaves_no_id_and_a_new_one_gets_another(tmp_path: Path) -> None:
    manager = _opened(tmp_path)
    manager.create_topic("t", 1)
    first = manager.topic_id("t")
    manager.delete_topic("t")
    assert manager.topic_by_id(first) is None
    with pytest.raises(UnknownTopicOrPartition):
        manager.topic_id("t")
    manager.create_topic("t", 1)
    assert manager.topic_id("t") != first
