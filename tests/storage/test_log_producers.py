"""Idempotent appends through Log: the producer check on the append path, snapshots at
roll and close, the state rebuilt at open (clean or not), retention, expiry, truncation."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from protocol.errors import (
    DuplicateSequenceNumber,
    InvalidProducerEpoch,
    OutOfOrderSequenceNumber,
    StorageError,
    UnknownProducerId,
)
from storage.config import LogConfig
from storage.files import DeletionQueue
from storage.log import Log
from storage.producer_snapshot import list_snapshots, read_snapshot, snapshot_path
from storage.producer_state import BATCHES_RETAINED
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import BASE_TS, ManualClock, batch, open_test_log, read_all

PID = 7


def idem(seq: int, count: int = 1, *, epoch: int = 0, pid: int = PID, tag: int = 0) -> bytes:
    """A batch of `count` records from producer `pid` starting at sequence `seq`."""
    return encode_batch(
        [(b"k", f"{tag}:{seq}:{i}".encode(), None, BASE_TS) for i in range(count)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def values(log: Log) -> list[bytes | None]:
    return [v for _, v in read_all(log)]


def test_duplicate_answers_the_original_offsets_and_appends_nothing(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(batch(3))
    original = log.append(idem(0, 2))
    log.append(idem(2))
    end = log.log_end_offset
    retry = log.append(idem(0, 2))
    assert retry.duplicate
    assert (retry.base_offset, retry.last_offset) == (original.base_offset, original.last_offset)
    assert log.log_end_offset == end
    assert values(log).count(b"0:0:0") == 1


def test_a_retry_older_than_the_retained_batches_is_out_of_order(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    for seq in range(BATCHES_RETAINED + 1):
        log.append(idem(seq))
    assert log.append(idem(1)).duplicate  # the oldest of the retained batches
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append(idem(0))
    assert log.log_end_offset == BATCHES_RETAINED + 1


@pytest.mark.parametrize(
    ("sent", "error"),
    [
        (idem(5), OutOfOrderSequenceNumber),  # a gap after sequence 0
        (idem(1, epoch=1), OutOfOrderSequenceNumber),  # a new epoch not at 0
        (idem(3, pid=99), UnknownProducerId),  # unknown, not at 0
    ],
    ids=["gap", "new-epoch-not-at-zero", "unknown-producer"],
)
def test_refused_batches_append_nothing(tmp_path: Path, sent: bytes, error: type) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0))
    with pytest.raises(error):
        log.append(batch(1) + sent)  # the whole request is refused
    assert log.log_end_offset == 1
    assert log.append(idem(1)).base_offset == 1  # the state did not move either


def test_an_older_epoch_is_fenced(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0))
    log.append(idem(0, epoch=1))
    with pytest.raises(InvalidProducerEpoch):
        log.append(idem(1, epoch=0))


def test_non_idempotent_appends_are_unchanged(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(batch(2))
    assert not log.append(batch(2)).duplicate  # the same bytes twice: stored twice
    assert log.log_end_offset == 4 and log.producer_count() == 0


def test_a_failed_write_leaves_the_state_so_the_retry_is_appended(tmp_path: Path) -> None:
    io = FaultyFileIO()
    log = open_test_log(tmp_path, io=io)
    log.append(idem(0))
    io.fail("pwrite", errno.ENOSPC)
    with pytest.raises(StorageError):
        log.append(idem(1))
    retry = log.append(idem(1))
    assert not retry.duplicate and retry.base_offset == 1
    assert values(log) == [b"0:0:0", b"0:1:0"]


def test_a_rolls_snapshot_is_written_off_the_append_path_and_at_clean_close(
    tmp_path: Path,
) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0, 3))
    log.roll()
    assert list_snapshots(tmp_path) == []  # the roll only keeps the state
    assert log.write_pending_snapshot()
    assert [at for at, _ in list_snapshots(tmp_path)] == [3]
    assert not log.write_pending_snapshot()  # written once
    log.append(idem(3))
    log.close()
    assert [at for at, _ in list_snapshots(tmp_path)] == [3, 4]


def test_a_rolls_snapshot_holds_the_state_at_the_roll(tmp_path: Path) -> None:
    """Written later, it still describes the producers as they were at the roll."""
    log = open_test_log(tmp_path)
    log.append(idem(0, 3))
    log.roll()
    log.append(idem(3))
    log.append(idem(0, pid=PID + 1))
    log.write_pending_snapshot()
    assert [at for at, _ in list_snapshots(tmp_path)] == [3]
    snapshot = read_snapshot(FaultyFileIO(), snapshot_path(tmp_path, 3), 3)
    assert list(snapshot) == [PID] and snapshot[PID].last_sequence == 2


def test_a_roll_creates_no_snapshot_file(tmp_path: Path) -> None:
    io = OpenJournal()
    log = open_test_log(tmp_path, io=io)
    log.append(idem(0, 3))
    io.opened.clear()
    log.roll()
    assert {Path(p).suffix for p in io.opened} == {".index", ".log", ".timeindex"}


def test_a_pending_snapshot_above_a_truncation_is_dropped(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0, 2))
    log.roll()
    log.truncate_to(1)
    log.flush()
    assert list_snapshots(tmp_path) == []
    log.close()
    reopened = open_test_log(tmp_path)
    entry = reopened.producer_entry(PID)
    assert entry is None or entry.last_sequence != 1  # the truncation took batch 0 back


class OpenJournal(FaultyFileIO):
    """Records the path of every file opened."""

    def __init__(self) -> None:
        super().__init__()
        self.opened: list[str] = []

    def open(
        self, path: Path, *, create: bool = False, writable: bool = True, exclusive: bool = False
    ) -> int:
        self.opened.append(str(path))
        return super().open(path, create=create, writable=writable, exclusive=exclusive)


class FsyncJournal(FaultyFileIO):
    """Records the path of every fsync (files and directories), in order."""

    def __init__(self) -> None:
        super().__init__()
        self.synced: list[str] = []

    def fsync(self, fd: int) -> None:
        self.synced.append(self._path(fd))
        super().fsync(fd)

    def fsync_dir(self, path: Path) -> None:
        self.synced.append(str(path))
        super().fsync_dir(path)


def test_a_roll_defers_its_snapshot_to_the_next_flush(tmp_path: Path) -> None:
    """Kafka's roll takes its snapshot with sync = false: a roll costs no fsync (it was
    two, doubling a roll's time) and here no file either; the next flush writes the
    snapshot and makes it and its directory entry durable."""
    io = FsyncJournal()
    log = open_test_log(tmp_path, io=io)
    log.append(idem(0, 3))
    log.flush()
    io.synced.clear()
    log.roll()
    assert io.synced == []
    assert list_snapshots(tmp_path) == []
    log.flush()
    assert [at for at, _ in list_snapshots(tmp_path)] == [3]
    snapshot = str(snapshot_path(tmp_path, 3))
    assert snapshot in io.synced and str(tmp_path) in io.synced
    assert io.synced.index(snapshot) < len(io.synced) - 1 - io.synced[::-1].index(str(tmp_path))
    io.synced.clear()
    log.flush()
    assert snapshot not in io.synced  # once durable, never fsynced again


def test_rolls_without_a_flush_keep_only_the_newest_snapshot_pending(tmp_path: Path) -> None:
    """A log taking only acks=1 appends is flushed rarely: what waits for the flush stays
    one snapshot however many rolls pass (every queue has a bound), and it is the newest."""
    io = FsyncJournal()
    log = open_test_log(tmp_path, io=io)
    for seq in range(50):
        log.append(idem(seq))
        log.roll()
    io.synced.clear()
    log.flush()
    snapshots = [p for p in io.synced if p.endswith(".snapshot")]
    assert snapshots == [str(snapshot_path(tmp_path, 50))]


def test_deleting_segments_first_makes_the_newest_snapshot_durable(tmp_path: Path) -> None:
    """The snapshots below the new log start go with the segments, so the newest one
    must survive a power cut before they do: else a restart forgets producers whose
    batches lived only in the deleted segments."""
    io = FsyncJournal()
    log = open_test_log(tmp_path, io=io)
    log.append(idem(0, 2))
    log.roll()
    log.append(batch(1))
    log.roll()  # no flush since: the snapshot at 3 is not durable yet
    log.delete_oldest_segments(2, "retention")
    newest = str(snapshot_path(tmp_path, 3))
    assert newest in io.synced and str(tmp_path) in io.synced
    assert [at for at, _ in list_snapshots(tmp_path)] == [3]


@pytest.mark.parametrize("clean", [True, False], ids=["clean", "crash"])
def test_dedupe_survives_a_restart(tmp_path: Path, clean: bool) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0, 2))
    log.roll()
    log.append(batch(1))
    third = log.append(idem(2))
    if clean:
        log.close()
    else:  # a crash: no close, no snapshot at the end; the log is flushed (kill -9)
        log.flush()
    reopened = open_test_log(tmp_path, clean=clean, recovery_point=None if clean else 0)
    retry = reopened.append(idem(2))
    assert retry.duplicate and retry.base_offset == third.base_offset
    assert reopened.append(idem(0, 2)).base_offset == 0  # older, still retained
    assert reopened.append(idem(3)).base_offset == 4


@pytest.mark.parametrize("damage", ["torn", "flipped"])
def test_a_damaged_snapshot_is_ignored_and_the_state_rebuilt(tmp_path: Path, damage: str) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0))
    log.roll()
    log.append(idem(1))
    log.close()
    path = snapshot_path(tmp_path, 2)
    data = path.read_bytes()
    path.write_bytes(data[:-3] if damage == "torn" else data[:-1] + bytes([data[-1] ^ 1]))
    reopened = open_test_log(tmp_path)
    assert not path.exists()  # deleted: the next start does not trip on it again
    assert reopened.append(idem(1)).duplicate
    assert reopened.append(idem(0)).duplicate


def test_retention_deletes_the_snapshots_of_deleted_segments(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    for seq in range(3):
        log.append(idem(seq))
        log.roll()
        log.write_pending_snapshot()
    assert [at for at, _ in list_snapshots(tmp_path)] == [1, 2, 3]
    log.delete_oldest_segments(2, "test")
    assert [at for at, _ in list_snapshots(tmp_path)] == [2, 3]
    assert log.log_start_offset == 2
    # The producer's batches below the log start are forgotten; its newest is not.
    entry = log.producer_entry(PID)
    assert entry is not None and [b.first_offset for b in entry.batches] == [2]
    assert log.append(idem(2)).duplicate
    with pytest.raises(OutOfOrderSequenceNumber):
        log.append(idem(1))


def test_retention_of_all_of_a_producers_batches_makes_it_unknown(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0))
    log.roll()
    log.append(batch(1))
    log.delete_oldest_segments(1, "test")
    assert log.producer_entry(PID) is None
    with pytest.raises(UnknownProducerId):
        log.append(idem(1))
    log.close()
    assert open_test_log(tmp_path).producer_entry(PID) is None  # a restart agrees


def test_idle_producers_expire(tmp_path: Path) -> None:
    clock = ManualClock()
    config = LogConfig(producer_id_expiration_ms=1000)
    log = open_test_log(tmp_path, config, clock=clock)
    log.append(idem(0))
    log.append(idem(0, pid=8))
    clock.advance(999)
    assert log.remove_expired_producers() == 0
    clock.advance(1)
    assert log.remove_expired_producers() == 2
    with pytest.raises(UnknownProducerId):
        log.append(idem(1))
    log.close()
    # Expired producers stay forgotten after a restart (their batches are still logged).
    assert open_test_log(tmp_path, config, clock=clock).producer_count() == 0


def test_truncation_rebuilds_the_state_from_what_is_left(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0))
    log.roll()
    log.append(idem(1))
    log.append(idem(2))
    log.truncate_to(2)
    entry = log.producer_entry(PID)
    assert entry is not None and entry.last_sequence == 1
    assert log.append(idem(2)).base_offset == 2  # appended again: it was cut off
    assert [at for at, _ in list_snapshots(tmp_path)] == [1]


def test_a_log_opened_without_snapshots_rebuilds_from_its_batches(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    for seq in range(3):
        log.append(idem(seq))
    log.close()
    for _, path in list_snapshots(tmp_path):
        path.unlink()  # as a data directory written before producer state existed
    reopened = open_test_log(tmp_path, queue=DeletionQueue())
    assert reopened.append(idem(2)).duplicate
    assert reopened.append(idem(3)).base_offset == 3


def test_a_duplicate_sent_with_other_batches_is_refused(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(idem(0))
    # Answering the duplicate's offsets would claim the new batch was stored too.
    with pytest.raises(DuplicateSequenceNumber, match="must be sent alone"):
        log.append(idem(0) + idem(1))
    assert log.log_end_offset == 1
    assert log.append(idem(1)).base_offset == 1
