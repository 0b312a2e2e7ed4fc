"""LogManager.add_partitions (Kafka's CreatePartitions): only increases, the new count
persisted, a failure rolled back, and a crash before the metadata leaves strays only."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from protocol.errors import InvalidPartitions, StorageError, UnknownTopicOrPartition
from storage.config import LogConfig
from storage.data_dir import MAX_PARTITIONS_PER_TOPIC
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import batch, read_all

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100, segment_index_bytes=4096)


def opened(path: Path, **kwargs) -> LogManager:
    manager = LogManager(path, SMALL, **kwargs)
    manager.open()
    return manager


def test_grows_keeps_the_old_records_and_persists_the_count(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 2, {"retention.ms": "60000"})
    manager.get_log("t", 1).append(batch(3))
    assert manager.add_partitions("t", 5) == 2
    assert manager.partition_count("t") == 5
    manager.get_log("t", 4).append(batch(2))
    assert manager.get_log("t", 4).config.retention_ms == 60000  # the topic's overrides
    manager.close()
    meta = json.loads((tmp_path / "topics" / "t.json").read_text())
    assert meta["partitions"] == 5 and meta["configs"] == {"retention.ms": "60000"}
    again = opened(tmp_path)
    assert again.partition_count("t") == 5
    assert [o for o, _ in read_all(again.get_log("t", 1))] == [0, 1, 2]
    assert [o for o, _ in read_all(again.get_log("t", 4))] == [0, 1]
    again.close()


@pytest.mark.parametrize(
    ("count", "message"),
    [
        (2, "Topic already has 2 partition(s)."),
        (1, "The topic t currently has 2 partition(s); 1 would not be an increase."),
        (MAX_PARTITIONS_PER_TOPIC + 1, "partitions must be in"),
    ],
)
def test_only_an_increase_within_the_limit(tmp_path: Path, count: int, message: str) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 2)
    with pytest.raises(InvalidPartitions, match=message.replace("(", r"\(").replace(")", r"\)")):
        manager.add_partitions("t", count)
    assert manager.partition_count("t") == 2
    with pytest.raises(UnknownTopicOrPartition):
        manager.add_partitions("nope", 3)
    manager.close()


def test_validate_only_makes_nothing(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 1)
    assert manager.add_partitions("t", 3, validate_only=True) == 1
    assert manager.partition_count("t") == 1 and not (tmp_path / "t-1").exists()
    manager.close()


def test_a_failed_metadata_write_rolls_back(tmp_path: Path) -> None:
    io = FaultyFileIO()
    manager = opened(tmp_path, io=io)
    manager.create_topic("t", 1)
    io.fail("rename", errno.ENOSPC, path_contains="t.json")
    with pytest.raises(StorageError, match="adding partitions"):
        manager.add_partitions("t", 3)
    assert manager.partition_count("t") == 1
    assert not (tmp_path / "t-1").exists() and not (tmp_path / "t-2").exists()
    manager.close()
    again = opened(tmp_path)
    assert again.partition_count("t") == 1
    again.close()


def test_directories_without_the_new_count_are_strays_at_the_next_start(tmp_path: Path) -> None:
    """A crash after the directories, before the metadata: the old count stands and the
    directories are moved aside (a later growth starts from empty partitions)."""
    manager = opened(tmp_path)
    manager.create_topic("t", 1)
    manager.close()
    (tmp_path / "t-1").mkdir()
    again = opened(tmp_path)
    assert again.partition_count("t") == 1 and not (tmp_path / "t-1").exists()
    assert again.add_partitions("t", 2) == 1
    assert again.get_log("t", 1).log_end_offset == 0
    again.close()
