"""Frames: round trips, arbitrary splits, and malformed, truncated and oversize input."""

from __future__ import annotations

import itertools
import struct

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.errors import InvalidRequest
from protocol.framing import (
    LENGTH,
    TAIL_PLACEHOLDER,
    FrameDecodeError,
    FrameDecoder,
    FrameTooLarge,
    encode_frame,
    encode_frame_with_tail,
    frame_length,
)

MESSAGES = {
    "empty-map": {},
    "request": {"api": "metadata", "v": 1, "id": 7, "body": {"topics": None}},
    "binary": {"records": b"\x00\xff" * 1000},
    "unicode": {"topic": "tópico-ü", "n": -(2**63)},
    "nested": {"a": [{"b": [1, 2, {"c": None}]}]},
}


@pytest.mark.parametrize("message", MESSAGES.values(), ids=MESSAGES.keys())
def test_round_trip_whole_and_byte_by_byte(message: dict) -> None:
    frame = encode_frame(message)
    assert LENGTH.unpack(frame[:4])[0] == len(frame) - 4
    expected = msgpack.unpackb(msgpack.packb(message), use_list=False)

    whole = FrameDecoder()
    whole.feed(frame)
    assert list(whole) == [expected]

    dribble = FrameDecoder()
    got = []
    for i in range(len(frame)):
        dribble.feed(frame[i : i + 1])
        got.extend(dribble)
    assert got == [expected]
    assert dribble.buffered_bytes == 0


def test_many_frames_in_one_feed_come_out_in_order() -> None:
    decoder = FrameDecoder()
    decoder.feed(b"".join(encode_frame({"id": i}) for i in range(50)))
    assert [m["id"] for m in decoder] == list(range(50))


def test_bin_stays_bytes_and_str_stays_str() -> None:
    decoder = FrameDecoder()
    decoder.feed(encode_frame({"k": b"abc", "s": "abc"}))
    [message] = decoder
    assert message == {"k": b"abc", "s": "abc"}
    assert type(message["k"]) is bytes


def test_truncated_frame_waits_for_the_rest() -> None:
    frame = encode_frame({"records": b"x" * 100})
    decoder = FrameDecoder()
    decoder.feed(frame[:-1])
    assert list(decoder) == []
    assert decoder.bytes_needed() == 1
    decoder.feed(frame[-1:])
    assert list(decoder) == [{"records": b"x" * 100}]


def test_bytes_needed_counts_header_then_body() -> None:
    decoder = FrameDecoder()
    assert decoder.bytes_needed() == 4
    decoder.feed(LENGTH.pack(10))
    assert decoder.bytes_needed() == 10


def test_oversize_header_is_refused_before_the_body_arrives() -> None:
    decoder = FrameDecoder(max_frame_bytes=1000)
    decoder.feed(LENGTH.pack(1001))  # only the header: nothing is allocated for the body
    with pytest.raises(FrameTooLarge) as info:
        list(decoder)
    assert info.value.frame_bytes == 1001
    assert info.value.max_frame_bytes == 1000
    assert isinstance(info.value, InvalidRequest)
    # The decoder stays failed: the stream cannot be resynchronised.
    with pytest.raises(FrameTooLarge):
        decoder.feed(b"more")


def test_frame_exactly_at_the_limit_is_accepted() -> None:
    body = msgpack.packb(b"x" * 90, use_bin_type=True)
    decoder = FrameDecoder(max_frame_bytes=len(body))
    decoder.feed(LENGTH.pack(len(body)) + body)
    assert list(decoder) == [b"x" * 90]


def test_frame_length_helper_checks_the_limit() -> None:
    assert frame_length(LENGTH.pack(5), 5) == 5
    with pytest.raises(FrameTooLarge):
        frame_length(LENGTH.pack(6), 5)


BAD_BODIES = {
    "empty": b"",
    "truncated-map": b"\x82\xa1a",
    "reserved-byte": b"\xc1",
    "two-objects": b"\x01\x02",
    "int-map-key": msgpack.packb({1: 2}),
    "invalid-utf8-str": b"\xa2\xff\xfe",
}


@pytest.mark.parametrize("body", BAD_BODIES.values(), ids=BAD_BODIES.keys())
def test_undecodable_body_raises_frame_decode_error(body: bytes) -> None:
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", len(body)) + body)
    with pytest.raises(FrameDecodeError):
        list(decoder)
    with pytest.raises(FrameDecodeError):
        decoder.next_message()


def test_absurd_nesting_is_undecodable_not_a_crash() -> None:
    body = b"\x91" * 100_000 + b"\xc0"  # 100,000 nested one-element arrays
    decoder = FrameDecoder()
    decoder.feed(struct.pack(">I", len(body)) + body)
    with pytest.raises(FrameDecodeError):
        list(decoder)


def test_frames_after_a_good_one_still_decode_when_split_at_the_header() -> None:
    frames = encode_frame({"id": 1}) + encode_frame({"id": 2})
    decoder = FrameDecoder()
    decoder.feed(frames[:-5])
    assert [m["id"] for m in decoder] == [1]
    decoder.feed(frames[-5:])
    assert [m["id"] for m in decoder] == [2]


def test_large_consumed_prefix_is_compacted() -> None:
    decoder = FrameDecoder()
    big = encode_frame({"records": b"y" * (2 << 20)})
    decoder.feed(big + encode_frame({"id": 3})[:3])
    assert len(list(decoder)) == 1
    assert decoder.buffered_bytes == 3


def test_max_frame_bytes_must_be_positive() -> None:
    with pytest.raises(ValueError, match="max_frame_bytes"):
        FrameDecoder(0)


values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


@settings(max_examples=60, deadline=None)
@given(messages=st.lists(values, min_size=1, max_size=5), cuts=st.lists(st.integers(0, 400)))
def test_any_split_of_any_messages_decodes_the_same(messages: list, cuts: list[int]) -> None:
    stream = b"".join(encode_frame(m) for m in messages)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    decoder = FrameDecoder()
    got = []
    for start, end in itertools.pairwise(points):
        decoder.feed(stream[start:end])
        got.extend(decoder)
    expected = [msgpack.unpackb(msgpack.packb(m), use_list=False, raw=False) for m in messages]
    assert got == expected


_WIRE_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**64 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=300)
    | st.binary(max_size=70_000),
    lambda inner: (
        st.lists(inner, max_size=20) | st.dictionaries(st.text(max_size=20), inner, max_size=10)
    ),
    max_leaves=40,
)


@settings(max_examples=150, deadline=None)
@given(_WIRE_VALUES)
def test_frames_are_byte_identical_to_msgpack_packb(message: object) -> None:
    """msgspec encodes; the contract is msgpack's own encoding, byte for byte."""
    frame = encode_frame(message)
    assert bytes(frame[4:]) == msgpack.packb(message, use_bin_type=True)
    assert LENGTH.unpack(frame[:4])[0] == len(frame) - 4


def test_the_buffer_is_kept_for_small_frames_and_dropped_after_a_huge_one() -> None:
    decoder = FrameDecoder()
    small = encode_frame({"records": b"x" * 300_000})
    for _ in range(3):
        decoder.feed(small[:100_000])
        decoder.feed(small[100_000:])
        assert list(decoder) == [{"records": b"x" * 300_000}]
    kept = decoder._buf
    decoder.feed(small)
    assert list(decoder) and decoder._buf is kept, "reused between frames"

    huge = encode_frame({"records": b"y" * (10 << 20)})
    decoder.feed(huge + small[:10])  # a huge frame, then the start of the next one
    assert len(list(decoder)) == 1
    decoder.feed(small[10:])
    assert list(decoder) == [{"records": b"x" * 300_000}]
    assert len(decoder._buf) == 0, "an empty buffer grown past the keep size is released"


_CHUNKS = st.lists(st.binary(max_size=40_000), max_size=6) | st.sampled_from(
    # bin8 / bin16 / bin32 boundaries of the tail's total length
    [[b"a" * 255], [b"a" * 256], [b"b" * 65_535], [b"b" * 65_536], [b"c" * 70_000, b"d" * 3]]
)


@settings(max_examples=100, deadline=None)
@given(_WIRE_VALUES, _CHUNKS)
def test_a_frame_with_a_tail_is_byte_identical_to_the_joined_frame(
    head: object, chunks: list[bytes]
) -> None:
    """The scatter/gather frame puts on the wire exactly what `encode_frame` would."""
    message = {"head": head, "records": TAIL_PLACEHOLDER}
    parts = encode_frame_with_tail(message, [bytearray(c) for c in chunks])
    joined = {"head": head, "records": b"".join(chunks)}
    assert b"".join(parts) == bytes(encode_frame(joined))


def test_a_frame_with_a_tail_needs_the_placeholder_last() -> None:
    with pytest.raises(ValueError, match="last value"):
        encode_frame_with_tail({"records": TAIL_PLACEHOLDER, "after": 1}, [b"x"])
