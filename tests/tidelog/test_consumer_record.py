"""ConsumerRecord and the decoding of fetched batches straight into records."""

from __future__ import annotations

import copy
import gc
import pickle
import struct
import threading

import crc32c
import msgpack
import pytest

from protocol.batch import Compression, build_batch, encode_batch, set_log_append_time
from protocol.errors import CorruptMessage
from tidelog.consumer_record import ConsumerRecord, decode_fetched, next_position

RECORDS = [
    (b"k0", b"v0", [("trace", b"abc")], 1_700_000_000_000),
    (None, b"v1", None, 1_700_000_000_007),
    (b"k2", None, [("a", None), ("b", b"")], 1_699_999_999_990),
]


def stored(records: list = RECORDS, base_offset: int = 100, **options: object) -> bytes:
    data = bytearray(encode_batch(records, **options))  # type: ignore[arg-type]
    struct.pack_into(">q", data, 0, base_offset)
    return bytes(data)


def with_payload(batch: bytes, payload_records: object, record_count: int | None = None) -> bytes:
    """`batch` with its payload replaced (length, count and CRC fixed up), as a writer
    that breaks the record shape would store it."""
    payload = msgpack.packb(payload_records, use_bin_type=True)
    head = bytearray(batch[:57])
    struct.pack_into(">i", head, 8, 57 - 12 + len(payload))
    if record_count is not None:
        struct.pack_into(">i", head, 53, record_count)
    body = bytes(head[17:]) + payload
    struct.pack_into(">I", head, 13, crc32c.crc32c(body))
    return bytes(head[:17]) + body


def test_records_carry_every_attribute() -> None:
    records, position = decode_fetched("events", 3, stored(), 0)
    assert position == 103
    first, second, third = records
    assert (first.topic, first.partition, first.offset) == ("events", 3, 100)
    assert (first.timestamp, first.timestamp_type) == (1_700_000_000_000, 0)
    assert (first.key, first.value, first.headers) == (b"k0", b"v0", (("trace", b"abc"),))
    assert (second.offset, second.timestamp, second.key, second.headers) == (
        101,
        1_700_000_000_007,
        None,
        (),
    )
    assert (third.offset, third.timestamp, third.value) == (102, 1_699_999_999_990, None)
    assert third.headers == (("a", None), ("b", b""))


def test_construction_from_kafka_attributes_equals_a_decoded_record() -> None:
    [record, *_] = decode_fetched("events", 3, stored(), 0)[0]
    built = ConsumerRecord(
        "events", 3, 100, 1_700_000_000_000, 0, b"k0", b"v0", [("trace", b"abc")]
    )
    assert built == record and hash(built) == hash(record)
    assert built == ConsumerRecord(
        topic="events",
        partition=3,
        offset=100,
        timestamp=1_700_000_000_000,
        timestamp_type=0,
        key=b"k0",
        value=b"v0",
        headers=(("trace", b"abc"),),
    )
    assert record != ConsumerRecord("events", 4, 100, 1_700_000_000_000, 0, b"k0", b"v0", ())
    assert record != ("events", 3, 100)
    assert len({record, built}) == 1


def test_repr_pickle_copy_and_immutability() -> None:
    [record, *_] = decode_fetched("events", 3, stored(), 0)[0]
    assert repr(record) == (
        "ConsumerRecord(topic='events', partition=3, offset=100, timestamp=1700000000000, "
        "timestamp_type=0, key=b'k0', value=b'v0', headers=(('trace', b'abc'),))"
    )
    assert pickle.loads(pickle.dumps(record)) == record
    assert copy.copy(record) == record and copy.deepcopy(record) == record
    with pytest.raises(AttributeError):
        record.value = b"other"  # type: ignore[misc]


def test_records_are_not_tracked_by_the_garbage_collector() -> None:
    records, _ = decode_fetched("t", 0, stored(), 0)
    assert not any(map(gc.is_tracked, records))


def test_log_append_time_gives_every_record_the_broker_time() -> None:
    data = bytearray(stored())
    set_log_append_time(data, 0, 1_800_000_000_000)
    records, _ = decode_fetched("t", 0, bytes(data), 0)
    assert {(r.timestamp, r.timestamp_type) for r in records} == {(1_800_000_000_000, 1)}
    assert ConsumerRecord("t", 0, 100, 5, 1, None, b"v").timestamp == 5


@pytest.mark.parametrize("codec", [c for c in Compression if c], ids=lambda c: c.name.lower())
def test_compressed_batches_decode(codec: Compression) -> None:
    records, position = decode_fetched("t", 0, stored(compression=codec), 101)
    assert [(r.offset, r.value) for r in records] == [(101, b"v1"), (102, None)]
    assert position == 103


def test_trimming_follows_compaction_gaps() -> None:
    data = build_batch(
        [(d, 1_000 + d, None, b"v%d" % d, ()) for d in (1, 4, 6)],
        base_offset=50,
        base_timestamp=1_000,
        attributes=0,
        last_offset_delta=9,
    )
    for position, expected in [(50, [51, 54, 56]), (52, [54, 56]), (54, [54, 56]), (57, [])]:
        records, next_offset = decode_fetched("t", 0, data, position)
        assert [r.offset for r in records] == expected
        assert [r.timestamp for r in records] == [1_000 + o - 50 for o in expected]
        assert next_offset == 60 == next_position(data, position)


def test_next_position_ignores_a_partial_tail_and_earlier_batches() -> None:
    data = stored(base_offset=0) + stored(base_offset=3)[:-1]
    assert next_position(data, 0) == 3
    assert next_position(data, 7) == 7
    assert next_position(b"", 5) == 5


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        ([[0, 0, None, b"v", [], [1]]], "5 items"),  # a sixth item cannot pose as the origin
        ([[0, 0, None, b"v", [], {"topic": "x", "base_offset": 7}]], "5 items"),
        ([[0, 0, None, "text", []]], "bin or nil"),
        ([[0, True, None, b"v", []]], "integers"),
        ([[0, 0, None, b"v", [["h"]]]], "pair"),
    ],
)
def test_malformed_records_are_corrupt(payload: object, why: str) -> None:
    data = with_payload(stored(), payload, record_count=1)
    with pytest.raises(CorruptMessage, match=why):
        decode_fetched("t", 0, data, 0)


def test_record_count_must_match_the_header() -> None:
    data = with_payload(stored(), [[0, 0, None, b"v", []]], record_count=2)
    with pytest.raises(CorruptMessage, match="header says 2 records, payload holds 1"):
        decode_fetched("t", 0, data, 0)


def test_crc_is_checked_unless_disabled() -> None:
    data = bytearray(stored())
    data[data.index(b"v0")] = ord("w")  # still well-formed records, but not what was written
    with pytest.raises(CorruptMessage, match="CRC"):
        decode_fetched("t", 0, bytes(data), 0)
    records, _ = decode_fetched("t", 0, bytes(data), 0, check_crcs=False)
    assert [r.value for r in records] == [b"w0", b"v1", None]


def test_threads_decoding_at_once_each_get_their_own_batches_origin() -> None:
    """No state is shared between decodes: every record names the batch it came from."""
    threads_count, rounds = 4, 200
    records_of = [stored([(None, b"v", [], 1_000 + n)] * 50, base_offset=n) for n in range(4)]
    start = threading.Barrier(threads_count)
    wrong: list[str] = []

    def decode(n: int) -> None:
        start.wait()
        for _ in range(rounds):
            records, _ = decode_fetched(f"topic-{n}", n, records_of[n], 0)
            if {
                (r.topic, r.partition, r.offset - i, r.timestamp) for i, r in enumerate(records)
            } != {(f"topic-{n}", n, n, 1_000 + n)}:
                wrong.append(f"thread {n}: {records[0]!r}")

    threads = [threading.Thread(target=decode, args=(n,)) for n in range(threads_count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert wrong == []
