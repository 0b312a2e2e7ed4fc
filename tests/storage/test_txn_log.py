"""Transactions in one partition's log (issue 36, Kafka's UnifiedLog and
ProducerStateManager): the LSO, markers and their checks, the `.txnindex` file in
Kafka's format, read_committed reads, and what a restart, a truncation, retention and
a snapshot keep."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from broker.cli.main import main as tidelog_main
from protocol.batch import KAFKA_LAYOUT, encode_batch
from protocol.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    TransactionCoordinatorFenced,
)
from protocol.kafka import records as kafka
from protocol.kafka.control import marker_batch, read_marker
from protocol.kafka.convert import tidelog_to_kafka
from storage.config import LogConfig
from storage.log import Log
from storage.producer_snapshot import decode_snapshot, encode_snapshot
from storage.producer_state import BatchMetadata, ProducerEntry
from tests.storage.helpers import BASE_TS, ManualClock, open_test_log

SMALL = LogConfig(segment_bytes=700, index_interval_bytes=1)


def kbatch(
    values: list[bytes], producer: tuple[int, int, int] = (-1, -1, -1), *, txn: bool = True
) -> bytes:
    """A Kafka v2 batch as a transactional producer sends it (transactional bit set)."""
    pid, epoch, seq = producer
    source = encode_batch(
        [(b"k", v, None, BASE_TS) for v in values],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )
    data = bytearray(tidelog_to_kafka(source, partition_leader_epoch=-1)[0])
    if txn:
        attributes = struct.unpack_from(">h", data, 21)[0] | kafka.TRANSACTIONAL_MASK
        struct.pack_into(">h", data, 21, attributes)
        struct.pack_into(">I", data, 17, crc32c.crc32c(bytes(data[21:])))
    return bytes(data)


def put(log: Log, values: list[bytes], producer: tuple[int, int, int], *, txn: bool = True) -> int:
    return log.append(kbatch(values, producer, txn=txn), layout=KAFKA_LAYOUT).base_offset


def marker(log: Log, pid: int, epoch: int = 0, *, commit: bool, coordinator_epoch: int = 0) -> int:
    return log.append_txn_marker(
        pid, epoch, commit=commit, coordinator_epoch=coordinator_epoch, append_time_ms=BASE_TS
    )


def test_marker_batch_is_kafkas_end_transaction_marker() -> None:
    data = marker_batch(7, 3, commit=False, coordinator_epoch=42, timestamp=BASE_TS)
    header = kafka.read_batch_header(data)
    assert header.attributes == 0x30 and header.record_count == 1
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 3, -1)
    ((delta, _, key, value, headers),) = kafka.decode_records(
        data[kafka.HEADER_SIZE :], header.record_count
    )
    assert (delta, key, value, headers) == (0, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x2a", ())
    assert read_marker(data) == (False, 42)
    assert read_marker(marker_batch(7, 3, commit=True, coordinator_epoch=1, timestamp=0)) == (
        True,
        1,
    )


def test_lso_follows_open_transactions(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"plain"], (-1, -1, -1), txn=False)
    assert log.last_stable_offset == 1
    put(log, [b"a1", b"a2"], (10, 0, 0))
    put(log, [b"b1"], (20, 0, 0))
    put(log, [b"a3"], (10, 0, 2))
    assert log.ongoing_transactions() == {10: 1, 20: 3}
    assert log.last_stable_offset == 1 and log.high_watermark == 5
    assert marker(log, 20, commit=True) == 5
    assert log.last_stable_offset == 1  # 10's transaction is older
    assert marker(log, 10, commit=False) == 6
    assert log.last_stable_offset == log.high_watermark == 7
    entries = log.active_segment.txn_index.entries
    assert [
        (e.producer_id, e.first_offset, e.last_offset, e.last_stable_offset) for e in entries
    ] == [(10, 1, 6, 7)]
    views = {v.producer_id: v for v in log.producer_states()}
    assert views[10].current_txn_start_offset == -1 and views[10].coordinator_epoch == 0
    assert views[10].last_sequence == 2


def test_txn_checks(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"a"], (10, 2, 0))
    with pytest.raises(InvalidProducerEpoch):
        put(log, [b"zombie"], (10, 1, 0))
    with pytest.raises(InvalidTxnState):
        put(log, [b"plain"], (10, 2, 1), txn=False)
    with pytest.raises(InvalidRecord, match="producer id"):
        put(log, [b"no-pid"], (-1, -1, -1))
    with pytest.raises(InvalidProducerEpoch):
        marker(log, 10, epoch=1, commit=True)
    marker(log, 10, epoch=2, commit=True, coordinator_epoch=4)
    with pytest.raises(TransactionCoordinatorFenced):
        marker(log, 10, epoch=2, commit=True, coordinator_epoch=3)
    # A bumped epoch on the marker (the coordinator's abort after a timeout) fences
    # the producer's old epoch and starts the next one at sequence 0.
    marker(log, 10, epoch=3, commit=False, coordinator_epoch=4)
    with pytest.raises(InvalidProducerEpoch):
        put(log, [b"late"], (10, 2, 1))
    put(log, [b"next"], (10, 3, 0))
    assert log.high_watermark == 4 and log.last_stable_offset == 3


def test_read_committed_stops_at_the_lso_and_lists_aborted(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"p0"], (-1, -1, -1), txn=False)
    put(log, [b"x1", b"x2"], (10, 0, 0))
    marker(log, 10, commit=False)  # offset 3
    put(log, [b"y"], (20, 0, 0))  # offset 4: open
    put(log, [b"p1"], (-1, -1, -1), txn=False)  # offset 5
    data = log.read(0, 1 << 20, committed=True)
    assert data.last_stable_offset == 4
    assert data.aborted_transactions == ((10, 1),)
    assert len(data.records) == len(log.read(0, 1 << 20).records) - len(
        kbatch([b"y"], (20, 0, 0))
    ) - len(kbatch([b"p1"], txn=False))
    assert log.read(4, 1 << 20, committed=True).records == b""
    # From past the aborted range: not listed.
    assert log.read(3, 1 << 20, committed=True).aborted_transactions == ((10, 1),)
    assert log.read(0, 1 << 20).aborted_transactions == ()  # read_uncommitted: none
    located = log.locate(0, 1 << 20, committed=True)
    assert located.aborted_transactions == ((10, 1),) and located.last_stable_offset == 4


def test_aborted_list_spans_segments(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    first = put(log, [b"a" * 50], (10, 0, 0))
    for i in range(12):
        put(log, [b"p" * 50], (30, 0, i), txn=False)
    assert log.segment_count > 2
    abort_at = marker(log, 10, commit=False)
    assert log.active_segment.txn_index.entries[0].first_offset == first
    # A read of the first segment learns of the abort written segments later.
    data = log.read(0, 100, committed=True)
    assert data.aborted_transactions == ((10, first),)
    assert log.read(abort_at + 1, 100, committed=True).aborted_transactions == ()


def test_txnindex_file_is_kafkas_format(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"a"], (10, 0, 0))
    marker(log, 10, commit=False)
    put(log, [b"b"], (11, 0, 0))
    marker(log, 11, commit=True)  # a COMMIT writes no entry
    log.flush()
    raw = (tmp_path / "00000000000000000000.txnindex").read_bytes()
    assert raw == struct.pack(">hqqqq", 0, 10, 0, 1, 2)


def test_dump_log_shows_markers_and_the_txnindex(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"a"], (10, 0, 0))
    marker(log, 10, commit=False, coordinator_epoch=9)
    log.close()
    segment = tmp_path / "00000000000000000000"
    assert tidelog_main(["dump-log", "-d", f"{segment}.log", f"{segment}.txnindex"]) == 0
    out = capsys.readouterr().out
    assert "isTransactional: true isControl: true" in out
    assert "| offset: 1 endTxnMarker: ABORT coordinatorEpoch: 9" in out
    assert "version: 0 producerId: 10 firstOffset: 0 lastOffset: 1 lastStableOffset: 2" in out
    assert "payload: \x00" not in out


@pytest.mark.parametrize("clean", [True, False], ids=["clean-close", "crash"])
def test_open_transaction_survives_a_restart(tmp_path: Path, clean: bool) -> None:
    log = open_test_log(tmp_path, SMALL)
    put(log, [b"a"], (10, 0, 0))
    marker(log, 10, commit=False)
    for i in range(8):
        put(log, [b"p" * 40], (30, 0, i), txn=False)
    open_at = put(log, [b"open"], (20, 0, 0))
    put(log, [b"after"], (30, 0, 8), txn=False)
    lso, hw = log.last_stable_offset, log.high_watermark
    assert lso == open_at
    if clean:
        log.close()
    else:  # what kill -9 leaves: the page cache, no close, no final snapshot
        log._local.fsync(log._local.segments, dir_dirty=True, also=lambda: None)
    reopened = open_test_log(tmp_path, SMALL, clean=clean)
    assert (reopened.last_stable_offset, reopened.high_watermark) == (lso, hw)
    assert reopened.ongoing_transactions() == {20: open_at}
    assert reopened.read(0, 1 << 20, committed=True).aborted_transactions == ((10, 0),)
    marker(reopened, 20, commit=True)
    assert reopened.last_stable_offset == reopened.high_watermark == hw + 1


def test_truncation_drops_entries_and_reopens_transactions(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"a"], (10, 0, 0))
    put(log, [b"b"], (20, 0, 0))
    marker(log, 10, commit=False)  # offset 2
    assert log.last_stable_offset == 1
    log.truncate_to(2)
    assert log.active_segment.txn_index.entries == []
    assert log.ongoing_transactions() == {10: 0, 20: 1}
    assert log.last_stable_offset == 0


def test_retention_deletes_the_txnindex_with_its_segment(tmp_path: Path) -> None:
    clock = ManualClock()
    log = open_test_log(tmp_path, SMALL, clock=clock)
    put(log, [b"a"], (10, 0, 0))
    marker(log, 10, commit=False)
    index_file = log.active_segment.txn_index.path
    log.roll()
    put(log, [b"b"], (11, 0, 0))  # open transaction in a later segment
    assert index_file.exists()
    log.delete_oldest_segments(1, "retention")
    assert not index_file.exists()  # renamed .deleted with the segment
    assert index_file.with_name(index_file.name + ".deleted").exists()
    assert log.last_stable_offset == 2 and log.ongoing_transactions() == {11: 2}


def test_log_start_may_pass_an_open_transaction(tmp_path: Path) -> None:
    """Kafka: retention and DeleteRecords may move the log start past an open
    transaction's first offset; the LSO is then the log start until the marker."""
    log = open_test_log(tmp_path, SMALL)
    put(log, [b"a"], (10, 0, 0))
    for i in range(3):
        put(log, [b"p"], (30, 0, i), txn=False)
    log.delete_records(2)
    assert log.ongoing_transactions() == {10: 0}
    assert log.last_stable_offset == 2
    marker(log, 10, commit=True)
    assert log.last_stable_offset == log.high_watermark


def test_snapshot_v2_keeps_transactions_and_reads_v1() -> None:
    entry = ProducerEntry(3, (BatchMetadata(0, 1, 5, 6, BASE_TS),), BASE_TS, 7, 5)
    assert decode_snapshot(encode_snapshot(10, {42: entry}), 10) == {42: entry}
    # A version 1 file (issue 21) still loads: no coordinator epoch, no transaction.
    v1 = bytearray(struct.pack(">hIqi", 1, 0, 10, 1))
    v1 += struct.pack(">qhqb", 42, 3, BASE_TS, 1) + struct.pack(">iiqqq", 0, 1, 5, 6, BASE_TS)
    struct.pack_into(">I", v1, 2, crc32c.crc32c(bytes(v1[6:])))
    assert decode_snapshot(bytes(v1), 10) == {
        42: entry._replace(coordinator_epoch=-1, txn_first_offset=-1)
    }
