"""lz4 and zstd inflate with a first read of the size the frame declares (or a guess),
not one read of the whole cap: payloads come back whole whether or not their frames
declare a size, across frames too, and the cap holds to the byte."""

from __future__ import annotations

import os
import threading

import lz4.frame
import pytest
import zstandard

from protocol.compression import Compression, decompress
from protocol.errors import CorruptMessage

# Zeros (inflating far past the first read's guess of 64x the input) and random bytes.
PAYLOAD = bytes(5_000_000) + os.urandom(2000) + bytes(200_000)


def _lz4(data: bytes, sized: bool) -> bytes:
    return lz4.frame.compress(data, store_size=sized)


def _zstd(data: bytes, sized: bool) -> bytes:
    return zstandard.ZstdCompressor(write_content_size=sized).compress(data)


def _zstd_unsized_stream(data: bytes, sized: bool) -> bytes:
    del sized  # a streaming compressor knows no size up front
    stream = zstandard.ZstdCompressor().compressobj()
    return stream.compress(data) + stream.flush()


PACKERS = [
    pytest.param(Compression.LZ4, _lz4, id="lz4"),
    pytest.param(Compression.ZSTD, _zstd, id="zstd"),
    pytest.param(Compression.ZSTD, _zstd_unsized_stream, id="zstd-stream"),
]
SIZED = [pytest.param(True, id="declared"), pytest.param(False, id="undeclared")]


@pytest.mark.parametrize("sized", SIZED)
@pytest.mark.parametrize(("codec", "pack"), PACKERS)
def test_payloads_come_back_whole(codec, pack, sized):
    packed = pack(PAYLOAD, sized)
    # Past the first read's guess when no size is declared (64x the input, 1 MiB at least).
    assert max(len(packed) * 64, 1 << 20) < len(PAYLOAD)
    assert decompress(codec, packed, len(PAYLOAD)) == PAYLOAD
    assert decompress(codec, pack(b"abc" * 100, sized), 300) == b"abc" * 100


@pytest.mark.parametrize("sized", SIZED)
@pytest.mark.parametrize(("codec", "pack"), PACKERS)
def test_the_cap_holds_to_the_byte(codec, pack, sized):
    with pytest.raises(CorruptMessage, match="cap"):
        decompress(codec, pack(PAYLOAD, sized), len(PAYLOAD) - 1)


@pytest.mark.parametrize("sized", SIZED)
def test_zstd_frames_back_to_back_are_all_read(sized):
    packed = _zstd(PAYLOAD, sized) + _zstd(b"tail", sized)
    assert decompress(Compression.ZSTD, packed, len(PAYLOAD) + 4) == PAYLOAD + b"tail"


def test_a_truncated_lz4_frame_is_corrupt():
    # (A cut zstd frame yields what it holds, as before; the records' walk refuses it.)
    packed = _lz4(PAYLOAD, False)
    with pytest.raises(CorruptMessage, match="truncated"):
        decompress(Compression.LZ4, packed[: len(packed) // 2], len(PAYLOAD))


def test_threads_inflate_zstd_at_once():
    payloads = [bytes([i]) * 500_000 + os.urandom(1000) for i in range(8)]
    packed = [_zstd(p, False) for p in payloads]
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
