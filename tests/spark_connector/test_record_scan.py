"""The vectorised record scan against the spec decoder (protocol.batch.decode_records).

Every test compares with rows decoded the plain way, so a wrong boundary, length, null
or timestamp shows up as a differing row. Tests also check which path was taken: the
guess (uniform batches), the exact msgspec lengths (varied batches), or the decoding
fallback (None), so that the fast paths are really exercised.
"""

from __future__ import annotations

import struct

import crc32c
import msgpack
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import (
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TimestampType,
    build_batch,
    decode_records,
    encode_batch,
    iter_headers,
    set_base_offset,
)
from protocol.compression import Compression
from protocol.errors import CorruptMessage
from spark_connector.arrow_convert import records_to_arrow
from spark_connector.record_scan import Payload, array_header, binary_column, scan_records

COMPRESSIONS = [Compression.NONE, Compression.GZIP, Compression.LZ4, Compression.ZSTD]


def stored(base_offset: int, records: list[tuple], **kw: object) -> bytes:
    buf = bytearray(encode_batch(records, **kw))
    set_base_offset(buf, 0, base_offset)
    return bytes(buf)


def with_payload(payload: bytes, *, count: int, base_offset: int = 0) -> bytes:
    """A batch around a hand-made msgpack payload (dense offsets, CreateTime)."""
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    HEADER.pack_into(
        out, 0, base_offset, size - LOG_OVERHEAD, 1, 0, 0, count - 1, 1000, 1000, -1, -1, -1, count
    )
    out[HEADER_SIZE:] = payload
    struct.pack_into(">I", out, 13, crc32c.crc32c(bytes(out[17:])))
    return bytes(out)


def payloads_of(buf: bytes) -> list[Payload]:
    """Where the records of each (uncompressed) batch lie, as the converter computes it."""
    out = []
    for pos, header in iter_headers(buf):
        shape = array_header(buf, pos + HEADER_SIZE)
        assert shape is not None
        out.append(
            Payload(
                array_pos=pos + HEADER_SIZE,
                start=pos + HEADER_SIZE + shape[1],
                end=pos + header.size,
                count=header.record_count,
                dense=header.record_count == header.last_offset_delta + 1,
            )
        )
    return out


def expected_rows(
    buf: bytes, topic: str, partition: int, start: int, end: int, include_headers: bool
) -> list[dict]:
    rows = []
    for pos, header in iter_headers(buf, allow_partial=True):
        ts_type = int(header.timestamp_type)
        for r in decode_records(buf, pos):
            if start <= r.offset < end:
                row = {
                    "key": r.key,
                    "value": r.value,
                    "topic": topic,
                    "partition": partition,
                    "offset": r.offset,
                    "timestamp": r.timestamp * 1000,
                    "timestampType": ts_type,
                }
                if include_headers:
                    row["headers"] = (
                        [{"key": k, "value": v} for k, v in r.headers] if r.headers else None
                    )
                rows.append(row)
    return rows


def converted_rows(buf: bytes, start: int, end: int, include_headers: bool) -> list[dict]:
    out = records_to_arrow(
        buf, topic="t", partition=3, start=start, end=end, include_headers=include_headers
    )
    if out.batch is None:
        return []
    batch = out.batch.set_column(5, "timestamp", out.batch.column(5).cast(pa.int64()))
    return batch.to_pylist()


def assert_same_rows(buf: bytes, start: int, end: int, include_headers: bool) -> None:
    got = converted_rows(buf, start, end, include_headers)
    assert got == expected_rows(buf, "t", 3, start, end, include_headers)


def uniform_log(batches: int, per_batch: int, value_bytes: int, key: bytes | None) -> bytes:
    return b"".join(
        stored(
            b * per_batch,
            [
                (key, bytes([i % 251]) * value_bytes, [], 1_700_000_000_000)
                for i in range(per_batch)
            ],
        )
        for b in range(batches)
    )


def test_uniform_batches_are_located_by_the_guess_and_match_the_decoder() -> None:
    buf = uniform_log(3, 600, 100, None)  # offset deltas of 1, 2 and 3 bytes
    fields = scan_records(buf, payloads_of(buf), empty_headers=False)
    assert fields is not None and len(fields) == 1800 and fields.exact_batches == 0
    assert fields.value_length.tolist() == [100] * 1800
    assert fields.key_null.all()
    for include_headers in (False, True):
        assert_same_rows(buf, 0, 1800, include_headers)
    assert_same_rows(buf, 250, 1300, False)  # cut inside the first and the last batch


def test_a_batch_past_65536_records_has_five_byte_offset_deltas() -> None:
    buf = uniform_log(1, 70_000, 1, b"k")
    fields = scan_records(buf, payloads_of(buf), empty_headers=False)
    assert fields is not None and fields.offset_deltas[-1] == 69_999
    assert fields.exact_batches == 0
    assert_same_rows(buf, 65_530, 65_540, False)


def test_varied_records_take_exact_lengths_and_match_the_decoder() -> None:
    records = [
        (
            None if i % 7 == 0 else b"k" * (i % 5),
            None if i % 11 == 0 else b"v" * (i * 37 % 700),
            [],
            ts,
        )
        for i, ts in enumerate([5, 4_000_000_000_000, -3, 70_000, 1 << 40, 0] * 60)
    ]
    buf = stored(10, records[:200]) + stored(210, records[200:])
    fields = scan_records(buf, payloads_of(buf), empty_headers=False)
    assert fields is not None and len(fields) == len(records) and fields.exact_batches == 2
    assert_same_rows(buf, 0, 1000, False)
    assert_same_rows(buf, 37, 301, True)


def test_headers_are_located_but_only_decoded_when_wanted() -> None:
    buf = stored(0, [(b"k", b"v", [("h", b"1")], 1), (None, b"w", [], 2), (b"x", None, [], 3)])
    assert scan_records(buf, payloads_of(buf), empty_headers=False) is not None
    assert scan_records(buf, payloads_of(buf), empty_headers=True) is None
    assert_same_rows(buf, 0, 3, False)
    assert_same_rows(buf, 0, 3, True)


def test_compacted_batches_decode_their_offset_deltas() -> None:
    compacted = build_batch(
        [(1, 11, b"a", b"x", []), (4, 14, b"b", b"y", []), (200, 15, None, b"z", [])],
        base_offset=10,
        base_timestamp=10,
        attributes=0,
    )
    fields = scan_records(compacted, payloads_of(compacted), empty_headers=False)
    assert fields is not None and fields.offset_deltas.tolist() == [1, 4, 200]
    assert_same_rows(compacted, 0, 1000, False)
    assert_same_rows(compacted, 12, 211, True)


def test_non_minimal_int_encodings_are_read_by_width() -> None:
    # offset delta as uint16 and timestamp delta as int64 / int8: legal msgpack.
    records = [
        b"\x95\xcd\x00\x00\xd3" + struct.pack(">q", -5) + b"\xc0\xc4\x02ab\x90",
        b"\x95\xcd\x00\x01\xd0\xfe\xc4\x01k\xc5\x00\x03abc\x90",
    ]
    buf = with_payload(b"\x92" + b"".join(records), count=2, base_offset=7)
    assert scan_records(buf, payloads_of(buf), empty_headers=True) is not None
    assert converted_rows(buf, 0, 100, False) == [
        {"key": None, "value": b"ab", "topic": "t", "partition": 3, "offset": 7,
         "timestamp": 995_000, "timestampType": 0},
        {"key": b"k", "value": b"abc", "topic": "t", "partition": 3, "offset": 8,
         "timestamp": 998_000, "timestampType": 0},
    ]  # fmt: skip


def test_records_outside_the_grammar_fall_back_to_the_decoder_and_its_error() -> None:
    str_key = with_payload(msgpack.packb([[0, 0, "text", b"v", []]]), count=1)
    assert scan_records(str_key, payloads_of(str_key), empty_headers=False) is None
    with pytest.raises(CorruptMessage):
        records_to_arrow(str_key, topic="t", partition=0, start=0, end=9, include_headers=False)
    truncated = with_payload(b"\x91\x95\x00\x00\xc0\xc4\x05ab", count=1)
    assert scan_records(truncated, payloads_of(truncated), empty_headers=False) is None
    with pytest.raises(CorruptMessage):
        records_to_arrow(truncated, topic="t", partition=0, start=0, end=9, include_headers=False)


def test_log_append_time_and_compression_go_through_the_scan() -> None:
    buf = stored(0, [(b"k", b"a" * 50, [], 1)] * 300, compression=Compression.ZSTD) + stored(
        300, [(None, b"b", [], 2)] * 5, timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    assert_same_rows(buf, 0, 305, False)
    assert_same_rows(buf, 299, 302, True)


def test_binary_column_copies_ranges_with_nulls_and_empties() -> None:
    import numpy as np

    buffer = pa.py_buffer(b"..abc.de..f")
    col = binary_column(
        buffer,
        np.array([2, 6, 8, 10]),
        np.array([3, 2, 0, 1]),
        np.array([False, False, True, False]),
    )
    assert col.to_pylist() == [b"abc", b"de", None, b"f"]
    assert col.type == pa.binary()
    assert binary_column(buffer, np.array([1]), np.array([0]), np.array([True])).null_count == 1


# -- properties: any valid log converts to exactly the decoder's rows -----------------------

blobs = st.one_of(st.none(), st.binary(max_size=300))
headers = st.lists(st.tuples(st.text(max_size=3), st.one_of(st.none(), st.binary(max_size=4))))


@st.composite
def batches(draw: st.DrawFn) -> tuple[list[tuple], dict]:
    """Either uniform records (the guess path) or freely varied ones (the exact path)."""
    count = draw(st.integers(1, 300))
    base_ts = draw(st.integers(0, 2_000_000_000_000))
    if draw(st.booleans()):
        key = draw(st.one_of(st.none(), st.binary(max_size=20)))
        value_bytes = draw(st.integers(0, 300))
        ts_spread = draw(st.sampled_from([1, 100, 200, 60_000]))
        records = [
            (key, bytes([i % 256]) * value_bytes, [], base_ts + i % ts_spread) for i in range(count)
        ]
    else:
        records = draw(
            st.lists(
                st.tuples(blobs, blobs, headers, st.integers(base_ts - 10**6, base_ts + 10**9)),
                min_size=count,
                max_size=count,
            )
        )
    kw = {
        "compression": draw(st.sampled_from(COMPRESSIONS)),
        "timestamp_type": draw(st.sampled_from(list(TimestampType))),
    }
    return records, kw


@settings(max_examples=60, deadline=None)
@given(
    log=st.lists(batches(), min_size=1, max_size=4),
    cut=st.tuples(st.integers(0, 1300), st.integers(0, 1300)),
    include_headers=st.booleans(),
)
def test_any_log_converts_to_the_decoders_rows(
    log: list[tuple[list[tuple], dict]], cut: tuple[int, int], include_headers: bool
) -> None:
    parts, base = [], 0
    for records, kw in log:
        parts.append(stored(base, records, **kw))
        base += len(records)
    buf = b"".join(parts)
    assert_same_rows(buf, min(cut), max(cut), include_headers)
    assert_same_rows(buf, 0, base, include_headers)


@settings(max_examples=40, deadline=None)
@given(log=st.lists(batches(), min_size=1, max_size=3))
def test_uncompressed_logs_never_need_the_decoder(log: list[tuple[list[tuple], dict]]) -> None:
    parts, base = [], 0
    for records, kw in log:
        parts.append(stored(base, records, timestamp_type=kw["timestamp_type"]))
        base += len(records)
    buf = b"".join(parts)
    fields = scan_records(buf, payloads_of(buf), empty_headers=False)
    assert fields is not None and len(fields) == base
