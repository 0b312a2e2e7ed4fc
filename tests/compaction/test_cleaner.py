"""Cleaning real storage logs: results, tombstones, lag, gates, partial maps, failures."""

from __future__ import annotations

import errno
import threading

import pytest

from compaction.manager import MAX_CONSECUTIVE_FAILURES
from protocol.batch import Compression, decode_records, encode_batch, iter_headers, read_header
from storage.checkpoint import read_checkpoint
from storage.fileio import FileIO
from storage.files import CLEAN_SHUTDOWN_FILE, CLEANER_OFFSET_CHECKPOINT
from storage.producer_snapshot import list_snapshots
from tests.compaction.helpers import (
    Clock,
    append,
    batches_of,
    latest_by_key,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
    read_all,
)
from tests.faulty_io import FaultyFileIO

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "4096", "delete.retention.ms": "1000"}


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def logs(tmp_path, clock):
    manager = open_manager(tmp_path, clock)
    yield manager
    manager.close()


def fill(log, clock, updates, keys, *, start=0):
    for i in range(start, start + updates):
        append(log, [(b"key-%d" % (i % keys), b"value-%d" % i)], clock())


def churn(log, clock, updates):
    """Updates to keys no other helper writes: makes a log dirty without touching its keys."""
    for i in range(updates):
        append(log, [(b"churn-%d" % (i % 2), b"x")], clock())


def test_many_updates_shrink_to_one_record_per_key(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    fill(log, clock, 600, 5)
    log.roll()
    before = read_all(log)
    start, end = log.log_start_offset, log.log_end_offset
    result = make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    assert result is not None
    after = read_all(log)
    assert latest_by_key(after) == latest_by_key(before)
    assert len(after) == 5
    # Offsets are the originals; start and end do not move.
    assert [r.offset for r in after] == sorted(o for o, _ in latest_by_key(before).values())
    assert (log.log_start_offset, log.log_end_offset) == (start, end)
    assert result.records_removed == 595 and result.records_kept == 5
    assert result.end_offset == 600
    assert log.size_bytes < 600 * 20


def test_fetch_of_removed_offset_returns_next_surviving_batch(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    fill(log, clock, 100, 3)
    log.roll()
    make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    survivors = [r.offset for r in read_all(log)]
    assert 0 not in survivors
    data = log.read(0, 1).records
    first = next(iter_headers(data))[1]
    assert first.base_offset == survivors[0]


def test_tombstone_hides_then_disappears(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    log = logs.get_log("t", 0)
    fill(log, clock, 50, 5)
    append(log, [(b"key-1", None)], clock())
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    cleaners.clean_one(make_cleaner())
    state = latest_by_key(read_all(log))
    assert state[b"key-1"][1] is None  # the tombstone is still visible
    tomb_batch = next(h for _, h in iter_headers(log.read(state[b"key-1"][0], 1).records))
    assert tomb_batch.has_delete_horizon
    assert tomb_batch.base_timestamp == clock() + 1000
    # Before the horizon another cleaning keeps it.
    clock.advance(999)
    churn(log, clock, 10)
    log.roll()
    assert cleaners.clean_one(make_cleaner()) is not None
    assert latest_by_key(read_all(log))[b"key-1"][1] is None
    # At the horizon it goes, and no older value of the key comes back.
    clock.advance(1)
    churn(log, clock, 10)
    log.roll()
    assert cleaners.clean_one(make_cleaner()) is not None
    records = read_all(log)
    assert b"key-1" not in {r.key for r in records}
    assert {r.key for r in records} == {b"key-0", b"key-2", b"key-3", b"key-4"} | {
        b"churn-0",
        b"churn-1",
    }


def test_compressed_batches_keep_their_identity(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    rows = [(b"a", b"1"), (b"b", b"2"), (b"a", b"3")]
    append(log, rows, clock(), compression=Compression.ZSTD, producer_id=9, producer_epoch=1,
           base_sequence=0)  # fmt: skip
    # The producer's newest batch is kept whole (deduplication); the first is cleaned.
    append(log, [(b"c", b"4")], clock(), producer_id=9, producer_epoch=1, base_sequence=3)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    cleaners.clean_one(make_cleaner())
    data = log.read(0, 1 << 20).records
    header = read_header(data)
    assert header.compression == Compression.ZSTD
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 0)
    assert header.last_offset_delta == 2
    assert [(r.offset, r.key) for r in decode_records(data)] == [(1, b"b"), (2, b"a")]


def test_unkeyed_records_are_dropped(logs, clock):
    logs.create_topic("t", 1, {"segment.bytes": "4096"})
    log = logs.get_log("t", 0)
    append(log, [(None, b"x"), (b"k", b"1"), (None, b"y")], clock())
    log.roll()
    logs.alter_topic_config("t", set=COMPACT)
    make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    assert [(r.offset, r.key) for r in read_all(log)] == [(1, b"k")]


def test_min_compaction_lag_protects_recent_records(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "min.compaction.lag.ms": "60000"})
    log = logs.get_log("t", 0)
    fill(log, clock, 50, 2)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    assert cleaners.clean_one(make_cleaner()) is None
    assert len(read_all(log)) == 50
    clock.advance(60001)
    assert cleaners.clean_one(make_cleaner()) is not None
    assert len(read_all(log)) == 2


def test_dirty_ratio_gate(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.5"})
    log = logs.get_log("t", 0)
    fill(log, clock, 300, 300)  # all distinct: cleaning keeps everything
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    assert cleaners.clean_one(make_cleaner()) is not None  # ratio 1.0 first time
    fill(log, clock, 20, 300, start=300)
    log.roll()
    measured = cleaners.measure(log, clock())
    assert 0 < measured.dirty_ratio < 0.5
    assert cleaners.clean_one(make_cleaner()) is None
    logs.alter_topic_config("t", set={"min.cleanable.dirty.ratio": "0.01"})
    assert cleaners.clean_one(make_cleaner()) is not None


def test_full_map_cleans_part_then_continues(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    log = logs.get_log("t", 0)
    fill(log, clock, 400, 200)
    log.roll()
    before = latest_by_key(read_all(log))
    cleaners = make_cleaner_manager(logs, clock)
    small = make_cleaner(map_bytes=24 * 150, io_buffer_load_factor=0.9)
    first = cleaners.clean_one(small)
    assert first is not None and first.map_full
    assert 0 < first.end_offset < 400
    assert cleaners.checkpoint("t", 0) == first.end_offset
    assert latest_by_key(read_all(log)) == before
    rounds = 0
    while cleaners.clean_one(small) is not None:
        rounds += 1
        assert rounds < 10
    assert cleaners.checkpoint("t", 0) == 400
    records = read_all(log)
    assert latest_by_key(records) == before
    assert len(records) == 200


def test_checkpoint_file_written_and_reset_when_out_of_range(logs, clock, tmp_path):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    fill(log, clock, 50, 5)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    cleaners.clean_one(make_cleaner())
    path = tmp_path / CLEANER_OFFSET_CHECKPOINT
    assert read_checkpoint(FileIO(), path) == {("t", 0): 50}
    # A fresh manager reads it back; an out-of-range value is reset to the log start.
    path.write_text("0\n1\nt 0 999\n")
    again = make_cleaner_manager(logs, clock)
    measured = again.measure(log, clock())
    assert measured.range.first_dirty_offset == 0 and measured.range.checkpoint_reset


def test_second_pass_merges_small_cleaned_segments(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    log = logs.get_log("t", 0)
    fill(log, clock, 400, 4)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    cleaners.clean_one(make_cleaner())
    segments_after_first = log.segment_count
    fill(log, clock, 10, 4, start=400)
    log.roll()
    cleaners.clean_one(make_cleaner())
    assert log.segment_count < segments_after_first
    assert len(read_all(log)) == 4


def test_snapshots_of_merged_segments_go_with_them(logs, clock, tmp_path):
    """Kafka deletes the producer snapshots of the segments the cleaner replaced: a
    compacted topic rolls a snapshot per segment, so they would otherwise pile up."""
    logs.create_topic("t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    log = logs.get_log("t", 0)
    for start in range(0, 400, 50):
        fill(log, clock, 50, 4, start=start)
        log.roll()
        log.write_pending_snapshot()  # the broker's flush task, within a second
    directory = tmp_path / "t-0"
    assert len(list_snapshots(directory)) == 8
    cleaners = make_cleaner_manager(logs, clock)
    cleaners.clean_one(make_cleaner())
    fill(log, clock, 10, 4, start=400)
    log.roll()
    log.write_pending_snapshot()
    cleaners.clean_one(make_cleaner())  # the second pass merges the small cleaned segments
    bases = {info.base_offset for info in log.segments_info()}
    assert len(bases) < 10
    assert {at for at, _ in list_snapshots(directory)} <= bases


def test_repeated_failure_marks_uncleanable_and_leaves_log_intact(tmp_path, clock):
    io = FaultyFileIO()
    logs = open_manager(tmp_path, clock, io)
    try:
        logs.create_topic("t", 1, COMPACT)
        log = logs.get_log("t", 0)
        fill(log, clock, 100, 5)
        log.roll()
        before = read_all(log)
        io.fail("pwrite", errno.ENOSPC, persistent=True, path_contains=".cleaned")
        cleaners = make_cleaner_manager(logs, clock, io, backoff_ms=1000)
        cleaner = make_cleaner()
        for attempt in range(MAX_CONSECUTIVE_FAILURES):
            assert cleaners.clean_one(cleaner) is None
            assert cleaners.statistics().failures_total == attempt + 1
            # Backed off: an immediate retry does not clean (no tight loop).
            assert cleaners.clean_one(cleaner) is None
            assert cleaners.statistics().failures_total == attempt + 1
            clock.advance(1000 * 2**attempt)
        assert cleaners.uncleanable() == (("t", 0),)
        assert cleaners.statistics().logs[("t", 0)].uncleanable
        io.clear()
        clock.advance(10**6)
        assert cleaners.clean_one(cleaner) is None
        # Groups that were swapped before the failure stay cleaned; every key is intact.
        assert latest_by_key(read_all(log)) == latest_by_key(before)
        assert not [p for p in (tmp_path / "t-0").iterdir() if p.name.endswith(".cleaned")]
    finally:
        logs.close()


def test_appends_and_fetches_continue_during_cleaning(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    fill(log, clock, 1500, 10)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    result = []
    worker = threading.Thread(target=lambda: result.append(cleaners.clean_one(make_cleaner())))
    worker.start()
    appended = 0
    while worker.is_alive() or appended < 50:
        fill(log, clock, 1, 10, start=10_000 + appended)
        appended += 1
        assert log.read(log.log_end_offset - 1, 1 << 10).records
    worker.join()
    assert result[0] is not None
    records = read_all(log)
    offsets = [r.offset for r in records]
    assert offsets == sorted(offsets)
    assert offsets[-appended:] == list(range(1500, 1500 + appended))
    state = latest_by_key(records)
    assert all(o >= 1500 - 10 for o, _ in state.values())


def test_compact_delete_policy_is_cleaned(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "cleanup.policy": "compact,delete"})
    log = logs.get_log("t", 0)
    fill(log, clock, 100, 2)
    log.roll()
    assert make_cleaner_manager(logs, clock).clean_one(make_cleaner()) is not None
    assert len(read_all(log)) == 2


def test_delete_only_topics_are_never_cleaned(logs, clock):
    logs.create_topic("t", 1, {"segment.bytes": "4096"})
    log = logs.get_log("t", 0)
    fill(log, clock, 100, 2)
    log.roll()
    assert make_cleaner_manager(logs, clock).clean_one(make_cleaner()) is None
    assert len(read_all(log)) == 100


def test_max_compaction_lag_forces_a_cleaning_and_rolls(logs, clock):
    logs.create_topic(
        "t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.9", "max.compaction.lag.ms": "60000"}
    )
    log = logs.get_log("t", 0)
    fill(log, clock, 300, 300)  # distinct keys: the first cleaning keeps everything
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    assert cleaners.clean_one(make_cleaner()) is not None
    fill(log, clock, 5, 300)  # a little dirt: ratio far below 0.9
    # Compacted topics roll by max.compaction.lag.ms too (record time).
    segments = log.segment_count
    clock.advance(60001)
    fill(log, clock, 1, 300, start=5)
    assert log.segment_count == segments + 1
    measured = cleaners.measure(log, clock())
    assert measured.dirty_ratio < 0.9
    assert measured.compaction_delay_ms == 1
    assert cleaners.clean_one(make_cleaner()) is not None
    assert cleaners.statistics().max_compaction_delay_ms >= 0
    assert [r.offset for r in read_all(log)][:5] == [5, 6, 7, 8, 9]


def test_dirty_batches_dropped_copied_or_rebuilt_by_their_survivors(logs, clock):
    """Past the first dirty offset survivors come from the map's offsets: a batch whose
    records all survive is copied byte for byte, one with none is dropped, one with some
    is rebuilt; a tombstone batch gets its horizon once, then is copied as it is."""
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    whole = append(log, [(b"a", b"1"), (b"b", b"2")], clock())
    tomb = append(log, [(b"c", None), (b"d", b"4")], clock())
    append(log, [(b"e", b"old")], clock())
    append(log, [(b"f", b"1"), (b"f", b"2"), (b"g", b"3")], clock())
    append(log, [(b"e", b"new")], clock())
    log.roll()
    whole_bytes = bytes(log.read(whole, 1).records)
    end = log.log_end_offset
    cleaner = make_cleaner()

    def clean():
        return cleaner.clean(
            log, first_dirty_offset=0, first_uncleanable_offset=end, now_ms=clock()
        )

    result = clean()
    assert [(r.offset, r.key, r.value) for r in read_all(log)] == [
        (0, b"a", b"1"),
        (1, b"b", b"2"),
        (2, b"c", None),
        (3, b"d", b"4"),
        (6, b"f", b"2"),
        (7, b"g", b"3"),
        (8, b"e", b"new"),
    ]
    assert (result.records_kept, result.records_removed, result.batches_rewritten) == (7, 2, 2)
    assert bytes(log.read(whole, 1).records)[: len(whole_bytes)] == whole_bytes
    tomb_header = read_header(log.read(tomb, 1).records)
    assert tomb_header.has_delete_horizon
    assert tomb_header.base_timestamp == clock() + 1000
    # The whole log again (as after a lost checkpoint), before the horizon: nothing changes.
    before = bytes(log.read(0, 1 << 20).records)
    clock.advance(999)
    again = clean()
    assert (again.records_kept, again.records_removed, again.batches_rewritten) == (7, 0, 0)
    assert bytes(log.read(0, 1 << 20).records) == before
    # At the horizon the tombstone goes; its batch is rebuilt around the survivor.
    clock.advance(1)
    last = clean()
    assert (last.records_kept, last.records_removed, last.batches_rewritten) == (6, 1, 1)
    assert [r.offset for r in read_all(log)] == [0, 1, 3, 6, 7, 8]


def test_a_live_producers_newest_batch_stays_empty_so_dedupe_survives_compaction(
    logs, clock, tmp_path
):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    producer = {"producer_id": 11, "producer_epoch": 0}
    append(log, [(b"a", b"old")], clock(), base_sequence=0, **producer)
    newest = append(log, [(b"b", b"old")], clock(), base_sequence=1, **producer)
    fill(log, clock, 40, 2)  # key-0 and key-1
    append(log, [(b"a", b"new"), (b"b", b"new")], clock())  # supersedes both producer batches
    log.roll()
    result = make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    assert result is not None and result.records_removed > 0
    kept = [(r.offset, r.key, r.value) for r in read_all(log)]
    # Both superseded records went (a shadowed value never comes back), but the newest
    # producer batch stays as an empty batch, its header whole (Kafka's RETAIN_EMPTY).
    assert (newest, b"b", b"old") not in kept and (0, b"a", b"old") not in kept
    stored = {h.base_offset: h for h, _ in batches_of(log.read(0, 1 << 24).records)}
    assert 0 not in stored
    empty = stored[newest]
    assert (empty.record_count, empty.producer_id, empty.base_sequence) == (0, 11, 1)
    # A restart without snapshots rebuilds the producer from the log: the retry of its
    # newest batch is still a duplicate.
    # Unclean, so recovery also scans the segment holding the empty batch.
    logs.close()
    for snapshot in (tmp_path / "t-0").glob("*.snapshot"):
        snapshot.unlink()
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    reopened = open_manager(tmp_path, clock)
    retry = reopened.get_log("t", 0).append(
        encode_batch([(b"b", b"old", None, clock())], base_sequence=1, **producer)
    )
    assert retry.duplicate and retry.base_offset == newest
    reopened.close()


def test_an_already_empty_producer_batch_is_copied_as_it_is(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    newest = append(
        log, [(b"b", b"old")], clock(), producer_id=12, producer_epoch=0, base_sequence=0
    )
    fill(log, clock, 40, 2)
    append(log, [(b"b", b"new")], clock())  # shadows the producer's only batch
    log.roll()
    cleaner = make_cleaner_manager(logs, clock)
    first = cleaner.clean_one(make_cleaner())
    assert first is not None and first.batches_rewritten == 1  # the emptied batch
    before = log.read(0, 1 << 24).records
    assert {h.base_offset: h.record_count for h, _ in batches_of(before)}[newest] == 0
    # Dirty again with keys seen nowhere else: the next pass has nothing to remove.
    for i in range(60):
        append(log, [(b"unique-%d" % i, b"x")], clock())
    log.roll()
    second = cleaner.clean_one(make_cleaner())
    assert second is not None and second.records_removed == 0
    # The empty batch was copied, not rebuilt again, and its bytes are unchanged.
    assert second.batches_rewritten == 0
    assert log.read(0, 1 << 24).records[: len(before)] == before
