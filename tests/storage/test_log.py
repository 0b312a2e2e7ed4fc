from __future__ import annotations

import errno
import itertools
import os
import threading
from pathlib import Path

import pytest

from protocol.batch import (
    Compression,
    TimestampType,
    encode_batch,
    iter_headers,
    iter_records,
    read_header,
)
from protocol.errors import (
    CorruptMessage,
    InvalidRecord,
    InvalidTimestamp,
    MessageTooLarge,
    OffsetOutOfRange,
    PolicyViolation,
    StorageError,
)
from storage.config import LogConfig
from storage.files import DeletionQueue
from storage.read_plan import SENDFILE_MIN_BYTES, read_bytes
from storage.record_source import FileSpan
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import BASE_TS, ManualClock, batch, open_test_log, read_all

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100, segment_index_bytes=4096)


def test_append_assigns_offsets_and_rewrites_base_offset(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    first = log.append(batch(3))
    second = log.append(batch(2) + batch(4))
    assert (first.base_offset, first.last_offset) == (0, 2)
    assert (second.base_offset, second.last_offset) == (3, 8)
    assert log.log_end_offset == log.high_watermark == 9
    data = log.read(0, 1 << 20).records
    assert [h.base_offset for _, h in iter_headers(data)] == [0, 3, 5]
    assert [r.offset for r in iter_records(data)] == list(range(9))


def test_append_is_one_write_per_call(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, io=io)
    before = io.calls.get("pwrite", 0)
    log.append(batch(1) + batch(1) + batch(1))
    assert io.calls["pwrite"] - before == 1


@pytest.mark.parametrize(
    ("records", "error"),
    [
        (b"\x00" * 10, CorruptMessage),
        (batch(1)[:-1], CorruptMessage),
        (batch(1) + b"\x00", CorruptMessage),
        (bytes(8) + batch(1)[8:13] + b"\xff\xff\xff\xff" + batch(1)[17:], CorruptMessage),
        (b"\x00\x00\x00\x00\x00\x00\x00\x05" + batch(1)[8:], InvalidRecord),
    ],
    ids=["garbage", "truncated", "trailing-byte", "bad-crc", "nonzero-base-offset"],
)
def test_bad_batches_are_refused_and_nothing_is_written(
    tmp_path: Path, records: bytes, error: type
) -> None:
    log = open_test_log(tmp_path)
    log.append(batch(1))
    with pytest.raises(error):
        log.append(batch(1) + records)
    assert log.log_end_offset == 1
    assert log.active_segment.size == len(batch(1))


def test_max_message_bytes_and_segment_bytes_limits(tmp_path: Path) -> None:
    big = batch(1, value_bytes=500)
    log = open_test_log(tmp_path, LogConfig(max_message_bytes=len(big) - 1))
    with pytest.raises(MessageTooLarge):
        log.append(big)
    log.config = LogConfig(segment_bytes=len(big) + 10)
    with pytest.raises(MessageTooLarge):
        log.append(big + big)
    assert log.append(big).base_offset == 0


def test_compacted_topic_requires_keys(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, LogConfig(cleanup_policy=frozenset({"compact"})))
    with pytest.raises(InvalidRecord, match="without key"):
        log.append(batch(1) + batch(2, key=None))
    assert log.log_end_offset == 0
    log.append(batch(2, compression=Compression.GZIP))
    assert log.log_end_offset == 2


def test_log_append_time_stamps_and_keeps_crc_valid(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS + 5000)
    log = open_test_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append(batch(2, ts=BASE_TS))
    assert info.log_append_time == BASE_TS + 5000
    data = log.read(0, 1000).records
    header = read_header(data)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == BASE_TS + 5000
    assert list(iter_records(data))  # decodes, so the CRC was recomputed
    assert log.offset_for_timestamp(BASE_TS + 1) == (0, BASE_TS + 5000)


def test_create_time_topic_refuses_producer_log_append_time(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    lat = encode_batch([(b"k", b"v", None, BASE_TS)], timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestamp):
        log.append(lat)


def test_timestamp_bounds(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS)
    config = LogConfig(message_timestamp_after_max_ms=1000, message_timestamp_before_max_ms=1000)
    log = open_test_log(tmp_path, config, clock=clock)
    with pytest.raises(InvalidTimestamp):
        log.append(batch(1, ts=BASE_TS + 2000))
    with pytest.raises(InvalidTimestamp):
        log.append(batch(1, ts=BASE_TS - 2000))
    log.append(batch(1, ts=BASE_TS + 500))
    with pytest.raises(InvalidTimestamp, match="negative"):
        log.append(batch(1, ts=-5))
    log.append(batch(1, ts=-1))  # Kafka's "no timestamp" passes the bounds


def test_read_rules(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    sizes = []
    for _ in range(5):
        b = batch(2)
        sizes.append(len(b))
        log.append(b)
    assert log.read(10, 100).records == b""  # at the high watermark: empty
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100)
    with pytest.raises(OffsetOutOfRange):
        log.read(-1, 100)
    # Starts with the batch holding the offset; whole batches only; at least one.
    one = log.read(3, 1).records
    assert [h.base_offset for _, h in iter_headers(one)] == [2]
    two = log.read(3, sizes[0] * 2 + 5).records
    assert [h.base_offset for _, h in iter_headers(two)] == [2, 4]


def test_locate_answers_what_read_reads(tmp_path: Path) -> None:
    # The broker sends large reads from the file (sendfile, local reads) by `locate`.
    log = open_test_log(tmp_path, LogConfig(segment_bytes=400_000))
    for i in range(40):
        log.append(batch(1 + i % 4, tag=i, value_bytes=5_000 + 7_000 * (i % 5)))
    assert log.segment_count > 2
    high = log.high_watermark
    spans = 0
    for offset in range(0, high + 1, 3):
        for max_bytes in (1, 150, 40_000, 70_000, 300_000):
            read = log.read(offset, max_bytes)
            located = log.locate(offset, max_bytes)
            assert (located.high_watermark, located.log_start_offset) == (
                read.high_watermark,
                read.log_start_offset,
            )
            records = located.records
            if isinstance(records, bytes):
                assert records == read.records
                continue
            spans += 1
            assert isinstance(records, FileSpan) and len(records) >= SENDFILE_MIN_BYTES
            try:
                assert records.read() == read.records
                assert records.record_count == sum(
                    h.record_count for _, h in iter_headers(read.records)
                )
                local = records.local_records()
                assert os.stat(local["path"]).st_ino == local["inode"]
            finally:
                records.close()
    assert spans > 0
    for outside in (-1, high + 1):
        with pytest.raises(OffsetOutOfRange):
            log.locate(outside, 100)
    log.close()


def test_read_continues_past_offset_gaps_into_next_segment(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    for i in range(30):
        log.append(batch(1, tag=i))
    assert log.segment_count > 2
    assert [o for o, _ in read_all(log)] == list(range(30))
    for offset in range(30):
        data = log.read(offset, 1).records
        assert next(iter_headers(data))[1].base_offset == offset


def test_rolls_on_size_and_index_full(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    for _ in range(20):
        log.append(batch(1))
    infos = log.segments_info()
    assert all(i.size_bytes <= 1000 for i in infos)
    assert [i.is_active for i in infos] == [False] * (len(infos) - 1) + [True]
    assert all(a.next_offset == b.base_offset for a, b in itertools.pairwise(infos))
    tiny = open_test_log(
        tmp_path / "tiny", LogConfig(segment_index_bytes=16, index_interval_bytes=0)
    )
    for _ in range(10):
        tiny.append(batch(1))
    assert tiny.segment_count > 1
    assert [o for o, _ in read_all(tiny)] == list(range(10))


def test_rolls_on_record_time_with_jitter_bound(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, LogConfig(segment_ms=1000))
    log.append(batch(1, ts=BASE_TS))
    log.append(batch(1, ts=BASE_TS + 1000))
    assert log.segment_count == 1
    log.append(batch(1, ts=BASE_TS + 1001))
    assert log.segment_count == 2
    jittered = open_test_log(tmp_path / "j", LogConfig(segment_ms=1000, segment_jitter_ms=400))
    assert 0 <= jittered.active_segment.roll_jitter_ms < 400


def test_roll_is_a_noop_on_an_empty_active_segment(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.roll()
    assert log.segment_count == 1
    log.append(batch(1))
    log.roll()
    assert log.segment_count == 2 and log.active_segment.base_offset == 1


def test_offset_for_timestamp_with_out_of_order_timestamps(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    stamps = [50, 10, 30, 70, 20, 60, 80, 40, 90, 15]
    for ts in stamps:
        log.append(batch(1, ts=BASE_TS + ts))
    for target in range(0, 100, 5):
        expected = next(
            ((o, BASE_TS + ts) for o, ts in enumerate(stamps) if BASE_TS + ts >= BASE_TS + target),
            None,
        )
        assert log.offset_for_timestamp(BASE_TS + target) == expected
    assert log.offset_for_timestamp(BASE_TS + 91) is None


def test_offset_for_timestamp_within_one_batch(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(batch(4, timestamps=[BASE_TS + 5, BASE_TS + 1, BASE_TS + 9, BASE_TS + 3]))
    assert log.offset_for_timestamp(BASE_TS + 6) == (2, BASE_TS + 9)
    assert log.offset_for_timestamp(BASE_TS + 2) == (0, BASE_TS + 5)
    assert log.max_timestamp() == (2, BASE_TS + 9)


def test_max_timestamp_picks_first_record_with_it(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    assert log.max_timestamp() is None
    for ts in [5, 9, 3, 9, 1]:
        log.append(batch(1, ts=BASE_TS + ts))
    assert log.max_timestamp() == (1, BASE_TS + 9)


def test_delete_records_moves_start_offset(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    for _ in range(5):
        log.append(batch(2))
    assert log.delete_records(3) == 3
    assert log.delete_records(1) == 3  # lower: no-op
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert read_all(log)[0][0] == 3
    with pytest.raises(OffsetOutOfRange):
        log.delete_records(11)
    assert log.delete_records(-1) == 10
    assert log.read(10, 100).records == b""
    compacted = open_test_log(tmp_path / "c", LogConfig(cleanup_policy=frozenset({"compact"})))
    with pytest.raises(PolicyViolation):
        compacted.delete_records(0)


def test_delete_oldest_segments_renames_and_queues(tmp_path: Path) -> None:
    queue = DeletionQueue()
    clock = ManualClock()
    log = open_test_log(tmp_path, SMALL, clock=clock, queue=queue)
    for _ in range(40):
        log.append(batch(1))
    before = log.segments_info()
    reader_view = log.read(0, 1 << 20).records
    gone = log.delete_oldest_segments(2, "retention_ms")
    assert [g.base_offset for g in gone] == [b.base_offset for b in before[:2]]
    assert log.log_start_offset == before[2].base_offset
    pending = queue.pending()
    assert pending and all(p.name.endswith(".deleted") and p.exists() for p, _ in pending)
    assert {due for _, due in pending} == {clock.now_ms + SMALL.file_delete_delay_ms}
    assert reader_view  # bytes read before deletion stay valid
    # Deleting everything keeps one (new, empty) active segment at the log end.
    log.delete_oldest_segments(100, "retention_bytes")
    assert log.segment_count == 1 and log.active_segment.size == 0
    assert log.log_start_offset == log.log_end_offset == 40


def test_reader_holding_a_deleted_segment_still_reads(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    for _ in range(20):
        log.append(batch(1))
    segment = log.segments_info()[0]
    first = log._local.segments[0]
    log.delete_oldest_segments(1, "test")
    extent = first.extent(0, 1 << 20, first.size)
    assert extent is not None
    data, _ = read_bytes(first, *extent)
    assert [r.offset for r in iter_records(data)] == list(range(segment.next_offset))


def test_truncate_to(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    for i in range(20):
        log.append(batch(1, tag=i))
    log.truncate_to(7)
    assert log.log_end_offset == 7
    assert [o for o, _ in read_all(log)] == list(range(7))
    assert log.append(batch(1)).base_offset == 7


def test_flush_advances_recovery_point_and_flush_needed(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_test_log(tmp_path, LogConfig(flush_messages=3, flush_ms=1000), clock=clock)
    assert not log.append(batch(2)).flush_needed
    assert log.append(batch(1)).flush_needed
    log.flush()
    assert log.recovery_point == 3
    log.append(batch(1))
    assert not log.flush_needed()
    clock.advance(1000)
    assert log.flush_needed()
    log.flush(up_to=2)
    assert log.recovery_point == 3


def test_fsync_error_poisons_the_partition(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, io=io)
    log.append(batch(1))
    io.fail("fsync", errno.EIO)
    with pytest.raises(StorageError):
        log.flush()
    with pytest.raises(StorageError, match="until restart"):
        log.append(batch(1))
    assert log.poisoned and log.recovery_point == 0
    assert [o for o, _ in read_all(log)] == [0]  # reads keep working


def test_write_error_cuts_back_and_later_appends_succeed(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, io=io)
    log.append(batch(1))
    size = log.active_segment.size
    io.short_write_bytes = 5
    io.fail("pwrite", errno.ENOSPC, nth=2)  # after the short write, the rest fails
    with pytest.raises(StorageError):
        log.append(batch(3))
    assert log.active_segment.size == size
    assert (tmp_path / "00000000000000000000.log").stat().st_size == size
    assert log.append(batch(1)).base_offset == 1
    assert [o for o, _ in read_all(log)] == [0, 1]


def test_listeners_run_after_append_outside_the_lock(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    seen = []

    def listener(changed) -> None:
        assert not changed._lock.locked()
        seen.append(changed.log_end_offset)

    log.add_append_listener(listener)
    log.append(batch(2))
    assert seen == [2]


def test_concurrent_appends_and_reads(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    errors: list[BaseException] = []

    def reader() -> None:
        try:
            for _ in range(200):
                end = log.high_watermark
                if end:
                    data = log.read(0, 1 << 20).records
                    assert list(iter_headers(data))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for i in range(200):
        log.append(batch(1, tag=i))
    for t in threads:
        t.join()
    assert not errors
    assert [o for o, _ in read_all(log)] == list(range(200))


def test_replace_segments_swaps_cleaned_files(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    for i in range(30):
        log.append(batch(1, tag=i))
    infos = log.segments_info()
    first, second = infos[0], infos[1]
    # A "cleaner" keeping only the last record of the first two segments, in one segment.
    kept = log.read(second.next_offset - 1, 1).records
    (tmp_path / "00000000000000000000.log.cleaned").write_bytes(kept)
    log.replace_segments([first.base_offset, second.base_offset], [0])
    records = read_all(log, 0)
    assert records[0][0] == second.next_offset - 1
    assert [o for o, _ in records[1:]] == list(range(second.next_offset, 30))
    assert log.segments_info()[0].base_offset == 0
    assert not list(tmp_path.glob("*.swap")) and not list(tmp_path.glob("*.cleaned"))
    reopened = open_test_log(tmp_path, SMALL, clean=False, recovery_point=0)
    assert read_all(reopened, 0) == records


def test_disk_full_at_roll_keeps_old_segment_and_recovers(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, SMALL, io=io)
    while log.segment_count == 1:
        log.append(batch(1))
    end, segments = log.log_end_offset, log.segment_count
    io.fail("open", errno.ENOSPC, persistent=True)
    with pytest.raises(StorageError):
        for _ in range(40):  # until the next roll is needed
            log.append(batch(1))
    stuck_end = log.log_end_offset
    assert log.segment_count == segments and stuck_end >= end and not log.poisoned
    io.clear()
    assert log.append(batch(1)).base_offset == stuck_end
    assert [o for o, _ in read_all(log)] == list(range(stuck_end + 1))


def test_write_that_cannot_be_cut_back_poisons(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, io=io)
    log.append(batch(1))
    io.fail("pwrite", errno.EIO)
    io.fail("ftruncate", errno.EIO)
    with pytest.raises(StorageError):
        log.append(batch(1))
    assert log.poisoned
    io.clear()
    with pytest.raises(StorageError, match="until restart"):
        log.append(batch(1))


def test_failed_index_write_undoes_the_append(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, LogConfig(index_interval_bytes=0), io=io)
    log.append(batch(1))  # a segment's first append never gets an index entry
    size = log.active_segment.size
    io.fail("pwrite", errno.EIO, path_contains=".index")
    with pytest.raises(StorageError):
        log.append(batch(2))
    assert (log.log_end_offset, log.active_segment.size) == (1, size)
    assert log.active_segment.offset_index.entries == 0
    assert log.append(batch(2)).base_offset == 1
    assert [o for o, _ in read_all(log)] == [0, 1, 2]
    assert log.active_segment.offset_index.lookup(2) == (2, size)


def test_read_errors_become_storage_errors(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, io=io)
    log.append(batch(2))
    io.fail("pread", errno.EIO, persistent=True)
    with pytest.raises(StorageError):
        log.read(0, 100)
    with pytest.raises(StorageError):
        log.offset_for_timestamp(0)
    io.clear()
    assert [o for o, _ in read_all(log)] == [0, 1]


def test_appends_proceed_while_a_flush_is_in_fsync(tmp_path: Path) -> None:
    entered, release = threading.Event(), threading.Event()

    class SlowFsyncIO(FaultyFileIO):
        def fsync(self, fd: int) -> None:
            entered.set()
            release.wait(30)
            super().fsync(fd)

    log = open_test_log(tmp_path, io=SlowFsyncIO())
    log.append(batch(1))
    flusher = threading.Thread(target=log.flush)
    flusher.start()
    assert entered.wait(30)
    appender = threading.Thread(target=log.append, args=(batch(1),))
    appender.start()
    appender.join(30)
    appended_during_fsync = not appender.is_alive()
    release.set()
    flusher.join(30)
    assert appended_during_fsync
    assert log.log_end_offset == 2 and log.recovery_point >= 1
