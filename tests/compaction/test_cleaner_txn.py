"""The cleaner and transactions (issue 36, Kafka's LogCleaner): aborted records never
shadow a key and are removed, markers are kept while their transaction has data and
dropped a delete horizon after, the `.txnindex` of the merged segments goes with the
cleaned one (less the aborted transactions whose markers went), and nothing at or past
the LSO is cleaned."""

from __future__ import annotations

import struct

import crc32c
import pytest

from protocol.batch import KAFKA_LAYOUT, encode_batch
from tests.compaction.helpers import (
    Clock,
    batches_of,
    kafka_batch,
    latest_by_key,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
    read_all,
    read_committed,
)
from tests.compaction.test_cleaner import COMPACT


@pytest.fixture
def clock():
    return Clock()


@pytest.fixture
def logs(tmp_path, clock):
    manager = open_manager(tmp_path, clock)
    yield manager
    manager.close()


def txn(log, rows, ts, producer_id, sequence, *, transactional=True, epoch=0):
    """Append (key, value) rows as one Kafka batch of `producer_id`, transactional."""
    batch = bytearray(
        kafka_batch(
            encode_batch(
                [(k, v, None, ts) for k, v in rows],
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=sequence,
            )
        )
    )
    if transactional:
        attributes = struct.unpack_from(">h", batch, 21)[0] | 0x10
        struct.pack_into(">h", batch, 21, attributes)
        struct.pack_into(">I", batch, 17, crc32c.crc32c(bytes(batch[21:])))
    return log.append(bytes(batch), layout=KAFKA_LAYOUT).base_offset


def committed_values(log):
    """key -> value as a read_committed Kafka consumer sees them (one read)."""
    data = log.read(log.log_start_offset, 1 << 24, committed=True)
    records = read_committed(batches_of(data.records), list(data.aborted_transactions))
    return {r.key: r.value for r in records}


def test_aborted_records_never_shadow_a_committed_key(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    txn(log, [(b"a", b"a-committed"), (b"b", b"b-1")], clock(), 5, 0)
    log.append_txn_marker(5, 0, commit=True, coordinator_epoch=0, append_time_ms=clock())
    txn(log, [(b"a", b"a-aborted"), (b"c", b"c-aborted")], clock(), 5, 2)
    log.append_txn_marker(5, 0, commit=False, coordinator_epoch=0, append_time_ms=clock())
    txn(log, [(b"b", b"b-2")], clock(), 6, 0, transactional=False)
    # Producer 5's newest batch is kept whole for deduplication: a later one here.
    txn(log, [(b"d", b"d-1")], clock(), 5, 4)
    log.append_txn_marker(5, 0, commit=True, coordinator_epoch=0, append_time_ms=clock())
    log.roll()
    before = committed_values(log)
    assert before == {b"a": b"a-committed", b"b": b"b-2", b"d": b"d-1"}
    result = make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    assert result is not None
    assert committed_values(log) == before
    stored = batches_of(log.read(0, 1 << 24).records)
    # Both markers kept, the aborted batch removed, the committed "a" kept.
    assert [h.base_offset for h, _ in stored if h.attributes & 0x20] == [2, 5, 8]
    values = [r.value for h, rs in stored if not h.attributes & 0x20 for r in rs]
    assert b"a-aborted" not in values and b"a-committed" in values
    # The cleaned segment keeps the AbortedTxn entry (and its file).
    first = log._local.segments[0]
    assert [(e.producer_id, e.first_offset, e.last_offset) for e in first.txn_index.entries] == [
        (5, 3, 5)
    ]
    assert first.txn_index.path.exists()


def test_nothing_at_or_past_the_lso_is_cleaned(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    for i in range(5):
        txn(log, [(b"k", b"old-%d" % i)], clock(), 9, i, transactional=False)
    log.roll()
    txn(log, [(b"k", b"open")], clock(), 10, 0)  # an open transaction from here on
    log.roll()
    for i in range(5):
        txn(log, [(b"k", b"new-%d" % i)], clock(), 9, 5 + i, transactional=False)
    log.roll()
    assert log.last_stable_offset == 5
    result = make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    assert result is not None and result.end_offset <= 5
    records = read_all(log)
    # The first segment was cleaned to its latest; everything from the LSO on is whole.
    assert [r.value for r in records] == [b"old-4", b"open"] + [b"new-%d" % i for i in range(5)]
    assert latest_by_key(records)[b"k"][1] == b"new-4"


def markers_of(log):
    """(offset, producer id, delete horizon or None) of every stored marker."""
    return [
        (h.base_offset, h.producer_id, h.base_timestamp if h.has_delete_horizon else None)
        for h, _ in batches_of(log.read(0, 1 << 24).records)
        if h.attributes & 0x20
    ]


def test_markers_go_a_delete_horizon_after_their_transaction_s_data(logs, clock):
    """Kafka's rule: a marker stays while any batch of its transaction is in the log;
    the first pass that finds none sets its delete horizon; a pass past it drops it."""
    logs.create_topic("t", 1, COMPACT)  # delete.retention.ms 1000
    log = logs.get_log("t", 0)
    txn(log, [(b"a", b"a1")], clock(), 5, 0)  # 0: shadowed by offset 4
    log.append_txn_marker(5, 0, commit=True, coordinator_epoch=0, append_time_ms=clock())  # 1
    txn(log, [(b"c", b"c-aborted")], clock(), 7, 0)  # 2: aborted data
    log.append_txn_marker(7, 0, commit=False, coordinator_epoch=0, append_time_ms=clock())  # 3
    txn(log, [(b"a", b"a2")], clock(), 6, 0, transactional=False)  # 4
    txn(log, [(b"e", b"e1")], clock(), 7, 1)  # 5: still the latest "e"
    log.append_txn_marker(7, 0, commit=True, coordinator_epoch=0, append_time_ms=clock())  # 6
    txn(log, [(b"d", b"d1")], clock(), 5, 1)  # 7
    log.append_txn_marker(5, 0, commit=True, coordinator_epoch=0, append_time_ms=clock())  # 8
    log.roll()
    end = log.log_end_offset
    cleaner = make_cleaner()
    want = {b"a": b"a2", b"e": b"e1", b"d": b"d1"}

    def clean():
        cleaner.clean(log, first_dirty_offset=0, first_uncleanable_offset=end, now_ms=clock())
        assert committed_values(log) == want

    assert committed_values(log) == want
    clean()  # removes offsets 0 and 2; their markers saw their data in this pass
    assert markers_of(log) == [(1, 5, None), (3, 7, None), (6, 7, None), (8, 5, None)]
    clock.advance(10)
    clean()  # no data of 1's and 3's transactions left: their horizons are set
    horizon = clock() + 1000
    assert markers_of(log) == [(1, 5, horizon), (3, 7, horizon), (6, 7, None), (8, 5, None)]
    clock.advance(999)
    clean()  # before the horizon: kept
    assert [m[0] for m in markers_of(log)] == [1, 3, 6, 8]
    clock.advance(1)
    clean()  # at the horizon: dropped; the markers of live data stay
    assert markers_of(log) == [(6, 7, None), (8, 5, None)]
    data = [
        (h.base_offset, [r.value for r in rs])
        for h, rs in batches_of(log.read(0, 1 << 24).records)
        if not h.attributes & 0x20
    ]
    assert data == [(4, [b"a2"]), (5, [b"e1"]), (7, [b"d1"])]
    # The aborted transaction left the index with its marker (else producer 7's later,
    # committed "e1" would read as aborted: committed_values checks that too).
    assert log._local.segments[0].txn_index.entries == []


def test_a_marker_that_alone_carries_its_producer_s_epoch_outlives_its_horizon(logs, clock):
    """Kafka keeps the last record of each live producer: when an epoch bump forgot the
    producer's batches (here an abort at the bumped epoch, as InitProducerId does to a
    zombie's open transaction), its marker is that record and is never dropped, so a
    state rebuilt from the log still fences the old epoch. A marker of an older epoch
    of the same producer still goes."""
    logs.create_topic("t", 1, COMPACT)  # delete.retention.ms 1000
    log = logs.get_log("t", 0)
    txn(log, [(b"a", b"a1")], clock(), 5, 0)  # 0: shadowed by offset 4
    log.append_txn_marker(5, 0, commit=True, coordinator_epoch=0, append_time_ms=clock())  # 1
    txn(log, [(b"z", b"zombie")], clock(), 5, 1)  # 2: aborted below
    log.append_txn_marker(5, 1, commit=False, coordinator_epoch=0, append_time_ms=clock())  # 3
    txn(log, [(b"a", b"a2")], clock(), 7, 0, transactional=False)  # 4
    log.roll()
    end = log.log_end_offset
    cleaner = make_cleaner()
    assert log.producer_marker_epochs() == {5: 1}
    for _ in range(3):  # data removed, then horizons set, then past them
        cleaner.clean(log, first_dirty_offset=0, first_uncleanable_offset=end, now_ms=clock())
        clock.advance(1000)
    assert [m[:2] for m in markers_of(log)] == [(3, 5)]
    assert committed_values(log) == {b"a": b"a2"}
