"""EIO injected through storage's FileIO on the Nth call, transient and persistent (DF-04).

SQLite's I/O-error method: make call N fail, for N = 1..K, and check that the error
reaches the caller as `StorageError`, that nothing whose write or fsync failed is
acknowledged, that after an fsync error the partition refuses writes until it is
reopened, and that the reopened log satisfies the oracle.
"""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from protocol.errors import StorageError
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.log import Log
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO
from tests.reliability.oracle import ID_HEADER, decode_stream, value_hash

CONFIG = LogConfig(segment_bytes=2048, segment_index_bytes=256, index_interval_bytes=256)
# Calls N = 1..FAULT_CALLS each get their own run.
FAULT_CALLS = 6
APPENDS = 30


def batch(record_id: str) -> bytes:
    value = record_id.encode() * 8
    return encode_batch(
        [(b"k", value, [(ID_HEADER, record_id.encode())], None)], now_ms=1_700_000_000_000
    )


def read_all(log: Log) -> list:
    problems: list[str] = []
    records = []
    offset = log.log_start_offset
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20)
        got = [r for r in decode_stream(data.records, "read", problems) if r.offset >= offset]
        assert got, f"no progress at {offset}"
        records += got
        offset = got[-1].offset + 1
    assert not problems, problems
    return records


def append_all(log: Log, acked: dict[int, str], *, flush: bool) -> int:
    """Append APPENDS batches; returns how many failed. Acks only what returned."""
    failures = 0
    for i in range(APPENDS):
        record_id = f"r{len(acked)}-{i}"
        try:
            info = log.append(batch(record_id))
            if flush:
                log.flush()
        except StorageError:
            failures += 1
            continue
        acked[info.base_offset] = record_id
    return failures


def check_reopened(data_dir: Path, acked: dict[int, str]) -> None:
    manager = LogManager(data_dir, CONFIG, io=FileIO())
    manager.open()
    try:
        log = manager.get_log("t", 0)
        records = read_all(log)
        offsets = [r.offset for r in records]
        assert offsets == list(range(log.log_start_offset, log.high_watermark)), "gap"
        by_offset = {r.offset: r for r in records}
        for offset, record_id in acked.items():
            assert by_offset[offset].record_id == record_id
            assert by_offset[offset].value_sha == value_hash(record_id.encode() * 8)
        assert len({r.record_id for r in records}) == len(records), "duplicate"
        # And the partition takes writes again, right after the last offset.
        assert log.append(batch("after-reopen")).base_offset == log.log_end_offset - 1
    finally:
        manager.close()


def open_faulty(data_dir: Path) -> tuple[LogManager, FaultyFileIO, Log]:
    io = FaultyFileIO()
    manager = LogManager(data_dir, CONFIG, io=io)
    manager.open()
    manager.create_topic("t", 1, {})
    return manager, io, manager.get_log("t", 0)


@pytest.mark.parametrize("nth", range(1, FAULT_CALLS + 1))
@pytest.mark.parametrize("op", ["pwrite", "ftruncate", "open"])
def test_transient_write_path_error_is_reported_and_writes_resume(
    tmp_path: Path, op: str, nth: int
) -> None:
    manager, io, log = open_faulty(tmp_path)
    io.fail(op, errno.EIO, nth=nth, path_contains="t-0")
    acked: dict[int, str] = {}
    append_all(log, acked, flush=False)
    # Once the fault has passed, the partition writes again unless it was poisoned.
    assert acked, "no append succeeded around a single transient fault"
    assert max(acked) == log.log_end_offset - 1
    manager.close()
    check_reopened(tmp_path, acked)


@pytest.mark.parametrize("nth", range(1, FAULT_CALLS + 1))
def test_persistent_write_error_fails_every_later_append(tmp_path: Path, nth: int) -> None:
    manager, io, log = open_faulty(tmp_path)
    acked: dict[int, str] = {}
    io.fail("pwrite", errno.EIO, nth=nth, persistent=True, path_contains=".log")
    failures = append_all(log, acked, flush=False)
    assert failures >= APPENDS - nth
    # Reads keep working while writes fail.
    assert [r.record_id for r in read_all(log)] == [acked[o] for o in sorted(acked)]
    io.clear()
    manager.close()
    check_reopened(tmp_path, acked)


@pytest.mark.parametrize("nth", [1, 2, 5])
@pytest.mark.parametrize("persistent", [False, True], ids=["transient", "persistent"])
def test_fsync_error_poisons_the_partition_until_restart(
    tmp_path: Path, nth: int, persistent: bool
) -> None:
    manager, io, log = open_faulty(tmp_path)
    acked: dict[int, str] = {}
    io.fail("fsync", errno.EIO, nth=nth, persistent=persistent, path_contains="t-0")
    fault = io.faults[0]
    failures = 0
    for i in range(APPENDS):
        record_id = f"r{len(acked)}-{i}"
        try:
            info = log.append(batch(record_id))
            log.flush()
        except StorageError:
            failures += 1
            continue
        # Acknowledged only while every fsync so far succeeded (a flush fsyncs the active
        # `.log`, and after a roll the rolled segment's indexes: one or more per append).
        assert fault.seen < nth
        acked[info.base_offset] = record_id
    # The failing fsync was reached, and never retry-then-acknowledge: after it no
    # append returns.
    assert fault.seen >= nth
    assert len(acked) < nth  # each acknowledged flush made at least one fsync
    assert failures == APPENDS - len(acked)
    io.clear()
    with pytest.raises(StorageError, match="until restart"):
        log.append(batch("still-poisoned"))
    assert len(read_all(log)) >= len(acked)  # reads still served
    manager.close()
    check_reopened(tmp_path, acked)


@pytest.mark.parametrize("nth", [1, 3])
def test_read_error_fails_only_that_read(tmp_path: Path, nth: int) -> None:
    manager, io, log = open_faulty(tmp_path)
    acked: dict[int, str] = {}
    append_all(log, acked, flush=False)
    io.fail("pread", errno.EIO, nth=nth, path_contains="t-0")
    outcomes = []
    for _ in range(nth + 1):
        try:
            log.read(0, 1 << 20)
            outcomes.append("ok")
        except (StorageError, OSError) as exc:
            # Log.read lets the OSError through; the broker maps it to STORAGE_ERROR
            # for that partition (broker/handlers.py).
            assert "EIO" in repr(exc) or "I/O" in str(exc) or "injected" in str(exc)
            outcomes.append("error")
    assert outcomes.count("error") == 1
    assert [r.record_id for r in read_all(log)] == [acked[o] for o in sorted(acked)]
    manager.close()
    check_reopened(tmp_path, acked)


@pytest.mark.parametrize("op", ["pwrite", "fsync", "rename"])
@pytest.mark.parametrize("code", [errno.EIO, errno.ENOSPC], ids=["eio", "enospc"])
def test_checkpoint_write_error_keeps_the_previous_checkpoint(
    tmp_path: Path, op: str, code: int
) -> None:
    from storage.checkpoint import read_checkpoint
    from storage.files import RECOVERY_POINT_CHECKPOINT

    manager, io, log = open_faulty(tmp_path)
    acked: dict[int, str] = {}
    append_all(log, acked, flush=True)
    manager.write_checkpoints()
    path = tmp_path / RECOVERY_POINT_CHECKPOINT
    previous = read_checkpoint(FileIO(), path)
    append_all(log, acked, flush=True)
    io.fail(op, code, path_contains="checkpoint")
    with pytest.raises(StorageError):
        manager.write_checkpoints()
    assert read_checkpoint(FileIO(), path) == previous
    manager.write_checkpoints()  # the next interval succeeds
    assert read_checkpoint(FileIO(), path)[("t", 0)] == log.log_end_offset
    manager.close()
    check_reopened(tmp_path, acked)
