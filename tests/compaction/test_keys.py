"""Decoding only offset deltas and keys for the offset map, across codecs and bad input."""

from __future__ import annotations

import dataclasses

import pytest

from compaction.keys import decode_keys
from protocol.batch import (
    HEADER_SIZE,
    LOG_OVERHEAD,
    Compression,
    build_batch,
    decode_payload,
    encode_batch,
    read_header,
)
from protocol.errors import CorruptMessage

CAP = 1 << 20


def keys_of(batch, header, *, cap=CAP):
    return decode_keys(
        batch,
        compression=header.compression,
        base_offset=header.base_offset,
        max_decompressed=cap,
    )


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name.lower())
def test_keys_and_deltas_match_the_full_decode(codec):
    rows = [(b"k1", b"v" * 50, [("h", b"x")], 10), (None, b"u", None, 12), (b"", None, None, 11)]
    batch = encode_batch(rows, compression=codec)
    header = read_header(batch)
    got = [(r.offset_delta, r.timestamp_delta, r.key) for r in keys_of(batch, header)]
    _, full = decode_payload(batch, header=header)
    assert got == [(r[0], r[1], r[2]) for r in full] == [(0, 0, b"k1"), (1, 2, None), (2, 1, b"")]


def test_gapped_and_empty_batches():
    gapped = build_batch(
        [(0, 5, b"a", b"1", ()), (7, 6, b"b", None, ())],
        base_offset=40,
        base_timestamp=5,
        attributes=0,
    )
    records = keys_of(gapped, read_header(gapped))
    assert [(r.offset_delta, r.key) for r in records] == [(0, b"a"), (7, b"b")]
    empty = build_batch([], base_offset=0, base_timestamp=0, attributes=0)
    assert keys_of(empty, read_header(empty)) == ()


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(b"\xc1", id="not-msgpack"),
        pytest.param(b"\x91\x92\x00\x00", id="record-too-short"),
        pytest.param(b"\x91\x95\x00\x00\xa1k\xc0\x90", id="str-key"),
        pytest.param(b"\x91\x95\xc3\x00\xc4\x01k\xc0\x90", id="bool-delta"),
    ],
)
def test_malformed_payload_is_corrupt_message(payload):
    good = encode_batch([(b"k", b"v", None, 1)])
    bad = good[:HEADER_SIZE] + payload
    header = dataclasses.replace(read_header(good), batch_length=len(bad) - LOG_OVERHEAD)
    with pytest.raises(CorruptMessage, match="offset 0"):
        keys_of(bad, header)


def test_compressed_payload_over_the_cap_is_refused():
    batch = encode_batch([(b"k", b"v" * 100_000, None, 1)], compression=Compression.ZSTD)
    with pytest.raises(CorruptMessage):
        keys_of(batch, read_header(batch), cap=1000)
