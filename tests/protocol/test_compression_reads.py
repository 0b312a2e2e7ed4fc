"""lz4 and zstd inflate in growing reads, not one read of the whole cap: a payload much
larger than the first read comes back whole, and the cap holds to the byte."""

from __future__ import annotations

import os
import threading

import pytest

from protocol.compression import Compression, compress, decompress
from protocol.errors import CorruptMessage

CODECS = [pytest.param(Compression.LZ4, id="lz4"), pytest.param(Compression.ZSTD, id="zstd")]
# Zeros (far past the first read: 8x the tiny compressed size) and random bytes.
PAYLOAD = bytes(3_000_000) + os.urandom(100_000) + bytes(200_000)


@pytest.mark.parametrize("codec", CODECS)
def test_a_payload_far_larger_than_the_first_read_comes_back_whole(codec):
    packed = compress(codec, PAYLOAD)
    assert len(packed) * 8 < len(PAYLOAD)
    assert decompress(codec, packed, len(PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize("codec", CODECS)
def test_the_cap_holds_to_the_byte(codec):
    packed = compress(codec, PAYLOAD)
    with pytest.raises(CorruptMessage, match="cap"):
        decompress(codec, packed, len(PAYLOAD) - 1)


def test_a_truncated_lz4_frame_is_corrupt():
    # (A cut zstd frame yields what it holds, as before; the records' walk refuses it.)
    packed = compress(Compression.LZ4, PAYLOAD)
    with pytest.raises(CorruptMessage, match="truncated"):
        decompress(Compression.LZ4, packed[: len(packed) // 2], len(PAYLOAD))


def test_threads_inflate_zstd_at_once():
    payloads = [bytes([i]) * 500_000 for i in range(8)]
    packed = [compress(Compression.ZSTD, p) for p in payloads]
    results: dict[int, bool] = {}

    def work(i: int) -> None:
        results[i] = all(
            decompress(Compression.ZSTD, packed[i], 1 << 20) == payloads[i] for _ in range(20)
        )

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert results == dict.fromkeys(range(8), True)
