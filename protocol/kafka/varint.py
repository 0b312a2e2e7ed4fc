"""Kafka's variable-length integers, sans-I/O.

Two encodings share the 7-bits-per-byte, low-group-first layout (as protobuf):
unsigned varints for the compact lengths and tagged fields of flexible versions
(KIP-482), and zigzag-signed varints / varlongs inside v2 records. Readers take a
buffer and a position and return `(value, next_position)`; a varint running past
its type's width (in bytes or in bits) or past the buffer is malformed and raises
`ValueError` (the callers turn it into `KafkaCodecError` with their context).
"""

from __future__ import annotations

# An int32 needs at most 5 groups of 7 bits, an int64 at most 10.
VARINT_MAX_BYTES = 5
VARLONG_MAX_BYTES = 10

# The bits an unsigned varint of each width may carry: int32 or int64, no more.
_WIDTH_BITS = {VARINT_MAX_BYTES: 32, VARLONG_MAX_BYTES: 64}

_ONE_BYTE = [bytes((i,)) for i in range(128)]


def read_uvarint(
    buf: bytes | memoryview, pos: int, max_bytes: int = VARINT_MAX_BYTES
) -> tuple[int, int]:
    """An unsigned varint at `pos`."""
    byte = buf[pos]
    if byte < 0x80:  # the common case: one byte
        return byte, pos + 1
    value = byte & 0x7F
    shift = 7
    end = pos + max_bytes
    pos += 1
    while True:
        if pos >= end:
            raise ValueError(f"varint longer than {max_bytes} bytes")
        byte = buf[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            if value >> _WIDTH_BITS[max_bytes]:
                raise ValueError(f"varint {value} overflows {_WIDTH_BITS[max_bytes]} bits")
            return value, pos
        shift += 7


def read_varint(
    buf: bytes | memoryview, pos: int, max_bytes: int = VARLONG_MAX_BYTES
) -> tuple[int, int]:
    """A zigzag-signed varint (or varlong, the default width) at `pos`."""
    raw, pos = read_uvarint(buf, pos, max_bytes)
    return (raw >> 1) ^ -(raw & 1), pos


def uvarint(value: int) -> bytes:
    """The unsigned varint bytes of a non-negative int."""
    if value < 0x80:
        return _ONE_BYTE[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def varint(value: int) -> bytes:
    """The zigzag-signed varint bytes of an int (int32 or int64 alike)."""
    return uvarint((value << 1) ^ (value >> 63))


def varint_size(value: int) -> int:
    """How many bytes `varint(value)` takes."""
    raw = (value << 1) ^ (value >> 63)
    return max(1, (raw.bit_length() + 6) // 7)
