"""check_produced: Kafka's LogValidator rules on produced v2 batches, stored as sent.

Good batches come from kafka-python's pure-Python and aiokafka's Cython record
builders (every codec); each refusal is one field or byte changed in such a batch,
with its CRC made right again so only the rule under test can refuse it.
"""

from __future__ import annotations

import struct
import warnings

import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder

from protocol.batch import TimestampType
from protocol.compression import Compression
from protocol.errors import CorruptMessage, InvalidRecord, InvalidTimestamp
from protocol.kafka import records as kafka
from protocol.kafka.produce_check import NO_TIMESTAMP, ProducedBatch, check_produced

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

CODECS = [pytest.param(c, id=c.name.lower()) for c in Compression]
BUILDERS = [pytest.param(KpBuilder, id="kafka-python"), pytest.param(AioBuilder, id="aiokafka")]
NOW = 1_700_000_000_000
CAP = 64 << 20

# (key, value, headers, timestamp): nulls against empties, headers with a null value.
RECORDS = [
    (b"a", b"v" * 100, [], NOW),
    (b"", b"", [("h", b"")], NOW + 5),
    (b"key", None, [("a", b"1"), ("b", None), ("é", b"\x00\xff")], NOW - 10),
    (b"k" * 300, b"x" * 5000, [], NOW + 1),
]


def _build(builder, codec=Compression.NONE, rows=RECORDS, *, producer=(-1, -1, -1)) -> bytes:
    b = builder(
        magic=2,
        compression_type=int(codec),
        is_transactional=0,
        producer_id=producer[0],
        producer_epoch=producer[1],
        base_sequence=producer[2],
        batch_size=1 << 20,
    )
    for offset, (key, value, headers, ts) in enumerate(rows):
        b.append(offset, timestamp=ts, key=key, value=value, headers=headers)
    return bytes(b.build())


def _fields(data: bytes, pos: int = 0) -> tuple[int, ...]:
    """The raw header as the ANY_LAYOUT walk gives it: Kafka's, leader epoch skipped."""
    raw = kafka.HEADER.unpack_from(data, pos)
    return raw[:2] + raw[3:]


def _check(data: bytes, *, bounds=None, compacted=False, cap=CAP) -> ProducedBatch:
    return check_produced(
        data, 0, _fields(data), max_decompressed=cap, timestamp_bounds=bounds, compacted=compacted
    )


def _recrc(out: bytearray) -> bytes:
    struct.pack_into(">I", out, kafka.CRC_OFFSET, crc32c.crc32c(bytes(out[kafka.CRC_START :])))
    return bytes(out)


def _with_header_fields(data: bytes, **fields: int) -> bytes:
    header = kafka.read_batch_header(data)
    values = {**{f: getattr(header, f) for f in header.__dataclass_fields__}, **fields}
    out = bytearray(data)
    kafka.HEADER.pack_into(out, 0, *(values[f] for f in header.__dataclass_fields__))
    return _recrc(out)


def _batch(records: list[tuple], *, base_timestamp: int = NOW, **fields: int) -> bytes:
    """A batch around hand-made record tuples (offset_delta, timestamp_delta, key, value,
    headers), the header consistent with them unless `fields` says otherwise."""
    payload = kafka.encode_records(records)
    count = len(records)
    largest = base_timestamp + max(r[1] for r in records)
    head = {
        "attributes": 0,
        "last_offset_delta": count - 1,
        "base_timestamp": base_timestamp,
        "max_timestamp": largest,
        "producer_id": -1,
        "producer_epoch": -1,
        "base_sequence": -1,
        "record_count": count,
        **fields,
    }
    return kafka.assemble_batch(payload, struct.pack(">hiqqqhii", *head.values()))


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_client_batches_pass(builder, codec):
    data = _build(builder, codec, producer=(4242, 3, 17))
    got = _check(data, bounds=(NOW - 1000, NOW + 1000), compacted=True)
    assert got == ProducedBatch(
        4, 3, NOW + 5, TimestampType.CREATE_TIME, 4242, 3, 17, int(codec), len(data)
    )


@pytest.mark.parametrize("builder", BUILDERS)
def test_a_large_client_batch_passes_column_wise(builder):
    rows = [(b"k%d" % i, b"v" * 100, [], NOW + i % 7) for i in range(500)]
    got = _check(_build(builder, Compression.ZSTD, rows), compacted=True)
    assert (got.record_count, got.max_timestamp) == (500, NOW + 6)


def test_max_timestamp_comes_from_the_records_not_the_header():
    data = _with_header_fields(_build(KpBuilder), max_timestamp=1)
    assert _check(data).max_timestamp == NOW + 5


def test_records_without_timestamps_pass_every_bound():
    data = _batch([(0, 0, b"k", b"v", ()), (1, 0, b"k", b"v", ())], base_timestamp=NO_TIMESTAMP)
    got = _check(data, bounds=(NOW - 1, NOW + 1))
    assert got.max_timestamp == NO_TIMESTAMP


def test_an_undated_record_among_dated_ones_passes():
    data = _batch([(0, 0, b"k", b"v", ()), (1, -NOW - 1, b"k", b"v", ())])
    assert _check(data, bounds=(NOW - 1, NOW + 1)).max_timestamp == NOW


@pytest.mark.parametrize(("delta", "index"), [(-5000, 1), (5000, 1)], ids=["too-old", "too-new"])
def test_a_record_outside_the_bounds_is_named(delta, index):
    data = _batch([(0, 0, b"k", b"v", ()), (1, delta, b"k", b"v", ()), (2, 0, b"k", b"v", ())])
    with pytest.raises(InvalidTimestamp, match=f"of message with offset {index} is out of range"):
        _check(data, bounds=(NOW - 1000, NOW + 1000))
    _check(data)  # no bounds: a LogAppendTime topic


def test_log_append_time_batches_are_not_bounded_here():
    data = _batch([(0, 10**9, b"k", b"v", ())], attributes=kafka.TIMESTAMP_TYPE_MASK)
    got = _check(data, bounds=(NOW - 1, NOW + 1))
    assert got.timestamp_type == TimestampType.LOG_APPEND_TIME


@pytest.mark.parametrize(
    ("fields", "error", "match"),
    [
        ({"base_offset": 5}, InvalidRecord, "base_offset"),
        ({"attributes": 0x40}, InvalidRecord, "delete-horizon"),
        ({"attributes": 0x20}, InvalidRecord, "not allowed to write control records"),
        ({"attributes": 0x10}, InvalidRecord, "transactional"),
        ({"attributes": 5}, CorruptMessage, "unknown compression codec 5"),
        ({"last_offset_delta": 2}, InvalidRecord, "Inconsistent batch offset range"),
        ({"last_offset_delta": -1}, InvalidRecord, "invalid offset range"),
        ({"record_count": 0, "last_offset_delta": -1}, InvalidRecord, "invalid offset range"),
        ({"record_count": 0}, InvalidRecord, "Invalid reported count"),
        ({"record_count": 3, "last_offset_delta": 2}, CorruptMessage, "follow"),
        ({"record_count": 5, "last_offset_delta": 4}, CorruptMessage, "record"),
        ({"producer_id": 7, "base_sequence": -1}, InvalidRecord, "Invalid sequence number"),
    ],
)
def test_header_refusals(fields, error, match):
    data = _with_header_fields(_build(KpBuilder), **fields)
    with pytest.raises(error, match=match):
        _check(data)


def test_a_damaged_crc_is_corrupt():
    data = bytearray(_build(KpBuilder))
    data[-1] ^= 1
    with pytest.raises(CorruptMessage, match="crc"):
        _check(bytes(data))


def test_gapped_offset_deltas_are_corrupt():
    data = _batch([(0, 0, b"k", b"a", ()), (2, 0, b"k", b"b", ())])
    with pytest.raises(CorruptMessage, match="record 1 has the wrong offset delta"):
        _check(data)


def test_a_compacted_topic_needs_every_key():
    data = _build(KpBuilder, rows=[(b"k", b"v", [], NOW), (None, b"v", [], NOW)])
    _check(data)
    with pytest.raises(InvalidRecord, match="Compacted topic cannot accept message without key"):
        _check(data, compacted=True)


def test_decompression_is_capped():
    data = _build(KpBuilder, Compression.ZSTD, rows=[(b"k", bytes(100_000), [], NOW)])
    _check(data, cap=200_000)
    with pytest.raises(CorruptMessage, match="cap"):
        _check(data, cap=50_000)


@pytest.mark.parametrize(
    "records",
    [
        # a header with a null key (length -1)
        b"\x16\x00\x00\x00\x02k\x02v\x02\x01\x02v",
        # a key length of -2
        b"\x08\x00\x00\x00\x03\x02v\x00",
        # a key running past its record
        b"\x08\x00\x00\x00\x14\x02v\x00",
        # a record length past the end
        b"\x40\x00\x00\x00\x02k\x02v\x00",
        # a negative record length
        b"\x03\x00\x00\x00\x02k\x02v\x00",
        # a timestamp varlong of 11 bytes
        b"\x1a\x00" + b"\xff" * 10 + b"\x01\x00\x00\x00\x00",
    ],
    ids=[
        "null-header-key",
        "key-length-minus-2",
        "key-past-record",
        "length-past-end",
        "negative-length",
        "long-varlong",
    ],
)
def test_malformed_records_are_corrupt(records):
    data = kafka.assemble_batch(records, struct.pack(">hiqqqhii", 0, 0, NOW, NOW, -1, -1, -1, 1))
    with pytest.raises(CorruptMessage):
        _check(data)


def test_a_batch_past_the_buffer_is_corrupt():
    data = _build(KpBuilder)
    with pytest.raises(CorruptMessage, match="no whole"):
        check_produced(
            data[:-1],
            0,
            _fields(data),
            max_decompressed=CAP,
            timestamp_bounds=None,
            compacted=False,
        )
