"""Kafka v2 batches <-> Tidelog batches, checked record by record against clients' codecs.

Batches come from kafka-python's pure-Python and aiokafka's Cython record
builders (every codec; both write xerial-framed snappy) and from raw snappy as
librdkafka writes it; what we produce is read back by both clients' readers.
"""

from __future__ import annotations

import struct
import warnings

import cramjam
import crc32c
import pytest
from aiokafka.record.default_records import DefaultRecordBatch as AioReader
from aiokafka.record.default_records import DefaultRecordBatchBuilder as AioBuilder
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import batch as tidelog
from protocol.compression import Compression, compress
from protocol.kafka import KafkaCodecError, kafka_to_tidelog, tidelog_to_kafka, validate_batch
from protocol.kafka import records as kafka
from protocol.kafka.convert import kafka_to_tidelog_all, tidelog_to_kafka_all
from protocol.kafka.validate import XERIAL_MAGIC, decode_batch

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.record.default_records import DefaultRecordBatch as KpReader
    from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

CODECS = [pytest.param(c, id=c.name.lower()) for c in Compression]
BUILDERS = [pytest.param(KpBuilder, id="kafka-python"), pytest.param(AioBuilder, id="aiokafka")]
READERS = [pytest.param(KpReader, id="kafka-python"), pytest.param(AioReader, id="aiokafka")]

# (key, value, headers, timestamp): nulls against empties, headers with a null value.
RECORDS = [
    (None, b"v" * 100, [], 1_700_000_000_000),
    (b"", b"", [("h", b"")], 1_700_000_000_005),
    (b"key", None, [("a", b"1"), ("b", None), ("é", b"\x00\xff")], 1_699_999_999_990),
    (b"k" * 300, b"x" * 5000, [], 1_700_000_000_001),
]


def _build(builder, codec: int, rows=RECORDS, *, producer=(-1, -1, -1)) -> bytes:
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


def _expected(rows=RECORDS, base_offset=0):
    return [
        (base_offset + i, ts, key, value, tuple(tuple(h) for h in headers))
        for i, (key, value, headers, ts) in enumerate(rows)
    ]


def _read_kafka(reader, data: bytes):
    batch = reader(data)
    return [
        (r.offset, r.timestamp, r.key, r.value, tuple(tuple(h) for h in r.headers)) for r in batch
    ]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_client_batches_convert_record_by_record(builder, codec):
    data = _build(builder, codec, producer=(4242, 3, 17))
    if codec == Compression.SNAPPY:
        assert data[kafka.HEADER_SIZE :].startswith(XERIAL_MAGIC)  # as Java clients write it
    converted, consumed = kafka_to_tidelog(data)
    assert consumed == len(data)
    header = tidelog.validate_batch(converted, producer=True)
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (4242, 3, 17)
    assert header.compression == codec
    assert [tuple(r) for r in tidelog.decode_records(converted)] == _expected()
    # The 40 shared header bytes (attributes .. record_count) moved unchanged.
    assert converted[17:57] == data[21:61]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("reader", READERS)
def test_tidelog_batches_read_by_clients(reader, codec):
    rows = [(key, value, headers, ts) for key, value, headers, ts in RECORDS]
    source = tidelog.encode_batch(
        [(k, v, h, ts) for k, v, h, ts in rows],
        compression=codec,
        base_offset=1000,
        producer_id=9,
        producer_epoch=2,
        base_sequence=5,
    )
    data, consumed = tidelog_to_kafka(source, partition_leader_epoch=7)
    assert consumed == len(source)
    assert _read_kafka(reader, data) == _expected(base_offset=1000)
    parsed = kafka.read_batch_header(data)
    assert (parsed.base_offset, parsed.partition_leader_epoch) == (1000, 7)
    assert (parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (9, 2, 5)
    assert data[kafka.ATTRIBUTES_OFFSET : kafka.HEADER_SIZE] == source[17:57]


@pytest.mark.parametrize("reader", READERS)
def test_log_append_time_survives_both_ways(reader):
    source = bytearray(tidelog.encode_batch([(b"k", b"v", [], 5), (None, b"w", [], 6)]))
    tidelog.set_log_append_time(source, 0, 123_456)
    data, _ = tidelog_to_kafka(bytes(source))
    batch = reader(data)
    assert batch.timestamp_type == 1
    assert [r.timestamp for r in batch] == [123_456, 123_456]
    back, _ = kafka_to_tidelog(data)
    assert back == bytes(source)


def test_librdkafka_raw_snappy_is_accepted():
    """librdkafka writes one raw snappy block, not xerial frames."""
    xerial = _build(KpBuilder, Compression.SNAPPY)
    raw_records = kafka.encode_records(
        [(i, ts - RECORDS[0][3], k, v, tuple(h)) for i, (k, v, h, ts) in enumerate(RECORDS)]
    )
    block = bytes(cramjam.snappy.compress_raw(raw_records))
    data = kafka.assemble_batch(block, xerial[kafka.ATTRIBUTES_OFFSET : kafka.HEADER_SIZE])
    converted, _ = kafka_to_tidelog(data)
    assert [tuple(r) for r in tidelog.decode_records(converted)] == _expected()


def test_back_to_back_batches_convert_in_order():
    first = _build(AioBuilder, Compression.LZ4, RECORDS[:2])
    second = _build(KpBuilder, Compression.ZSTD, RECORDS[2:])
    converted = kafka_to_tidelog_all(first + second)
    offsets = [r.offset for r in tidelog.iter_records(converted)]
    assert offsets == [0, 1, 0, 1]  # producers send base offset 0; the broker assigns
    again = tidelog_to_kafka_all(converted)
    first_size = kafka.read_batch_header(again).size
    assert _read_kafka(KpReader, again[:first_size]) == _expected(RECORDS[:2])
    assert _read_kafka(KpReader, again[first_size:]) == _expected(RECORDS[2:])


def test_crc_covers_the_same_bytes_in_both_layouts():
    """docs/kafka.md "Record batches": moving a Kafka batch's header into Tidelog's keeps its
    CRC."""
    data = _build(KpBuilder, Compression.GZIP)
    header = kafka.read_batch_header(data)
    moved = data[:8] + struct.pack(">i", header.batch_length - 4) + b"\x01" + data[17:]
    assert moved[13:17] == data[17:21]
    assert tidelog.check_crc(moved).crc == header.crc == crc32c.crc32c(data[21:])


# --- malformed input: one error type, Kafka's code ---------------------------------------


def _flip(data: bytes, pos: int) -> bytes:
    return data[:pos] + bytes([data[pos] ^ 0x01]) + data[pos + 1 :]


@pytest.mark.parametrize("codec", CODECS)
def test_bad_crc_is_corrupt_message(codec):
    data = _build(KpBuilder, codec)
    with pytest.raises(KafkaCodecError, match="CRC") as info:
        kafka_to_tidelog(_flip(data, len(data) - 1))
    assert info.value.code == 2


@pytest.mark.parametrize("cut", [0, 10, 60, 61, 100])
def test_truncated_batch_is_corrupt_message(cut):
    data = _build(KpBuilder, Compression.NONE)
    with pytest.raises(KafkaCodecError) as info:
        kafka_to_tidelog(data[:cut])
    assert info.value.code == 2


def _with_header_fields(data: bytes, **fields: int) -> bytes:
    header = kafka.read_batch_header(data)
    values = {**{f: getattr(header, f) for f in header.__dataclass_fields__}, **fields}
    out = bytearray(data)
    kafka.HEADER.pack_into(out, 0, *(values[f] for f in header.__dataclass_fields__))
    struct.pack_into(">I", out, kafka.CRC_OFFSET, crc32c.crc32c(bytes(out[21:])))
    return bytes(out)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"record_count": 5}, "record"),
        ({"record_count": 2**31 - 1}, "record"),
        ({"record_count": 3}, "follow"),
        ({"attributes": 0x07}, "codec 7"),
    ],
)
def test_lying_headers_are_refused(fields, match):
    data = _with_header_fields(_build(KpBuilder, Compression.NONE), **fields)
    with pytest.raises(KafkaCodecError, match=match) as info:
        kafka_to_tidelog(data)
    assert info.value.code in (2, 87)


def test_bad_magic_and_absurd_length():
    data = _build(KpBuilder, Compression.NONE)
    with pytest.raises(KafkaCodecError, match="magic"):
        kafka_to_tidelog(data[:16] + b"\x01" + data[17:])
    with pytest.raises(KafkaCodecError, match="batch_length"):
        kafka_to_tidelog(data[:8] + struct.pack(">i", 2**31 - 1) + data[12:])


@pytest.mark.parametrize("codec", [Compression.GZIP, Compression.SNAPPY, Compression.LZ4])
def test_decompression_is_capped(codec):
    big = [(None, b"\x00" * 200_000, [], 1)]
    data = _build(KpBuilder, codec, big)
    with pytest.raises(KafkaCodecError, match=r"cap|inflate") as info:
        kafka_to_tidelog(data, max_decompressed=50_000)
    assert info.value.code == 2


def test_malformed_xerial_block_is_corrupt_message():
    data = _build(KpBuilder, Compression.SNAPPY)
    records = data[kafka.HEADER_SIZE :]
    broken = records[:16] + struct.pack(">i", 10**6) + records[20:]
    rebuilt = kafka.assemble_batch(broken, data[kafka.ATTRIBUTES_OFFSET : kafka.HEADER_SIZE])
    with pytest.raises(KafkaCodecError, match="xerial") as info:
        kafka_to_tidelog(rebuilt)
    assert info.value.code == 2


def test_tidelog_corruption_is_reported_with_kafka_code():
    source = tidelog.encode_batch([(b"k", b"v", [], 1)])
    with pytest.raises(KafkaCodecError) as info:
        tidelog_to_kafka(_flip(source, len(source) - 1))
    assert info.value.code == 2


# --- properties ----------------------------------------------------------------------------

blobs = st.none() | st.binary(max_size=64)
headers = st.lists(st.tuples(st.text(max_size=8), blobs), max_size=3)
record_rows = st.lists(
    st.tuples(blobs, blobs, headers, st.integers(-(2**40), 2**42)), min_size=1, max_size=20
)


@settings(max_examples=150, deadline=None)
@given(rows=record_rows, codec=st.sampled_from(list(Compression)), append_time=st.booleans())
def test_round_trip_tidelog_kafka_tidelog_is_byte_identical(rows, codec, append_time):
    source = bytearray(tidelog.encode_batch(rows, compression=codec, base_offset=77))
    if append_time:
        tidelog.set_log_append_time(source, 0, 1_234)
    data, _ = tidelog_to_kafka(bytes(source))
    assert _read_kafka(AioReader, data) == [
        (77 + i, 1_234 if append_time else ts, k, v, tuple(map(tuple, h)))
        for i, (k, v, h, ts) in enumerate(rows)
    ]
    back, _ = kafka_to_tidelog(data)
    assert back == bytes(source)


@settings(max_examples=100, deadline=None)
@given(
    rows=record_rows
    | st.lists(st.tuples(blobs, blobs, headers, st.integers(0, 2**41)), min_size=96, max_size=160),
    codec=st.sampled_from(list(Compression)),
)
def test_round_trip_from_client_batches(rows, codec):
    """Small batches decode per record, 96 records and more column-wise."""
    data = _build(AioBuilder, codec, rows)
    converted, _ = kafka_to_tidelog(data)
    assert [tuple(r) for r in tidelog.decode_records(converted)] == _expected(rows)
    again, _ = tidelog_to_kafka(converted)
    assert _read_kafka(KpReader, again) == _expected(rows)


# --- produce checks for a Kafka batch stored as it is ----------------------------------------


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("builder", BUILDERS)
def test_client_batches_pass_the_produce_checks(builder, codec):
    data = _build(builder, codec, producer=(7, 0, 0))
    header = validate_batch(data)
    assert (header.record_count, header.producer_id, header.compression) == (4, 7, codec)


@pytest.mark.parametrize(
    ("fields", "code", "match"),
    [
        ({"base_offset": 5}, 87, "base_offset"),
        ({"attributes": 0x40}, 87, "delete-horizon"),
        ({"last_offset_delta": 2}, 2, "offset deltas"),
        ({"max_timestamp": 1}, 2, "max_timestamp"),
    ],
)
def test_produce_checks_refuse(fields, code, match):
    data = _with_header_fields(_build(KpBuilder, Compression.NONE), **fields)
    with pytest.raises(KafkaCodecError, match=match) as info:
        validate_batch(data)
    assert info.value.code == code


def test_produce_checks_refuse_gapped_offset_deltas():
    records = kafka.encode_records([(0, 0, None, b"a", ()), (2, 0, None, b"b", ())])
    data = kafka.assemble_batch(
        records, struct.pack(">hiqqqhii", 0, 1, 5, 5, -1, -1, -1, 2), base_offset=0
    )
    with pytest.raises(KafkaCodecError, match="offset deltas"):
        validate_batch(data)


def _reference_kafka_to_tidelog(data: bytes) -> bytes:
    """kafka_to_tidelog as it was before the C transcode: decode the records to tuples
    in Python (validate.decode_batch), then let msgspec encode them."""
    header, records = decode_batch(data)
    payload = compress(Compression(header.compression), tidelog.encode_payload(records))
    fields = data[kafka.ATTRIBUTES_OFFSET : kafka.HEADER_SIZE]
    out = bytearray(struct.pack(">qiB", header.base_offset, 0, tidelog.MAGIC) + bytes(4) + fields)
    out += payload
    out[8:12] = struct.pack(">i", len(out) - tidelog.LOG_OVERHEAD)
    out[tidelog.CRC_OFFSET : tidelog.CRC_OFFSET + 4] = struct.pack(
        ">I", crc32c.crc32c(bytes(out[tidelog.CRC_START :]))
    )
    return bytes(out)


def _outcome(convert, data: bytes):
    try:
        return convert(data)
    except KafkaCodecError as exc:
        return exc.code


@settings(max_examples=400, deadline=None)
@given(
    rows=record_rows,
    where=st.integers(0, 10**6),
    byte=st.integers(0, 255),
    count_change=st.sampled_from([0, 0, -1, 1]),
)
def test_kafka_to_tidelog_matches_the_tuple_path_on_damaged_records(
    rows, where, byte, count_change
):
    """Records bytes changed (CRC recomputed, so the damage reaches the walk) and record
    counts off by one: the C transcode and the old tuple path agree, output or error."""
    batch = bytearray(_build(AioBuilder, Compression.NONE, rows))
    if count_change:
        count = struct.unpack_from(">i", batch, kafka.HEADER_SIZE - 4)[0] + count_change
        struct.pack_into(">i", batch, kafka.HEADER_SIZE - 4, count)
    at = kafka.HEADER_SIZE + where % (len(batch) - kafka.HEADER_SIZE)
    batch[at] = byte
    struct.pack_into(">I", batch, kafka.CRC_OFFSET, crc32c.crc32c(bytes(batch[kafka.CRC_START :])))
    data = bytes(batch)
    new = _outcome(lambda d: kafka_to_tidelog(d)[0], data)
    assert new == _outcome(_reference_kafka_to_tidelog, data)


def test_a_transactional_batch_converts_to_a_plain_one_and_markers_are_left_out():
    from protocol.batch import MAGIC, iter_records, read_header
    from protocol.kafka.control import marker_batch
    from protocol.layouts import to_layout

    data = _with_header_fields(_build(KpBuilder, Compression.NONE), attributes=0x10)
    converted, _ = kafka_to_tidelog(data)
    assert read_header(converted).attributes == 0
    assert [r.value for r in iter_records(converted)] == [r[1] for r in RECORDS]
    marker = marker_batch(1, 0, commit=True, coordinator_epoch=0, timestamp=1_700_000_000_000)
    assert to_layout(data + marker, MAGIC) == converted
