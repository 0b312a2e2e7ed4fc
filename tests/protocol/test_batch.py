"""The record-batch codec against docs/protocol.md §3, good inputs and hostile ones."""

from __future__ import annotations

import struct
import zlib

import crc32c
import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol import batch as b
from protocol.compression import Compression, compress
from protocol.errors import CorruptMessage, InvalidRecord, MessageTooLarge, TidelogError

RECORDS = [
    (b"key-0", b"value-0", [("trace", b"abc")], 1_700_000_000_000),
    (None, b"unkeyed", None, 1_700_000_000_005),
    (b"key-2", None, [("a", None), ("b", b"")], 1_699_999_999_990),
]


def raw_batch(
    payload_records: object,
    *,
    record_count: int | None = None,
    attributes: int = 0,
    base_offset: int = 0,
    last_offset_delta: int | None = None,
    base_timestamp: int = 1000,
    max_timestamp: int | None = None,
    magic: int = 1,
    payload: bytes | None = None,
) -> bytes:
    """Build a batch by hand, independently of encode_batch, to test the reader."""
    if payload is None:
        payload = msgpack.packb(payload_records, use_bin_type=True)
    items = payload_records if isinstance(payload_records, list) else []
    if record_count is None:
        record_count = len(items)
    if last_offset_delta is None:
        last_offset_delta = max(record_count - 1, 0)
    if max_timestamp is None:
        timestamps = [r[1] for r in items if isinstance(r, list) and type(r[1]) is int]
        max_timestamp = base_timestamp + max(timestamps, default=0)
    body = struct.pack(
        ">hiqqqhii",
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        -1,
        -1,
        -1,
        record_count,
    )
    body += payload
    crc = crc32c.crc32c(body)
    return struct.pack(">qibI", base_offset, len(body) + 5, magic, crc) + body


def good_records(n: int = 3) -> list[list]:
    return [[i, i * 2, b"k%d" % i, b"v%d" % i, []] for i in range(n)]


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_round_trip_every_codec(codec: Compression) -> None:
    data = b.encode_batch(RECORDS, compression=codec)
    header = b.validate_batch(data, producer=True)
    assert header.compression == codec
    assert header.record_count == 3
    assert header.size == len(data)
    assert header.base_timestamp == RECORDS[0][3]
    assert header.max_timestamp == max(r[3] for r in RECORDS)
    records = b.decode_records(data)
    assert [r.key for r in records] == [r[0] for r in RECORDS]
    assert [r.value for r in records] == [r[1] for r in RECORDS]
    assert [r.timestamp for r in records] == [r[3] for r in RECORDS]
    assert [r.offset for r in records] == [0, 1, 2]
    assert records[0].headers == (("trace", b"abc"),)
    assert records[2].headers == (("a", None), ("b", b""))


def test_header_layout_is_byte_exact() -> None:
    data = b.encode_batch([(b"k", b"v", None, 42)])
    assert b.HEADER_SIZE == 57
    (base_offset, batch_length, magic, crc, attributes) = struct.unpack_from(">qibIh", data)
    assert (base_offset, magic, attributes) == (0, 1, 0)
    assert batch_length == len(data) - 12
    assert crc == crc32c.crc32c(data[17:])
    assert struct.unpack_from(">qq", data, 23) == (42, 42)
    assert struct.unpack_from(">qhii", data, 39) == (-1, -1, -1, 1)
    assert msgpack.unpackb(data[57:]) == [[0, 0, b"k", b"v", []]]


def test_hand_built_batch_is_accepted() -> None:
    data = raw_batch(good_records())
    header = b.validate_batch(data, producer=True)
    assert header.record_count == 3
    assert [r.offset for r in b.decode_records(data)] == [0, 1, 2]


def test_set_base_offset_keeps_crc_valid() -> None:
    data = bytearray(b.encode_batch(RECORDS))
    b.set_base_offset(data, 0, 1234)
    header = b.validate_batch(data)
    assert header.base_offset == 1234
    assert header.last_offset == 1236
    assert header.next_offset == 1237
    assert [r.offset for r in b.decode_records(data)] == [1234, 1235, 1236]


def test_set_log_append_time_rewrites_type_and_crc() -> None:
    data = bytearray(b.encode_batch(RECORDS))
    assert b.validate_batch(data).timestamp_type is b.TimestampType.CREATE_TIME
    b.set_log_append_time(data, 0, 9_999)
    header = b.validate_batch(data)
    assert header.timestamp_type is b.TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == 9_999
    assert [r.timestamp for r in b.decode_records(data)] == [9_999] * len(RECORDS)


def test_iter_headers_over_back_to_back_batches() -> None:
    first = bytearray(b.encode_batch(RECORDS))
    second = bytearray(b.encode_batch(RECORDS[:1], compression=Compression.LZ4))
    b.set_base_offset(second, 0, 3)
    joined = bytes(first + second)
    found = [(pos, h.base_offset) for pos, h in b.iter_headers(joined)]
    assert found == [(0, 0), (len(first), 3)]
    assert [r.offset for r in b.iter_records(joined)] == [0, 1, 2, 3]
    with pytest.raises(CorruptMessage, match="truncated"):
        list(b.iter_headers(joined[:-1]))
    partial = [h.base_offset for _, h in b.iter_headers(joined[:-1], allow_partial=True)]
    assert partial == [0]
    assert [h.base_offset for _, h in b.iter_headers(joined[: len(first) + 5], allow_partial=True)]


def test_build_batch_keeps_offset_gaps_and_fields() -> None:
    data = b.build_batch(
        [(0, 100, b"a", b"1", []), (4, 90, b"b", None, [("h", b"x")])],
        base_offset=10,
        base_timestamp=50,
        attributes=int(Compression.ZSTD) | b.DELETE_HORIZON_MASK,
        last_offset_delta=6,
        max_timestamp=100,
        producer_id=7,
        producer_epoch=1,
        base_sequence=3,
    )
    header = b.validate_batch(data)
    assert (header.base_offset, header.last_offset_delta, header.record_count) == (10, 6, 2)
    assert header.has_delete_horizon and header.compression == Compression.ZSTD
    assert (header.producer_id, header.producer_epoch, header.base_sequence) == (7, 1, 3)
    records = b.decode_records(data)
    assert [(r.offset, r.timestamp) for r in records] == [(10, 100), (14, 90)]
    with pytest.raises(InvalidRecord):
        b.validate_batch(data, producer=True)


# ---- corrupt and hostile inputs -------------------------------------------------------


def flip(data: bytes, index: int) -> bytes:
    out = bytearray(data)
    out[index] ^= 0xFF
    return bytes(out)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        pytest.param(lambda d: flip(d, 60), "CRC", id="payload-bit-flip"),
        pytest.param(lambda d: flip(d, 13), "CRC", id="crc-field"),
        pytest.param(lambda d: d[:-1], "truncated", id="truncated-payload"),
        pytest.param(lambda d: d[:30], "needs 57 bytes", id="truncated-header"),
        pytest.param(lambda d: d[:12] + b"\x02" + d[13:], "magic", id="bad-magic"),
        pytest.param(
            lambda d: d[:8] + struct.pack(">i", 10) + d[12:], "batch_length", id="short-length"
        ),
    ],
)
def test_corrupt_batches_raise_corrupt_message(mutate, message: str) -> None:
    data = b.encode_batch(RECORDS)
    with pytest.raises(CorruptMessage, match=message):
        b.validate_batch(mutate(data))


@pytest.mark.parametrize(
    ("records", "kwargs", "message"),
    [
        pytest.param(good_records(), {"record_count": 4}, "header says 4", id="count-mismatch"),
        pytest.param([[0, 0, b"k", b"v"]], {}, "5 items", id="four-items"),
        pytest.param([[0, 0, b"k", b"v", [], 1]], {}, "5 items", id="six-items"),
        pytest.param([b"abcde"], {}, "5 items", id="record-not-array"),
        pytest.param([[0, 0, "str-key", b"v", []]], {}, "bin or nil", id="str-key"),
        pytest.param([[0, 0, b"k", 5, []]], {}, "bin or nil", id="int-value"),
        pytest.param([[True, 0, b"k", b"v", []]], {}, "integers", id="bool-delta"),
        pytest.param([[0, 1.5, b"k", b"v", []]], {}, "integers", id="float-ts"),
        pytest.param([[0, 0, b"k", b"v", {}]], {}, "headers must be arrays", id="map-headers"),
        pytest.param([[0, 0, b"k", b"v", [["h"]]]], {}, "pair", id="header-one-item"),
        pytest.param([[0, 0, b"k", b"v", [[b"h", b"v"]]]], {}, "header keys", id="bin-hdr-key"),
        pytest.param(
            [[0, 0, b"k", b"v", []], [2, 0, b"k", b"v", []]],
            {"last_offset_delta": 1},
            "0, 1, 2",
            id="delta-gap",
        ),
        pytest.param(
            [[1, 0, b"k", b"v", []], [0, 0, b"k", b"v", []]], {}, "0, 1, 2", id="delta-order"
        ),
        pytest.param(good_records(2), {"max_timestamp": 5}, "max_timestamp", id="max-ts-lie"),
        pytest.param({"not": "array"}, {"record_count": 1}, "not an array", id="map-payload"),
    ],
)
def test_malformed_records_are_corrupt(records, kwargs: dict, message: str) -> None:
    with pytest.raises(CorruptMessage, match=message):
        b.validate_batch(raw_batch(records, **kwargs), producer=True)


def test_produce_rules_give_invalid_record() -> None:
    with pytest.raises(InvalidRecord, match="base_offset 0"):
        b.validate_batch(raw_batch(good_records(), base_offset=5), producer=True)
    with pytest.raises(InvalidRecord, match="bit 6"):
        b.validate_batch(raw_batch(good_records(), attributes=b.DELETE_HORIZON_MASK), producer=True)
    with pytest.raises(CorruptMessage, match="at least one record"):
        b.validate_batch(raw_batch([]), producer=True)


def test_reserved_attribute_bits_and_unknown_codec() -> None:
    with pytest.raises(CorruptMessage, match="reserved"):
        b.validate_batch(raw_batch(good_records(), attributes=0x10))
    with pytest.raises(CorruptMessage, match="unknown compression"):
        b.validate_batch(raw_batch(good_records(), attributes=5))


def test_message_too_large() -> None:
    data = b.encode_batch(RECORDS)
    with pytest.raises(MessageTooLarge):
        b.validate_batch(data, max_batch_bytes=len(data) - 1)
    assert b.validate_batch(data, max_batch_bytes=len(data)).size == len(data)


def test_trailing_bytes_after_payload_are_corrupt() -> None:
    payload = msgpack.packb(good_records(1), use_bin_type=True) + b"\xc0"
    with pytest.raises(CorruptMessage, match="msgpack") as info:
        b.validate_batch(raw_batch(good_records(1), payload=payload))
    assert info.value.__cause__ is not None


def test_nesting_bomb_is_corrupt() -> None:
    payload = b"\x91" * 100_000 + b"\xc0"
    with pytest.raises(CorruptMessage):
        b.validate_batch(raw_batch([], record_count=1, payload=payload))


@pytest.mark.parametrize("codec", [c for c in Compression if c], ids=lambda c: c.name.lower())
def test_decompression_bomb_is_capped(codec: Compression) -> None:
    inflated = msgpack.packb([[0, 0, None, b"\0" * (4 << 20), []]], use_bin_type=True)
    data = raw_batch(
        [[0, 0, None, b"", []]], payload=compress(codec, inflated), attributes=int(codec)
    )
    with pytest.raises(CorruptMessage, match=r"cap|beyond|declares"):
        b.validate_batch(data, max_decompressed=1 << 20)
    assert b.validate_batch(data, max_decompressed=8 << 20).record_count == 1


@pytest.mark.parametrize("codec", [c for c in Compression if c], ids=lambda c: c.name.lower())
def test_garbage_compressed_payload_is_corrupt(codec: Compression) -> None:
    data = raw_batch([[0, 0, None, b"", []]], payload=b"\x00garbage\xff" * 3, attributes=codec)
    with pytest.raises(CorruptMessage):
        b.validate_batch(data)


def test_truncated_gzip_is_corrupt() -> None:
    whole = compress(Compression.GZIP, msgpack.packb(good_records(50), use_bin_type=True))
    data = raw_batch(good_records(50), payload=whole[:-10], attributes=int(Compression.GZIP))
    with pytest.raises(CorruptMessage):
        b.validate_batch(data)
    assert zlib.decompress(whole, 31)


def test_encode_requires_records_and_timestamps() -> None:
    with pytest.raises(ValueError):
        b.encode_batch([])
    with pytest.raises(ValueError, match="now_ms"):
        b.encode_batch([(b"k", b"v", None, None)])
    stamped = b.decode_records(b.encode_batch([(b"k", b"v", None, None)], now_ms=77))
    assert stamped[0].timestamp == 77


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_fuzzed_bytes_only_raise_project_errors(data: bytes) -> None:
    try:
        b.validate_batch(data)
    except TidelogError:
        pass


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_fuzzed_mutations_of_a_valid_batch(data: st.DataObject) -> None:
    codec = data.draw(st.sampled_from(list(Compression)))
    original = bytearray(b.encode_batch(RECORDS, compression=codec))
    index = data.draw(st.integers(0, len(original) - 1))
    original[index] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(original)))
    try:
        b.validate_batch(bytes(original[:cut]))
        b.decode_records(bytes(original[:cut]))
    except TidelogError:
        pass


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.none() | st.binary(max_size=20),
            st.none() | st.binary(max_size=50),
            st.lists(st.tuples(st.text(max_size=5), st.none() | st.binary(max_size=5)), max_size=3),
            st.integers(-(2**40), 2**40),
        ),
        min_size=1,
        max_size=30,
    ),
    st.sampled_from(list(Compression)),
)
def test_any_encoded_batch_validates_and_round_trips(records, codec: Compression) -> None:
    data = b.encode_batch(records, compression=codec)
    header = b.validate_batch(data, producer=True)
    assert header.max_timestamp == max(r[3] for r in records)
    decoded = b.decode_records(data)
    assert [(r.key, r.value, r.timestamp) for r in decoded] == [
        (k, v, ts) for k, v, _, ts in records
    ]
    assert [list(r.headers) for r in decoded] == [[tuple(h) for h in hs] for _, _, hs, _ in records]


def _is_blob(value: object) -> bool:
    return value is None or type(value) is bytes


def _well_shaped(record: object) -> bool:
    """docs/protocol.md §3's record shape, written plainly as the reference."""
    if type(record) is not list or len(record) != 5:
        return False
    delta, ts_delta, key, value, headers = record
    if type(delta) is not int or type(ts_delta) is not int:
        return False
    if not (_is_blob(key) and _is_blob(value)) or type(headers) is not list:
        return False
    return all(
        type(h) is list and len(h) == 2 and type(h[0]) is str and _is_blob(h[1]) for h in headers
    )


_FIELD = st.one_of(
    st.integers(-5, 5),
    st.booleans(),
    st.none(),
    st.binary(max_size=4),
    st.text(max_size=3),
    st.floats(allow_nan=False, width=32),
)
_HEADER = st.one_of(
    st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=3))).map(list),
    st.lists(_FIELD, max_size=3),
)
_RECORD = st.one_of(
    st.tuples(
        st.integers(0, 3),
        st.integers(-3, 3),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.one_of(st.none(), st.binary(max_size=4)),
        st.lists(_HEADER, max_size=2),
    ).map(list),
    st.lists(_FIELD, min_size=4, max_size=6),
    _FIELD,
)


@settings(max_examples=300, deadline=None)
@given(st.lists(_RECORD, min_size=1, max_size=4))
def test_typed_decoder_accepts_exactly_the_well_shaped_records(records: list) -> None:
    """The msgspec fast path and the reference shape rule agree on every payload."""
    data = raw_batch(records, record_count=len(records))
    if all(map(_well_shaped, records)):
        _, decoded = b.decode_payload(data)
        assert decoded == tuple((d, t, k, v, tuple(map(tuple, h))) for d, t, k, v, h in records)
    else:
        with pytest.raises(CorruptMessage) as info:
            b.decode_payload(data)
        assert info.value.__cause__ is not None


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2**40),
            st.integers(-(2**40), 2**40),
            st.one_of(st.none(), st.binary(max_size=300)),
            st.one_of(st.none(), st.binary(max_size=70_000)),
            st.lists(st.tuples(st.text(max_size=40), st.none() | st.binary(max_size=40))),
        ),
        max_size=20,
    )
)
def test_payload_encoding_is_msgpacks_byte_for_byte(rows: list) -> None:
    assert b.encode_payload(rows) == msgpack.packb(rows, use_bin_type=True)
