"""Cleaning a compacted topic of Kafka v2 batches (stored as a Kafka producer sent them),
alone and mixed with Tidelog batches: kept batches stay Kafka batches with their
offsets, timestamps, headers, producer fields and codec; tombstones get Kafka's delete
horizon in the stored batch; the map and the dirty ratio count both layouts."""

from __future__ import annotations

import pytest

from protocol.batch import KAFKA_LAYOUT, Compression, encode_batch
from protocol.kafka import records as kafka
from tests.compaction.helpers import (
    Clock,
    append,
    batches_of,
    kafka_batch,
    latest_by_key,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
    read_all,
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


def stored_batches(log):
    return batches_of(log.read(log.log_start_offset, 1 << 24).records)


@pytest.mark.parametrize("mixed", [False, True], ids=["kafka", "mixed"])
def test_updates_shrink_and_batches_stay_in_their_layout(logs, clock, mixed):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    for i in range(400):
        kafka_layout = not mixed or i % 3 != 0
        append(log, [(b"key-%d" % (i % 7), b"value-%d" % i)], clock(), kafka=kafka_layout)
    log.roll()
    before = read_all(log)
    result = make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    assert result is not None and result.records_kept == 7
    after = read_all(log)
    assert latest_by_key(after) == latest_by_key(before)
    for header, records in stored_batches(log):
        (record,) = records
        produced_as_kafka = not mixed or record.offset % 3 != 0
        assert header.magic == (kafka.MAGIC if produced_as_kafka else 1)


def test_a_rewritten_kafka_batch_keeps_its_identity(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    rows = [(b"a", b"1", [("h", b"x")], clock()), (b"b", b"2", None, clock() + 5)]
    rows.append((b"a", b"3", [("h", b"y")], clock() + 9))
    batch = encode_batch(
        rows, compression=Compression.LZ4, producer_id=9, producer_epoch=1, base_sequence=0
    )
    log.append(kafka_batch(batch), layout=KAFKA_LAYOUT)
    # The producer's newest batch is kept whole (deduplication); the first is cleaned.
    later = encode_batch(
        [(b"c", b"4", None, clock())], producer_id=9, producer_epoch=1, base_sequence=3
    )
    log.append(kafka_batch(later), layout=KAFKA_LAYOUT)
    log.roll()
    make_cleaner_manager(logs, clock).clean_one(make_cleaner())
    data = log.read(0, 1 << 20).records
    header, records = kafka.read_batch_header(data), batches_of(data)[0][1]
    assert header.magic == kafka.MAGIC and header.partition_leader_epoch == 0
    assert header.compression == Compression.LZ4
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (9, 1, 0)
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (0, 2, 2)
    assert [(r.offset, r.key, r.timestamp, r.headers) for r in records] == [
        (1, b"b", clock() + 5, ()),
        (2, b"a", clock() + 9, (("h", b"y"),)),
    ]
    assert header.max_timestamp == clock() + 9


def test_a_kafka_tombstone_gets_the_delete_horizon_then_goes(logs, clock):
    logs.create_topic("t", 1, {**COMPACT, "min.cleanable.dirty.ratio": "0.01"})
    log = logs.get_log("t", 0)
    for i in range(30):
        append(log, [(b"key-%d" % (i % 3), b"v%d" % i)], clock(), kafka=True)
    append(log, [(b"key-1", None)], clock(), kafka=True)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    cleaners.clean_one(make_cleaner())
    tombstone_at = latest_by_key(read_all(log))[b"key-1"][0]
    data = log.read(tombstone_at, 1).records
    header = kafka.read_batch_header(data)
    assert header.attributes & kafka.DELETE_HORIZON_MASK  # KIP-534, as Kafka writes it
    assert header.base_timestamp == clock() + 1000
    assert batches_of(data)[0][1][0].timestamp == clock()  # the record keeps its time
    clock.advance(1000)
    for _ in range(5):
        append(log, [(b"churn", b"x")], clock(), kafka=True)
    log.roll()
    assert cleaners.clean_one(make_cleaner()) is not None
    assert b"key-1" not in {r.key for r in read_all(log)}


def test_dirty_ratio_counts_both_layouts(logs, clock):
    logs.create_topic("t", 1, COMPACT)
    log = logs.get_log("t", 0)
    for i in range(200):
        append(log, [(b"k%d" % (i % 4), b"v" * 20)], clock(), kafka=i % 2 == 0)
    log.roll()
    cleaners = make_cleaner_manager(logs, clock)
    assert cleaners.clean_one(make_cleaner()) is not None
    for i in range(200):
        append(log, [(b"k%d" % (i % 4), b"w" * 20)], clock(), kafka=i % 2 == 1)
    log.roll()
    segments = log.segments_info()
    dirty = sum(s.size_bytes for s in segments[:-1] if s.base_offset >= 200)
    clean = sum(s.size_bytes for s in segments[:-1] if s.base_offset < 200)
    assert cleaners.clean_one(make_cleaner()) is not None  # measures, then cleans
    state = cleaners.statistics().logs[("t", 0)]
    assert state.dirty_ratio == pytest.approx(dirty / (dirty + clean))
