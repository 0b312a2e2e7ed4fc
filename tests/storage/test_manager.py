from __future__ import annotations

import errno
import gc
import json
import os
from pathlib import Path

import pytest

from protocol.errors import (
    InvalidConfig,
    InvalidPartitions,
    InvalidTopic,
    StorageError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from storage.checkpoint import read_checkpoint
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import CLEAN_SHUTDOWN_FILE, LOG_START_OFFSET_CHECKPOINT
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import ManualClock, batch, read_all

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100, segment_index_bytes=4096)


def opened(path: Path, config: LogConfig = SMALL, **kwargs) -> LogManager:
    manager = LogManager(path, config, **kwargs)
    manager.open()
    return manager


def test_create_topic_and_reload(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("orders", 3, {"retention.ms": 1000, "cleanup.policy": ["delete"]})
    manager.get_log("orders", 2).append(batch(4))
    assert manager.topics() == ["orders"] and manager.partition_count("orders") == 3
    assert manager.topic_overrides("orders") == {"retention.ms": "1000", "cleanup.policy": "delete"}
    manager.close()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    again = opened(tmp_path)
    assert again.had_clean_shutdown and not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert again.topic_config("orders").retention_ms == 1000
    assert again.topic_config("orders").segment_bytes == 1000  # default from the manager
    assert [o for o, _ in read_all(again.get_log("orders", 2))] == [0, 1, 2, 3]
    meta = json.loads((tmp_path / "topics" / "orders.json").read_text())
    assert meta["partitions"] == 3
    again.close()


@pytest.mark.parametrize("name", ["", ".", "..", "../etc", "a/b", "x" * 250])
def test_illegal_topic_names_never_touch_the_disk(tmp_path: Path, name: str) -> None:
    manager = opened(tmp_path)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(InvalidTopic):
        manager.create_topic(name)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    manager.close()


def test_create_topic_errors(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("a")
    with pytest.raises(TopicAlreadyExists):
        manager.create_topic("a")
    with pytest.raises(InvalidPartitions):
        manager.create_topic("b", 0)
    with pytest.raises(InvalidConfig, match=r"segment\.bytes"):
        manager.create_topic("c", 1, {"segment.bytes": "1"})
    assert manager.topics() == ["a"]
    assert not (tmp_path / "c-0").exists()
    with pytest.raises(UnknownTopicOrPartition):
        manager.get_log("a", 1)
    with pytest.raises(UnknownTopicOrPartition):
        manager.get_log("zzz", 0)
    manager.close()


def test_longest_legal_topic_name_works_end_to_end(tmp_path: Path) -> None:
    """249 characters is legal (Kafka's limit): temp and delete names must still fit."""
    name = "x" * 249
    manager = opened(tmp_path)
    manager.create_topic(name, 2)
    manager.alter_topic_config(name, {"retention.ms": "5000"}, [])
    manager.get_log(name, 1).append(batch(2))
    manager.close()
    manager = opened(tmp_path)
    assert manager.topic_overrides(name) == {"retention.ms": "5000"}
    assert manager.get_log(name, 1).log_end_offset == 2
    manager.delete_topic(name)
    assert manager.topics() == []
    assert sorted(os.listdir(tmp_path)) == sorted(
        entry for entry in os.listdir(tmp_path) if not entry.startswith("x")
    )
    manager.close()


def test_delete_topic_removes_everything(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("gone", 2)
    manager.get_log("gone", 0).append(batch(1))
    manager.delete_topic("gone")
    assert manager.topics() == []
    assert not list(tmp_path.glob("gone*")) and not (tmp_path / "topics" / "gone.json").exists()
    with pytest.raises(UnknownTopicOrPartition):
        manager.delete_topic("gone")
    manager.create_topic("gone", 1)
    assert manager.get_log("gone", 0).log_end_offset == 0
    manager.close()


def _held_files_of(directory: Path, topic: str) -> list[str]:
    """Files of `topic`'s partitions this process holds open or mapped (deleted too)."""
    prefix = f"{directory}/{topic}-"
    held = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            held.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    with open("/proc/self/maps") as maps:
        held += [line.split(maxsplit=5)[-1].strip() for line in maps]
    return [path for path in held if path.startswith(prefix)]


def test_deleting_a_topic_closes_its_files_at_once_without_the_cyclic_gc(tmp_path: Path) -> None:
    """A log and its segments hold no reference cycle: dropping the last reference to
    a deleted topic's log closes its descriptors and maps right away, so the disk
    space is freed then, not whenever the cyclic GC next runs (the storage bench's
    roll and append slowdown of round 2: two 1 GiB deleted files freed mid-append)."""
    manager = opened(tmp_path)
    manager.create_topic("gone", 1)
    manager.get_log("gone", 0).append(batch(5))
    assert _held_files_of(tmp_path, "gone")  # the log, its index maps and writers
    gc.collect()
    gc.disable()
    try:
        manager.delete_topic("gone")
        assert _held_files_of(tmp_path, "gone") == []
    finally:
        gc.enable()
    manager.close()


def test_a_topic_loaded_before_the_broker_froze_the_heap_frees_its_files_on_delete(
    tmp_path: Path,
) -> None:
    """The broker calls gc.freeze() after loading (broker/server.py): objects loaded at
    start are never collected again, so with a cycle a topic deleted later kept its
    files open (and its disk space taken) until the next restart."""
    manager = opened(tmp_path)
    manager.create_topic("gone", 1)
    manager.get_log("gone", 0).append(batch(5))
    manager.close()
    manager = opened(tmp_path)
    gc.collect()
    gc.freeze()
    try:
        manager.delete_topic("gone")
        gc.collect()
        assert _held_files_of(tmp_path, "gone") == []
    finally:
        gc.unfreeze()
    manager.close()


def test_interrupted_topic_delete_is_finished_at_start(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.close()
    (tmp_path / "old-0.abc-delete").mkdir()
    (tmp_path / "old-0.abc-delete" / "00000000000000000000.log").write_bytes(b"x")
    again = opened(tmp_path)
    assert not (tmp_path / "old-0.abc-delete").exists()
    again.close()


def test_stray_partition_dirs_do_not_resurrect_data(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 1)
    manager.get_log("t", 0).append(batch(3))
    manager.close()
    (tmp_path / "topics" / "t.json").unlink()  # a delete that crashed after this step
    again = opened(tmp_path)
    assert again.topics() == [] and not (tmp_path / "t-0").exists()
    assert len(list(tmp_path.glob("t-0.*-stray"))) == 1  # kept aside for an operator
    again.create_topic("t", 1)
    assert again.get_log("t", 0).log_end_offset == 0
    again.close()


def test_poisoned_log_prevents_the_clean_marker(tmp_path: Path) -> None:
    io = FaultyFileIO()
    manager = opened(tmp_path, io=io)
    manager.create_topic("t", 1)
    manager.get_log("t", 0).append(batch(1))
    io.fail("fsync", errno.EIO, path_contains=".log")
    with pytest.raises(StorageError):
        manager.get_log("t", 0).flush()
    manager.close()
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    again = opened(tmp_path)
    assert not again.had_clean_shutdown
    assert [o for o, _ in read_all(again.get_log("t", 0))] == [0]
    again.close()


def test_alter_config_applies_and_persists(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 2, {"retention.ms": "5"})
    manager.alter_topic_config("t", {"segment.bytes": "2000"}, ["retention.ms"])
    assert manager.get_log("t", 1).config.segment_bytes == 2000
    assert manager.topic_overrides("t") == {"segment.bytes": "2000"}
    with pytest.raises(InvalidConfig):
        manager.alter_topic_config("t", {"segment.bytes": "nope"})
    assert manager.topic_overrides("t") == {"segment.bytes": "2000"}
    manager.set_default_config(LogConfig(retention_ms=77))
    assert manager.topic_config("t").retention_ms == 77
    assert manager.topic_config("t").segment_bytes == 2000
    manager.close()
    again = opened(tmp_path)
    assert again.topic_config("t").segment_bytes == 2000
    again.close()


def test_second_manager_on_same_dir_is_refused(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    with pytest.raises(StorageError, match="locked"):
        opened(tmp_path)
    manager.close()
    opened(tmp_path).close()


def test_checkpoints_and_unclean_restart(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 1)
    log = manager.get_log("t", 0)
    for _ in range(30):
        log.append(batch(1))
    log.flush()
    log.delete_records(12)
    manager.write_checkpoints()
    starts = read_checkpoint(FileIO(), tmp_path / LOG_START_OFFSET_CHECKPOINT)
    assert starts == {("t", 0): 12}
    manager.close()
    again = opened(tmp_path)
    assert again.get_log("t", 0).log_start_offset == 12
    again.close()


def test_pending_deletions_are_drained_when_due(tmp_path: Path) -> None:
    clock = ManualClock()
    manager = opened(tmp_path, clock_ms=clock)
    manager.create_topic("t", 1, {"file.delete.delay.ms": "1000"})
    log = manager.get_log("t", 0)
    for _ in range(40):
        log.append(batch(1))
    log.delete_oldest_segments(1, "test")
    pending = manager.pending_deletions()
    assert pending and all(path.exists() for path, _ in pending)
    assert manager.delete_due_files() == 0
    clock.advance(1000)
    assert manager.delete_due_files() == len(pending)
    assert not any(path.exists() for path, _ in pending)
    manager.close()


def test_statistics_report_recovery_and_deleted_topic_refuses_appends(tmp_path: Path) -> None:
    manager = opened(tmp_path)
    manager.create_topic("t", 2)
    log = manager.get_log("t", 0)
    log.append(batch(2))
    log.flush()
    log.append(batch(1))
    manager.write_checkpoints()
    active = log.active_segment.log_path
    del log
    # A crash: no close(). Only the lock is released, as the kernel would on exit.
    manager._dir.unlock()
    with open(active, "ab") as f:
        f.write(b"\x00" * 30)
    again = opened(tmp_path)
    stats = again.statistics()
    assert not stats.had_clean_shutdown
    assert stats.recovery_truncated_bytes == 30
    assert (stats.topics, stats.partitions, stats.poisoned_partitions) == (1, 2, 0)
    doomed = again.get_log("t", 1)
    again.delete_topic("t")
    with pytest.raises(UnknownTopicOrPartition):
        doomed.append(batch(1))
    again.close()
