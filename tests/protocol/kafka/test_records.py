"""Kafka varint records: the column-wise decoder agrees with the per-record one, on
good input and on damaged input (where both must refuse with CORRUPT_MESSAGE)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.kafka import KafkaCodecError
from protocol.kafka.columns import decode_columns, encode_columns
from protocol.kafka.records import (
    DECODE_COLUMNS_MIN_RECORDS,
    ENCODE_COLUMNS_MIN_RECORDS,
    decode_each,
    decode_headers,
    decode_records,
    delta_summary,
    encode_each,
    encode_header_entries,
    encode_records,
)

blobs = st.none() | st.binary(max_size=300)
rows = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),
        st.integers(-(2**62), 2**62),
        blobs,
        blobs,
        st.lists(st.tuples(st.text(max_size=5), blobs), max_size=2).map(tuple),
    ),
    min_size=1,
    max_size=80,
)


# Records without key bytes (null or empty keys): the encoder's three-piece path.
keyless_rows = st.lists(
    st.tuples(
        st.integers(0, 2**31 - 1),
        st.integers(-(2**62), 2**62),
        st.none() | st.just(b""),
        blobs,
        st.lists(st.tuples(st.text(max_size=5), blobs), max_size=2).map(tuple),
    ),
    min_size=1,
    max_size=80,
)


def _columns(data: bytes, count: int):
    return decode_columns(data, count, decode_headers)


@settings(max_examples=200, deadline=None)
@given(records=rows)
def test_both_encoders_write_the_same_bytes(records):
    assert encode_columns(records, encode_header_entries) == encode_each(records)


@settings(max_examples=200, deadline=None)
@given(records=keyless_rows)
def test_both_encoders_agree_without_key_bytes(records):
    assert encode_columns(records, encode_header_entries) == encode_each(records)


@settings(max_examples=200, deadline=None)
@given(records=rows)
def test_delta_summary_matches_the_decoded_records(records):
    summary = delta_summary(encode_records(records), len(records))
    assert summary.counting == ([r[0] for r in records] == list(range(len(records))))
    assert summary.max_timestamp_delta == max(r[1] for r in records)
    counted = [(i, *r[1:]) for i, r in enumerate(records)]
    assert delta_summary(encode_records(counted), len(counted)).counting


def _outcome(decode, data: bytes, count: int):
    try:
        return decode(data, count)
    except KafkaCodecError as exc:
        assert exc.code == 2
        return "corrupt"


@settings(max_examples=200, deadline=None)
@given(records=rows)
def test_both_decoders_read_what_we_encode(records):
    data = encode_records(records)
    expected = [tuple(r) for r in records]
    assert decode_each(data, len(records)) == expected
    assert _columns(data, len(records)) == expected


@settings(max_examples=300, deadline=None)
@given(records=rows, where=st.floats(0, 1), byte=st.integers(0, 255), cut=st.booleans())
def test_damaged_records_get_the_same_verdict(records, where, byte, cut):
    data = bytearray(encode_records(records))
    at = int(where * (len(data) - 1))
    if cut:
        del data[at:]
    else:
        data[at] = byte
    damaged = bytes(data)
    assert _outcome(_columns, damaged, len(records)) == _outcome(decode_each, damaged, len(records))


def test_thresholds_route_to_the_same_results():
    for count in (1, DECODE_COLUMNS_MIN_RECORDS, ENCODE_COLUMNS_MIN_RECORDS):
        records = [(i, i, None if i % 2 else b"k", b"v", ()) for i in range(count)]
        data = encode_records(records)
        assert data == encode_each(records)
        assert decode_records(data, count) == records


@pytest.mark.parametrize("count", [-1, 2**31 - 1, 10**6])
def test_absurd_counts_are_refused_before_allocating(count):
    data = encode_records([(0, 0, None, b"v", ())])
    with pytest.raises(KafkaCodecError, match="claims") as info:
        decode_records(data, count)
    assert info.value.code == 2


@pytest.mark.parametrize("decode", [decode_each, _columns], ids=["each", "columns"])
def test_fewer_records_than_declared(decode):
    data = encode_records([(i, 0, b"k", b"v", ()) for i in range(40)])
    with pytest.raises(KafkaCodecError):
        decode(data, 41)
    with pytest.raises(KafkaCodecError, match=r"follow|end"):
        decode(data, 39)


@pytest.mark.parametrize("decode", [decode_each, _columns], ids=["each", "columns"])
def test_a_length_below_minus_one_is_not_null(decode):
    """Found by the property above: -2 once read as a null value in the per-record path."""
    records = [(0, 0, None, b"v", ())] * 40
    data = bytearray(encode_records(records))
    data[-3] = 3  # the last record's value length: zigzag 3 is -2
    with pytest.raises(KafkaCodecError, match="length") as info:
        decode(bytes(data), 40)
    assert info.value.code == 2


@pytest.mark.parametrize("decode", [decode_each, _columns], ids=["each", "columns"])
def test_a_timestamp_varlong_past_64_bits_is_corrupt(decode):
    """Found by the property above: Python ints read it as 2**63, numpy wrapped it to 0."""
    records = [(0, 0, None, b"v", ())] * 40
    data = bytearray(encode_records(records))
    # The last record: length, attributes, then a 10-byte timestamp whose last byte is 2.
    overlong = b"\x80" * 9 + b"\x02"
    body = b"\x00" + overlong + b"\x00\x01\x02v\x00"
    last = len(encode_records(records[:1]))
    data[-last:] = bytes([len(body) * 2]) + body
    with pytest.raises(KafkaCodecError, match="overflows") as info:
        decode(bytes(data), 40)
    assert info.value.code == 2
