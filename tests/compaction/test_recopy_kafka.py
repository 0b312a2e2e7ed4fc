"""Recopy of Kafka v2 batches: a kept Kafka batch stays a Kafka batch (Kafka's
`MemoryRecords.filterTo`), with its offsets, timestamps, headers, producer fields,
codec and leader epoch; tombstones get Kafka's delete horizon (attribute bit 6,
base_timestamp = horizon, KIP-534). And it decides exactly as for the same records
in Tidelog's layout."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.layouts import header_of, records_of
from compaction.recopy import UNKEYED, recopy_batch
from protocol.batch import (
    ANY_LAYOUT,
    DELETE_HORIZON_MASK,
    BatchHeader,
    Compression,
    TimestampType,
    decode_records,
    read_header,
)
from protocol.kafka import records as kafka
from protocol.kafka import stored
from protocol.kafka.convert import tidelog_to_kafka
from protocol.kafka.validate import decode_batch
from tests.compaction.test_recopy import NOW_MS, RETENTION_MS, make_batch
from tests.compaction.test_recopy import run as run_tidelog

EPOCH = 7


def kafka_batch(rows, **kw) -> bytes:
    """The Kafka v2 batch of the same records `make_batch` builds (base offset 100)."""
    return tidelog_to_kafka(make_batch(rows, **kw), partition_leader_epoch=EPOCH)[0]


def run(batch, latest, *, map_end=10**9, now_ms=NOW_MS):
    header = BatchHeader(*ANY_LAYOUT.unpack_from(batch))
    records = records_of(memoryview(batch), header, 1 << 20)
    latest = {**{r[2]: -1 for r in records}, None: UNKEYED, **latest}
    return recopy_batch(
        batch,
        header,
        records,
        latest,
        map_end_offset=map_end,
        now_ms=now_ms,
        delete_retention_ms=RETENTION_MS,
    )


def checked(data) -> tuple[kafka.KafkaBatchHeader, list]:
    """A rebuilt batch read back by the Kafka codec: CRC and records checked."""
    return decode_batch(data)


def kept(data):
    header, records = checked(data)
    return [(header.base_offset + r[0], r[2], r[3]) for r in records]


@pytest.mark.parametrize("codec", list(Compression))
def test_duplicates_dropped_batch_stays_kafka(codec):
    batch = kafka_batch(
        [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")],
        compression=codec,
        producer=(7, 2, 40),
    )
    out = run(batch, {b"a": 102, b"b": 500, b"c": 103})
    assert out.rewritten
    assert kept(out.data) == [(102, b"a", b"3"), (103, b"c", b"4")]
    new, records = checked(out.data)
    assert new.magic == kafka.MAGIC
    assert new.partition_leader_epoch == EPOCH
    assert (new.base_offset, new.last_offset_delta) == (100, 3)
    assert new.compression == codec
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (7, 2, 40)
    assert new.record_count == 2
    assert new.base_timestamp == 1002
    assert new.max_timestamp == 1003
    assert [new.base_timestamp + r[1] for r in records] == [1002, 1003]
    assert records[0][4] == (("h", b"x"),)
    # The header the cleaner hands the segment writer is the batch's own.
    assert header_of(out.data, kafka.MAGIC) == BatchHeader(*ANY_LAYOUT.unpack_from(out.data))


def test_all_latest_copied_verbatim():
    batch = kafka_batch([(b"a", b"1"), (b"b", b"2")])
    out = run(batch, {b"a": 100, b"b": 101})
    assert out.data == batch
    assert not out.rewritten


def test_first_kept_tombstone_gets_kafkas_delete_horizon():
    out = run(kafka_batch([(b"a", None), (b"b", b"2")]), {})
    header, records = checked(out.data)
    assert header.attributes & DELETE_HORIZON_MASK
    assert header.base_timestamp == NOW_MS + RETENTION_MS
    assert [(header.base_timestamp + r[1], r[3]) for r in records] == [(1000, None), (1001, b"2")]
    assert header.max_timestamp == 1001
    assert header.partition_leader_epoch == EPOCH
    # Verbatim until the horizon, then the tombstone goes and bit 6 stays.
    assert run(out.data, {}, now_ms=NOW_MS + RETENTION_MS - 1).data == out.data
    later = run(out.data, {}, now_ms=NOW_MS + RETENTION_MS)
    assert kept(later.data) == [(101, b"b", b"2")]
    assert checked(later.data)[0].attributes & DELETE_HORIZON_MASK


def test_log_append_time_keeps_type_and_max_timestamp():
    batch = kafka_batch([(b"a", b"1"), (b"a", b"2")], timestamp_type=TimestampType.LOG_APPEND_TIME)
    out = run(batch, {b"a": 101})
    header, _ = checked(out.data)
    assert header.attributes & kafka.TIMESTAMP_TYPE_MASK
    assert header.max_timestamp == kafka.read_batch_header(batch).max_timestamp


def test_many_records_walked_column_wise():
    """Batches past DECODE_COLUMNS_MIN_RECORDS take the numpy path for keys and records."""
    rows = [(b"k%d" % (i % 10), b"v%d" % i) for i in range(300)]
    batch = kafka_batch(rows)
    header = BatchHeader(*ANY_LAYOUT.unpack_from(batch))
    deltas, keys = stored.keys_of_stored(batch, 0, header)
    assert deltas == list(range(300))
    assert keys == [k for k, _ in rows]
    out = run(batch, {b"k%d" % i: 390 + i for i in range(10)})
    assert kept(out.data) == [(390 + i, b"k%d" % i, b"v%d" % (290 + i)) for i in range(10)]


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", None]), st.sampled_from([b"v", None])),
        min_size=1,
        max_size=12,
    ),
    latest=st.dictionaries(st.sampled_from([b"a", b"b", b"c"]), st.integers(95, 115)),
    end_delta=st.integers(min_value=0, max_value=14),
    now_ms=st.sampled_from([NOW_MS, NOW_MS + 2 * RETENTION_MS]),
    codec=st.sampled_from(list(Compression)),
    log_append=st.booleans(),
)
def test_kafka_layout_decides_as_tidelog_layout(rows, latest, end_delta, now_ms, codec, log_append):
    """The same records in both layouts: the same survivors, counts and header fields,
    twice over (a second cleaning reads what the first wrote)."""
    stamp = TimestampType.LOG_APPEND_TIME if log_append else TimestampType.CREATE_TIME
    tidelog_batch = make_batch(rows, compression=codec, timestamp_type=stamp)
    kafka_bytes = tidelog_to_kafka(tidelog_batch, partition_leader_epoch=EPOCH)[0]
    for clock in (NOW_MS, now_ms):
        by_tidelog = run_tidelog(tidelog_batch, latest, map_end=100 + end_delta, now_ms=clock)
        by_kafka = run(kafka_bytes, latest, map_end=100 + end_delta, now_ms=clock)
        counts = (by_kafka.records_kept, by_kafka.records_removed, by_kafka.rewritten)
        assert counts == (by_tidelog.records_kept, by_tidelog.records_removed, by_tidelog.rewritten)
        if by_tidelog.data is None:
            assert by_kafka.data is None
            return
        ours = read_header(by_tidelog.data)
        theirs = BatchHeader(*ANY_LAYOUT.unpack_from(by_kafka.data))
        assert theirs.magic == kafka.MAGIC
        fields = ("base_offset", "attributes", "last_offset_delta", "base_timestamp")
        fields += ("max_timestamp", "producer_id", "producer_epoch", "base_sequence")
        assert [getattr(theirs, f) for f in fields] == [getattr(ours, f) for f in fields]
        expected = [(r.offset, r.key, r.value, r.headers) for r in decode_records(by_tidelog.data)]
        header, records = checked(by_kafka.data)
        assert header.partition_leader_epoch == EPOCH
        assert [(100 + r[0], r[2], r[3], r[4]) for r in records] == expected
        tidelog_batch, kafka_bytes = bytes(by_tidelog.data), bytes(by_kafka.data)
