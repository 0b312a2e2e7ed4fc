"""Kafka request framing and the one-port protocol sniff, sans-I/O.

Kafka and Tidelog frame alike (a 4-byte big-endian length, then the body), so
the first body byte tells them apart:

    Kafka    int32 size | int16 api_key ...   api keys are < 256: first byte 0x00
    Tidelog  uint32 N   | msgpack map ...     fixmap 0x80-0x8f, map16 0xde, map32 0xdf

`sniff_protocol` decides from a connection's first five bytes. `KafkaFrameDecoder`
splits a byte stream into frame bodies and refuses a size it will not buffer
(negative, or over `max_frame_bytes`) as soon as the four size bytes are in.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from enum import Enum

from protocol.kafka.errors import KafkaCodecError, KafkaError

__all__ = [
    "DEFAULT_MAX_FRAME_BYTES",
    "SNIFF_BYTES",
    "KafkaFrameDecoder",
    "WireProtocol",
    "sniff_protocol",
]

_SIZE = struct.Struct(">i")
SIZE_BYTES = _SIZE.size

# Kafka's socket.request.max.bytes default (100 MiB), Tidelog's too (docs/protocol.md §1).
DEFAULT_MAX_FRAME_BYTES = 104_857_600

# The size prefix plus the first body byte.
SNIFF_BYTES = SIZE_BYTES + 1

# The smallest request: a v0 header (api_key, api_version, correlation_id).
_MIN_REQUEST_BYTES = 8

_MSGPACK_MAP_MARKERS = frozenset(range(0x80, 0x90)) | {0xDE, 0xDF}


class WireProtocol(Enum):
    """Which protocol a connection speaks, judged from its first bytes."""

    KAFKA = "kafka"
    TIDELOG = "tidelog"
    UNKNOWN = "unknown"


def sniff_protocol(
    first: bytes | bytearray | memoryview, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES
) -> WireProtocol | None:
    """The protocol of a connection from its first bytes; None until 5 have arrived.

    Kafka: a plausible size (a request header's worth, up to `max_frame_bytes`) and
    a first body byte of 0x00 (the high byte of an api key). Tidelog: a msgpack map
    marker. Anything else (a TLS hello, HTTP) is UNKNOWN: the caller closes.
    """
    if len(first) < SNIFF_BYTES:
        return None
    marker = first[SIZE_BYTES]
    if marker in _MSGPACK_MAP_MARKERS:
        return WireProtocol.TIDELOG
    (size,) = _SIZE.unpack_from(first, 0)
    if marker == 0 and _MIN_REQUEST_BYTES <= size <= max_frame_bytes:
        return WireProtocol.KAFKA
    return WireProtocol.UNKNOWN


class KafkaFrameDecoder:
    """Turns a byte stream into Kafka frame bodies (bytes after the size prefix).

    `feed(data)`, then iterate for every complete frame so far; a partial frame
    stays buffered. A bad size raises KafkaCodecError(INVALID_REQUEST) once its
    four bytes are in, before anything is buffered for it; the stream is then
    unusable and the caller closes the connection. Not thread-safe.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 < max_frame_bytes < 2**31:
            raise ValueError("max_frame_bytes must be in 1..2**31-1")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._failed: KafkaCodecError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes (copied)."""
        if self._failed is not None:
            raise self._failed
        self._buf += data

    @property
    def buffered_bytes(self) -> int:
        return len(self._buf)

    def announced_bytes(self) -> int | None:
        """The body size the next frame announces once its four size bytes are in (so
        a caller can reserve memory before buffering the body), else None."""
        if self._failed is not None:
            raise self._failed
        if len(self._buf) < SIZE_BYTES:
            return None
        size: int
        (size,) = _SIZE.unpack_from(self._buf, 0)
        if size < 0 or size > self.max_frame_bytes:
            self._failed = KafkaCodecError(
                KafkaError.INVALID_REQUEST,
                f"frame size {size} outside 0..{self.max_frame_bytes} bytes",
            )
            raise self._failed
        return size

    def next_frame_bytes(self) -> int | None:
        """The body size of the next frame if it is complete, else None."""
        size = self.announced_bytes()
        if size is None or len(self._buf) < SIZE_BYTES + size:
            return None
        return size

    def next_frame(self) -> bytes | None:
        """The next complete frame body, or None if none is complete yet."""
        size = self.next_frame_bytes()
        if size is None:
            return None
        end = SIZE_BYTES + size
        with memoryview(self._buf) as view:  # one copy (a bytearray slice is a second)
            frame = bytes(view[SIZE_BYTES:end])
        del self._buf[:end]
        return frame

    def __iter__(self) -> Iterator[bytes]:
        while (frame := self.next_frame()) is not None:
            yield frame
