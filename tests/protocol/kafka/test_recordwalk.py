"""The record walk in C against its Python reference (`walk_each`, `transcode_each`):
on generated batches, on the same batches with bytes changed, cut or inserted, and on
arbitrary bytes, both give the same summary, columns and msgpack payload or both
refuse with ValueError."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol.batch import encode_payload
from protocol.kafka import _recordwalk
from protocol.kafka import records as kafka
from protocol.kafka.recordwalk import (
    COLUMNS,
    RecordSummary,
    columns,
    summarize,
    transcode,
    transcode_each,
    walk_each,
)
from protocol.kafka.varint import uvarint, varint

blobs = st.none() | st.binary(max_size=40)
header_keys = st.text(max_size=4) | st.sampled_from(["é", "\u20ac", "\U0001f600"])
rows = st.lists(
    st.tuples(
        st.integers(0, 6),
        st.integers(-(2**63), 2**63 - 1) | st.integers(-300, 300),
        blobs,
        blobs,
        st.lists(st.tuples(header_keys, blobs), max_size=2).map(tuple),
    ),
    min_size=0,
    max_size=12,
).map(lambda records: [(i if d else d, *r) for i, (d, *r) in enumerate(records)])


def _both(data: bytes, count: int):
    """(C summary, C rows, C payload) and the same from Python, or the error classes."""
    try:
        c = (summarize(data, count), columns(data, count).tolist(), transcode(data, count))
    except ValueError:
        c = ValueError
    try:
        summary, each = walk_each(data, count)
        py = (summary, [list(row) for row in each], transcode_each(data, count))
    except ValueError:
        py = ValueError
    return c, py


@settings(max_examples=300, deadline=None)
@given(records=rows)
def test_both_walks_agree_on_encoded_records(records):
    data = kafka.encode_records(records)
    c, py = _both(data, len(records))
    assert c == py
    assert c is not ValueError
    # The payload is Tidelog's for the same records, and decodes back to them.
    assert c[2] == encode_payload(records)
    decoded = msgspec.msgpack.decode(c[2], type=list[kafka.RecordTuple])
    assert decoded == kafka.decode_records(data, len(records))


mutations = st.lists(
    st.tuples(
        st.sampled_from(["set", "cut", "insert"]), st.integers(0, 10**6), st.integers(0, 255)
    ),
    min_size=1,
    max_size=4,
)


def _mutate(data: bytes, steps) -> bytes:
    out = bytearray(data)
    for kind, where, byte in steps:
        at = where % (len(out) + 1)
        if kind == "set" and at < len(out):
            out[at] = byte
        elif kind == "cut":
            del out[at:]
        else:
            out[at:at] = bytes([byte])
    return bytes(out)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=rows, steps=mutations, count_change=st.sampled_from([0, 0, 0, -1, 1]))
def test_both_walks_agree_on_damaged_records(records, steps, count_change):
    data = _mutate(kafka.encode_records(records), steps)
    c, py = _both(data, len(records) + count_change)
    assert c == py


@settings(max_examples=1000, deadline=None)
@given(data=st.binary(max_size=60), count=st.integers(-2, 9))
def test_both_walks_agree_on_arbitrary_bytes(data, count):
    c, py = _both(data, count)
    assert c == py


def _record(body: bytes) -> bytes:
    return varint(len(body)) + body


# A record body: attributes, timestamp delta, offset delta, key "k", value "v", no headers.
TAIL = varint(0) + varint(1) + b"k" + varint(1) + b"v" + varint(0)


@pytest.mark.parametrize(
    ("body", "ok"),
    [
        (b"\x00" + b"\xff" * 9 + b"\x01" + TAIL, True),  # a 10-byte varlong, bit 63 set
        (b"\x00" + b"\xff" * 9 + b"\x02" + TAIL, False),  # ... past 64 bits
        (b"\x00" + b"\xff" * 10 + b"\x00" + TAIL, False),  # an 11-byte varlong
        (b"\x00\x00" + b"\xff\xff\xff\xff\x0f" + TAIL[1:], True),  # offset delta raw 2^32-1
        (b"\x00\x00" + b"\xff\xff\xff\xff\x1f" + TAIL[1:], False),  # ... past 32 bits
        (b"\x00\x00\x00" + varint(-2) + b"v" + varint(0), False),  # key length -2
        (b"\x00\x00\x00" + varint(-1) + varint(-1) + varint(0), True),  # null key and value
        (b"\x00\x00\x00" + varint(-1) + varint(-1) + varint(-1), False),  # header count -1
        (b"\x00\x00\x00\x02k\x02v\x02" + varint(-1) + varint(-1), False),  # null header key
        (b"\x00\x00\x00\x02k\x02v\x02" + varint(2) + b"\xed\xa0" + varint(-1), False),  # surrogate
        (b"\x00\x00\x00\x02k\x02v\x02" + varint(2) + b"\xc3\xa9" + varint(-1), True),  # é
        (b"\x00\x00\x00\x02k\x02v\x02" + varint(2) + b"\xc0\xaf" + varint(-1), False),  # overlong
        (b"\x00\x00\x00\x02k\x02v" + uvarint(2**32 - 2), False),  # 2^31-1 headers
    ],
)
def test_hostile_fields(body, ok):
    data = _record(body)
    c, py = _both(data, 1)
    assert c == py
    assert (c is not ValueError) == ok


@pytest.mark.parametrize("length", [b"\x03", b"\xff\xff\xff\xff\x0f", b"\x80\x80\x80\x80\x80"])
def test_hostile_record_lengths(length):
    data = length + bytes(20)
    with pytest.raises(ValueError):
        summarize(data, 1)
    with pytest.raises(ValueError):
        walk_each(data, 1)


sizes = st.sampled_from([0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536, 70000])


@settings(max_examples=40, deadline=None)
@given(key=sizes, value=sizes, header=sizes, count=st.sampled_from([1, 15, 16, 65536]))
def test_every_msgpack_width_matches_msgspec(key, value, header, count):
    """fixstr/str8/16/32, bin8/16/32, fixarray/array16/32 at their bounds."""
    records = [(0, -(2**40), b"k" * key, b"v" * value, (("h" * header, b"x" * header),))]
    records += [(i, i - 40, None, b"", ()) for i in range(1, count)]
    data = kafka.encode_records(records)
    assert transcode(data, count) == encode_payload(records)


def test_absurd_counts_are_refused_before_allocating():
    with pytest.raises(ValueError, match="claims"):
        _recordwalk.columns(b"\x00" * 70, 2**40)
    with pytest.raises(ValueError, match="claims"):
        _recordwalk.transcode(b"\x00" * 70, 2**40)
    with pytest.raises(ValueError, match="claims"):
        _recordwalk.summarize(b"", -1)


def test_every_buffer_kind_is_read_and_errors_name_the_record():
    records = [(i, i, b"k", b"v" * i, ()) for i in range(300)]  # walked without the GIL
    data = kafka.encode_records(records)
    for buf in (data, bytearray(data), memoryview(data)):
        assert summarize(buf, 300) == RecordSummary(0, 299, -1, -1)
        assert columns(buf, 300).shape == (300, COLUMNS)
        assert transcode(buf, 300) == encode_payload(records)
    with pytest.raises(ValueError, match="record 299"):
        summarize(data[:-1], 300)
    with pytest.raises(ValueError, match="record 299"):
        transcode(data[:-1], 300)
