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
from collections.abc import Iterator
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
        unpacker = lz4.frame.LZ4FrameDecompressor()
        sizes = _read_sizes(len(data), max_bytes)
        parts: list[bytes] = [unpacker.decompress(bytes(data), max_length=next(sizes))]
        total = len(parts[0])
        while not unpacker.eof and not unpacker.needs_input and total <= max_bytes:
            parts.append(
                unpacker.decompress(b"", max_length=min(next(sizes), max_bytes + 1 - total))
            )
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
        reader = _zstd_decompressor().stream_reader(
            io.BytesIO(bytes(data)), read_across_frames=True
        )
        with reader:
            sizes = _read_sizes(len(data), max_bytes)
            chunks: list[bytes] = []
            total = 0
            while total <= max_bytes:
                chunk = reader.read(min(next(sizes), max_bytes + 1 - total))
                if not chunk:
                    break
                chunks.append(chunk)
                total += len(chunk)
            if total > max_bytes:  # refused before the pieces are joined
                raise CorruptMessage(f"zstd payload inflates beyond the {max_bytes}-byte cap")
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)
    raise CorruptMessage(f"unknown compression codec {codec}")


# The first output buffer an lz4 or zstd inflate asks for: a few times the input (what
# producers' batches inflate to), then doubling. Asking for the whole cap at once (64 MiB
# or more) made each call allocate it: ~20 µs (lz4) and ~40 µs (zstd) a batch.
_FIRST_READ_MIN = 64 << 10
_FIRST_READ_FACTOR = 8


def _read_sizes(compressed: int, max_bytes: int) -> Iterator[int]:
    """Output sizes to ask for in turn: at least 64 KiB and 8x the input, doubling,
    never more than the cap allows (max_bytes + 1 shows the cap exceeded)."""
    size = max(_FIRST_READ_MIN, _FIRST_READ_FACTOR * compressed)
    while True:
        yield min(size, max_bytes + 1)
        size *= 2


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
