"""The retention pass over a real LogManager in a temporary directory, on a fake clock."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from retention.explain import Verdict
from retention.rules import DeleteReason
from retention.task import RetentionTask, explain_log
from storage.manager import LogManager

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000
OLD_MS = NOW_MS - 3 * HOUR_MS
# Every append below is one batch of BATCH_BYTES; with segment.bytes=200 each gets its
# own segment.
SMALL_SEGMENTS = {"segment.bytes": 200, "segment.index.bytes": 4096}


def batch(ts: int) -> bytes:
    return encode_batch([(b"key", b"v" * 100, None, ts)])


BATCH_BYTES = len(batch(NOW_MS))


class Clock:
    def __init__(self) -> None:
        self.now_ms = NOW_MS

    def __call__(self) -> int:
        return self.now_ms


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def manager(tmp_path: Path, clock: Clock) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data", clock_ms=clock)
    m.open()
    yield m
    m.close()


def append(manager: LogManager, topic: str, *timestamps: int, partition: int = 0) -> None:
    log = manager.get_log(topic, partition)
    for ts in timestamps:
        log.append(batch(ts))


def bases(manager: LogManager, topic: str, partition: int = 0) -> list[int]:
    return [s.base_offset for s in manager.get_log(topic, partition).segments_info()]


def test_time_retention_deletes_expired_segments_and_renames_their_files(
    manager: LogManager, clock: Clock
) -> None:
    manager.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    append(manager, "t", OLD_MS, OLD_MS, NOW_MS, OLD_MS)
    result = RetentionTask(manager, clock_ms=clock).run_once()
    [deletion] = result.deletions
    assert (deletion.reason, deletion.base_offsets) == (DeleteReason.TIME, (0, 1))
    assert deletion.size_bytes == 2 * BATCH_BYTES
    log = manager.get_log("t", 0)
    assert bases(manager, "t") == [2, 3]  # the walk stopped at the fresh segment 2
    assert log.log_start_offset == 2
    names = sorted(p.name for p in log.directory.iterdir())
    assert "00000000000000000000.log.deleted" in names
    assert "00000000000000000000.log" not in names
    due = {due_ms for _, due_ms in manager.pending_deletions()}
    assert due == {NOW_MS + 60_000}  # file.delete.delay.ms default


def test_an_expired_log_rolls_first_and_keeps_its_end_offset(
    manager: LogManager, clock: Clock
) -> None:
    manager.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    append(manager, "t", OLD_MS, OLD_MS)
    result = RetentionTask(manager, clock_ms=clock).run_once()
    assert result.segments_deleted == 2
    log = manager.get_log("t", 0)
    [active] = log.segments_info()
    assert (active.base_offset, active.size_bytes, active.is_active) == (2, 0, True)
    assert (log.log_start_offset, log.log_end_offset) == (2, 2)
    [verdict] = explain_log(log, NOW_MS).segments
    assert verdict.verdict is Verdict.KEEP_ACTIVE
    assert "empty" in verdict.reason
    assert log.append(encode_batch([(b"k", b"v", None, NOW_MS)])).base_offset == 2
    # A second pass finds nothing: the empty active segment never goes.
    assert RetentionTask(manager, clock_ms=clock).run_once().segments_deleted == 0


def test_nothing_expires_before_its_time(manager: LogManager, clock: Clock) -> None:
    manager.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    append(manager, "t", NOW_MS - HOUR_MS, NOW_MS)
    task = RetentionTask(manager, clock_ms=clock)
    assert task.run_once().segments_deleted == 0  # age == retention.ms: stays
    clock.now_ms += 1
    assert task.run_once().segments_deleted == 1


def test_size_retention_keeps_the_log_at_or_above_retention_bytes(
    manager: LogManager, clock: Clock
) -> None:
    segment_bytes = BATCH_BYTES
    for name, limit in (("under", 4 * segment_bytes - 1), ("exact", 4 * segment_bytes)):
        manager.create_topic(name, 1, {"retention.bytes": limit, **SMALL_SEGMENTS})
        append(manager, name, *[NOW_MS] * 6)
    RetentionTask(manager, clock_ms=clock).run_once()
    # 6 segments; "exact" may shed exactly 2; "under" needs to go below 4 but never below the limit.
    assert bases(manager, "exact") == [2, 3, 4, 5]
    assert bases(manager, "under") == [2, 3, 4, 5]
    assert manager.get_log("exact", 0).size_bytes == 4 * segment_bytes
    manager.alter_topic_config("exact", {"retention.bytes": 3 * segment_bytes})
    RetentionTask(manager, clock_ms=clock).run_once()
    assert bases(manager, "exact") == [3, 4, 5]


def test_delete_records_then_the_pass_removes_whole_segments_below_it(
    manager: LogManager, clock: Clock
) -> None:
    manager.create_topic("t", 1, SMALL_SEGMENTS)
    append(manager, "t", *[NOW_MS] * 5)
    log = manager.get_log("t", 0)
    assert log.delete_records(3) == 3
    [deletion] = RetentionTask(manager, clock_ms=clock).run_once().deletions
    assert (deletion.reason, deletion.base_offsets) == (DeleteReason.START_OFFSET, (0, 1, 2))
    assert bases(manager, "t") == [3, 4]
    assert log.log_start_offset == 3


def test_compact_topics_get_only_the_log_start_rule(manager: LogManager, clock: Clock) -> None:
    manager.create_topic(
        "c", 1, {"cleanup.policy": "compact", "retention.ms": HOUR_MS, **SMALL_SEGMENTS}
    )
    manager.create_topic(
        "cd", 1, {"cleanup.policy": "compact,delete", "retention.ms": HOUR_MS, **SMALL_SEGMENTS}
    )
    for topic in ("c", "cd"):
        append(manager, topic, OLD_MS, OLD_MS, NOW_MS)
    RetentionTask(manager, clock_ms=clock).run_once()
    assert bases(manager, "c") == [0, 1, 2]
    assert bases(manager, "cd") == [2]
    verdicts = [v.verdict for v in explain_log(manager.get_log("c", 0), NOW_MS).segments]
    assert verdicts == [Verdict.KEEP_COMPACT] * 3


def test_a_config_change_applies_at_the_next_pass(manager: LogManager, clock: Clock) -> None:
    manager.create_topic("t", 1, SMALL_SEGMENTS)
    append(manager, "t", OLD_MS, NOW_MS)
    task = RetentionTask(manager, clock_ms=clock)
    assert task.run_once().segments_deleted == 0  # 7 days by default
    manager.alter_topic_config("t", {"retention.ms": HOUR_MS})
    assert task.run_once().segments_deleted == 1
    manager.alter_topic_config("t", {"retention.ms": -1})
    append(manager, "t", OLD_MS, NOW_MS)
    assert task.run_once().segments_deleted == 0


def test_a_bounded_pass_resumes_where_it_stopped(manager: LogManager, clock: Clock) -> None:
    for topic in ("a", "b", "c"):
        manager.create_topic(topic, 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
        append(manager, topic, OLD_MS, OLD_MS, OLD_MS, NOW_MS)
    task = RetentionTask(manager, clock_ms=clock, max_segments_per_pass=4)
    first = task.run_once()
    assert (first.segments_deleted, first.budget_exhausted) == (4, True)
    assert [(d.topic, d.segments) for d in first.deletions] == [("a", 3), ("b", 1)]
    second = task.run_once()
    # It starts at "b", where the budget ran out, then goes on to "c".
    assert [(d.topic, d.segments) for d in second.deletions] == [("b", 2), ("c", 2)]
    third = task.run_once()
    assert [(d.topic, d.segments) for d in third.deletions] == [("c", 1)]
    assert not third.budget_exhausted
    assert [bases(manager, t) for t in ("a", "b", "c")] == [[3], [3], [3]]
    stats = task.statistics()
    assert stats.passes == 3
    assert stats.deleted_segments == {("a", "time"): 3, ("b", "time"): 3, ("c", "time"): 3}
    assert stats.deleted_bytes[("b", "time")] == 3 * BATCH_BYTES


def test_segments_without_timestamps_expire_by_file_mtime(
    manager: LogManager, clock: Clock
) -> None:
    manager.create_topic("t", 1, {"retention.ms": HOUR_MS, **SMALL_SEGMENTS})
    append(manager, "t", -1, -1, -1)  # records without timestamps
    log = manager.get_log("t", 0)
    first = log.segments_info()[0]
    assert first.largest_timestamp_ms == -1
    old_s = (NOW_MS - 2 * HOUR_MS) / 1000
    os.utime(log.directory / "00000000000000000000.log", (old_s, old_s))
    new_s = NOW_MS / 1000
    for name in ("00000000000000000001.log", "00000000000000000002.log"):
        os.utime(log.directory / name, (new_s, new_s))
    verdicts = explain_log(log, NOW_MS).segments
    assert [v.timestamp_from_mtime for v in verdicts] == [True, True, True]
    assert verdicts[0].age_ms == 2 * HOUR_MS
    [deletion] = RetentionTask(manager, clock_ms=clock).run_once().deletions
    assert deletion.base_offsets == (0,)


def test_invalid_budget_is_refused(manager: LogManager) -> None:
    with pytest.raises(ValueError, match="max_segments_per_pass"):
        RetentionTask(manager, max_segments_per_pass=0)


def test_appends_between_passes_are_seen_despite_reused_metadata(
    manager: LogManager, clock: Clock
) -> None:
    manager.create_topic("t", 1, {"retention.bytes": 3 * BATCH_BYTES, **SMALL_SEGMENTS})
    append(manager, "t", NOW_MS, NOW_MS, NOW_MS)
    task = RetentionTask(manager, clock_ms=clock)
    assert task.run_once().segments_deleted == 0
    assert task.run_once().segments_deleted == 0  # idle: metadata reused
    append(manager, "t", NOW_MS)  # now 4 batches: one may go
    [deletion] = task.run_once().deletions
    assert (deletion.reason, deletion.base_offsets) == (DeleteReason.SIZE, (0,))
    manager.get_log("t", 0).delete_records(2)  # only the start offset changes
    [deletion] = task.run_once().deletions
    assert (deletion.reason, deletion.base_offsets) == (DeleteReason.START_OFFSET, (1,))
