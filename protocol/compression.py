"""Payload codecs of docs/protocol.md §3, each in its standard stream format.

gzip is an RFC 1952 member, lz4 the LZ4 frame format, zstd a Zstandard frame and
snappy a raw Snappy block (as Kafka). Decompression is always capped: a hostile
batch may not inflate past `max_bytes`, whatever its frame header claims. A payload
must end where its stream ends: trailing bytes are CorruptMessage.
"""

from __future__ import annotations

import io
import threading
import zlib
from enum import IntEnum

import cramjam
import lz4.frame
import zstandard

from protocol.errors import CorruptMessage

# zlib's window bits for the gzip container (16 + max window).
_GZIP_WBITS = 31


class Compression(IntEnum):
    """Attribute bits 0-2 of a batch."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, name: str | int | Compression) -> Compression:
        """Accept a codec by enum, number or case-insensitive name (`"zstd"`)."""
        if isinstance(name, cls):
            return name
        if isinstance(name, int):
            return cls(name)
        try:
            return cls[name.strip().upper()]
        except KeyError:
            valid = ", ".join(c.name.lower() for c in cls)
            raise ValueError(f"unknown compression {name!r}; use one of {valid}") from None


def compress(codec: Compression, data: bytes) -> bytes:
    """Compress a payload with `codec` (NONE returns the input)."""
    if codec == Compression.NONE:
        return data
    if codec == Compression.GZIP:
        packer = zlib.compressobj(6, zlib.DEFLATED, _GZIP_WBITS)
        return packer.compress(data) + packer.flush()
    if codec == Compression.SNAPPY:
        return bytes(cramjam.snappy.compress_raw(data))
    if codec == Compression.LZ4:
        framed: bytes = lz4.frame.compress(data)
        return framed
    if codec == Compression.ZSTD:
        return zstandard.ZstdCompressor(level=3).compress(data)
    raise CorruptMessage(f"unknown compression codec {int(codec)}")


def decompress(codec: int, data: bytes | memoryview, max_bytes: int) -> bytes:
    """Inflate a payload, refusing anything that would exceed `max_bytes`.

    Every failure, including a library's own exception on hostile input, becomes
    CorruptMessage with the cause chained.
    """
    try:
        out = _decompress(codec, data, max_bytes)
    except CorruptMessage:
        raise
    except Exception as exc:
        raise CorruptMessage(f"cannot decompress {_name(codec)} payload: {exc}") from exc
    if len(out) > max_bytes:
        raise CorruptMessage(f"{_name(codec)} payload inflates beyond the {max_bytes}-byte cap")
    return out


def _decompress(codec: int, data: bytes | memoryview, max_bytes: int) -> bytes:
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.GZIP:
        unpacker = zlib.decompressobj(_GZIP_WBITS)
        out = unpacker.decompress(data, max_bytes + 1)
        if not unpacker.eof and len(out) <= max_bytes:
            raise CorruptMessage("truncated gzip payload")
        _refuse_trailing("gzip member", unpacker.unused_data)
        return out
    if codec == Compression.SNAPPY:
        declared = cramjam.snappy.decompress_raw_len(bytes(data))
        if declared > max_bytes:
            raise CorruptMessage(f"snappy payload declares {declared} bytes, cap is {max_bytes}")
        return bytes(cramjam.snappy.decompress_raw(bytes(data)))
    if codec == Compression.LZ4:
        raw = bytes(data)
        declared = lz4.frame.get_frame_info(raw)["content_size"]
        unpacker = lz4.frame.LZ4FrameDecompressor()
        parts = [unpacker.decompress(raw, max_length=_first_read(declared, len(raw), max_bytes))]
        total = len(parts[0])
        if not unpacker.eof and not unpacker.needs_input and total <= max_bytes:
            parts.append(unpacker.decompress(b"", max_length=max_bytes + 1 - total))
            total += len(parts[-1])
        if total > max_bytes:
            raise CorruptMessage(f"lz4 payload inflates beyond the {max_bytes}-byte cap")
        if not unpacker.eof:
            raise CorruptMessage("truncated lz4 payload")
        _refuse_trailing("lz4 frame", unpacker.unused_data if unpacker.eof else b"")
        return parts[0] if len(parts) == 1 else b"".join(parts)
    if codec == Compression.ZSTD:
        # Across frames: junk after the first is an error, and a second frame's bytes
        # reach the record decoder (which refuses them) instead of going unseen.
        raw = bytes(data)
        first = _first_read(zstandard.frame_content_size(raw), len(raw), max_bytes)
        reader = _zstd_decompressor().stream_reader(io.BytesIO(raw), read_across_frames=True)
        with reader:
            chunks = [reader.read(first)]
            total, asked = len(chunks[0]), first
            # A read short of what it asked for reached the end; a full one may not
            # have (more frames, or a frame larger than declared or guessed).
            while len(chunks[-1]) == asked and total <= max_bytes:
                asked = max_bytes + 1 - total
                chunks.append(reader.read(asked))
                total += len(chunks[-1])
            if total > max_bytes:  # refused before the pieces are joined
                raise CorruptMessage(f"zstd payload inflates beyond the {max_bytes}-byte cap")
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    raise CorruptMessage(f"unknown compression codec {codec}")


# What an lz4 or zstd inflate asks for first: the size the frame declares, else 64x the
# input; at least 1 MiB, rounded up to a power of two; then the rest of the cap. Asking
# for the whole cap at once (64 MiB or more) made each call allocate and fault in that
# much: ~20 µs (lz4) and ~40 µs (zstd) a batch. Sizes just above a batch's (not a power
# of two) measured 10x slower again (glibc maps each such buffer afresh).
_FIRST_READ_MIN = 1 << 20
_FIRST_READ_FACTOR = 64


def _first_read(declared: int, compressed: int, max_bytes: int) -> int:
    """The first output size to ask for (`declared` <= 0: the frame declares none),
    never past the cap (max_bytes + 1 shows the cap exceeded)."""
    wanted = declared + 1 if declared > 0 else _FIRST_READ_FACTOR * compressed
    size = max(_FIRST_READ_MIN, 1 << (wanted - 1).bit_length())
    return min(size, max_bytes + 1)


_ZSTD = threading.local()


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """This thread's zstd decompressor: making one costs ~11 µs, more than inflating a
    16 KiB batch; reusing one in turn is what the library allows (not concurrently)."""
    decompressor: zstandard.ZstdDecompressor | None = getattr(_ZSTD, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return decompressor


def _refuse_trailing(what: str, unused: bytes) -> None:
    """Bytes after the end of the stream: junk, or a second stream whose records the
    decoder would never see (and so never validate)."""
    if unused:
        raise CorruptMessage(f"{len(unused)} trailing bytes after the {what}")


def _name(codec: int) -> str:
    try:
        return Compression(codec).name.lower()
    except ValueError:
        return f"codec {codec}"
