"""A compressed payload must end where its stream ends (issue 23, minor findings).

Bytes after the end of a gzip member, an lz4 frame or a zstd frame were ignored by
the decoder and stored; a second gzip member even carried records the broker never
validated. All of these are CORRUPT_MESSAGE now.
"""

from __future__ import annotations

import msgpack
import pytest

from protocol import batch as b
from protocol.compression import Compression, compress, decompress
from protocol.errors import CorruptMessage
from tests.protocol.test_batch import good_records, raw_batch

RECORDS = good_records(3)
PAYLOAD = msgpack.packb(RECORDS, use_bin_type=True)
HIDDEN = msgpack.packb(good_records(7), use_bin_type=True)
CODECS = [c for c in Compression if c]


def _batch(codec: Compression, payload: bytes) -> bytes:
    return raw_batch(RECORDS, payload=payload, attributes=int(codec))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_junk_after_the_stream_is_corrupt(codec: Compression) -> None:
    data = _batch(codec, compress(codec, PAYLOAD) + b"\x00junk\xff" * 3)
    with pytest.raises(CorruptMessage, match=r"trailing|cannot decompress"):
        b.validate_batch(data)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_a_second_stream_after_the_first_is_corrupt(codec: Compression) -> None:
    data = _batch(codec, compress(codec, PAYLOAD) + compress(codec, HIDDEN))
    with pytest.raises(CorruptMessage):
        b.validate_batch(data)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name.lower())
def test_an_exact_stream_still_decodes(codec: Compression) -> None:
    assert decompress(codec, compress(codec, PAYLOAD), 1 << 20) == PAYLOAD
    assert b.validate_batch(_batch(codec, compress(codec, PAYLOAD))).record_count == 3
