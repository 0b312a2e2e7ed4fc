"""Fetched Kafka v2 batches (stored as a Kafka producer sent them) decode into the
same ConsumerRecords as the same records in Tidelog's layout, mixed in one answer."""

from __future__ import annotations

import pytest

from protocol.batch import Compression, TimestampType, set_base_offset, set_log_append_time
from protocol.errors import CorruptMessage
from protocol.kafka.convert import tidelog_to_kafka
from tests.tidelog.test_consumer_record import RECORDS, stored
from tidelog.consumer_record import decode_fetched, next_position


def as_kafka(batch: bytes) -> bytes:
    return tidelog_to_kafka(batch, partition_leader_epoch=0)[0]


@pytest.mark.parametrize("codec", list(Compression))
def test_kafka_batch_decodes_as_the_tidelog_one(codec: Compression) -> None:
    tidelog = stored(compression=codec)
    assert decode_fetched("t", 1, as_kafka(tidelog), 0) == decode_fetched("t", 1, tidelog, 0)


def test_mixed_layouts_in_one_answer() -> None:
    """Tidelog, Kafka (column-wise: 300 records), Tidelog, back to back; a position
    inside the Kafka batch cuts it; the next position comes from the headers."""
    first = stored(base_offset=100)
    many = [(b"k%d" % i, b"v" * (i % 7), None, 1_700_000_000_000 + i) for i in range(300)]
    second = stored(many, base_offset=103)
    third = stored(base_offset=403, timestamp_type=TimestampType.LOG_APPEND_TIME)
    third = bytearray(third)
    set_log_append_time(third, 0, 1_800_000_000_000)
    mixed = first + as_kafka(second) + bytes(third)
    expected, end = decode_fetched("t", 0, first + second + bytes(third), 150)
    got, position = decode_fetched("t", 0, mixed, 150)
    assert (got, position) == (expected, end) and position == 406
    assert got[0].offset == 150 and got[-1].timestamp == 1_800_000_000_000
    assert next_position(mixed, 0) == 406


def test_a_partial_kafka_batch_waits_for_the_next_fetch() -> None:
    first = stored(base_offset=0)
    kafka = bytearray(as_kafka(stored(base_offset=0)))
    set_base_offset(kafka, 0, 3)
    records, position = decode_fetched("t", 0, first + bytes(kafka)[:-5], 0)
    assert [r.offset for r in records] == [0, 1, 2] and position == 3


def test_a_damaged_kafka_batch_is_corrupt() -> None:
    kafka = bytearray(as_kafka(stored(RECORDS)))
    kafka[17] ^= 0xFF  # the stored CRC itself: the records still parse
    with pytest.raises(CorruptMessage, match="CRC"):
        decode_fetched("t", 0, bytes(kafka), 0)
    assert len(decode_fetched("t", 0, bytes(kafka), 0, check_crcs=False)[0]) == 3


def small_kafka_batches(count: int, per: int, base: int = 0) -> list[bytes]:
    out = []
    for b in range(count):
        rows = [
            (b"k%d" % i, None if i % 5 == 0 else b"v%d" % (b * per + i), [("h", b"1")] * (i % 2),
             1_700_000_000_000 + b * per + i)
            for i in range(per)
        ]  # fmt: skip
        out.append(stored(rows, base_offset=base + b * per))
    return out


def test_many_small_kafka_batches_decode_in_one_walk() -> None:
    """20 batches of 8 records (a Java producer's small batches): the same records as
    their Tidelog twins, a start inside the third batch."""
    tidelog = small_kafka_batches(20, 8)
    expected = decode_fetched("t", 0, b"".join(tidelog), 19)
    got = decode_fetched("t", 0, b"".join(map(as_kafka, tidelog)), 19)
    assert got == expected and got[1] == 160 and got[0][0].offset == 19


def test_a_run_with_a_shifted_record_count_is_corrupt() -> None:
    """Counts that sum right but split the records wrongly between two batches: each
    batch's count is checked against its own records."""
    first, second = (bytearray(as_kafka(b)) for b in small_kafka_batches(2, 60))
    first[57:61] = (59).to_bytes(4, "big")
    second[57:61] = (61).to_bytes(4, "big")
    with pytest.raises(CorruptMessage, match="bytes follow the batch's 59 records"):
        decode_fetched("t", 0, bytes(first + second), 0, check_crcs=False)
    with pytest.raises(CorruptMessage, match=r"claims 61 records|record 60"):
        decode_fetched("t", 0, bytes(second), 0, check_crcs=False)
