"""A group member's assignment as a consumer group's members carry it: Kafka's
ConsumerProtocolAssignment (int16 version, then [topic string, [int32 partition]]).

Decoded only to show which partitions a member holds; anything that is not that
format (another protocol type) is shown as its size instead.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def decode_assignment(data: bytes) -> list[tuple[str, list[int]]] | None:
    """[(topic, partitions)] of a ConsumerProtocol assignment, or None if it is not one."""
    if not data:
        return []
    try:
        (version,) = _I16.unpack_from(data, 0)
        if version < 0:
            return None
        pos = 2
        (count,) = _I32.unpack_from(data, pos)
        pos += 4
        out = []
        for _ in range(max(count, 0)):
            (length,) = _I16.unpack_from(data, pos)
            pos += 2
            topic = data[pos : pos + length].decode("utf-8")
            pos += length
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            parts = list(struct.unpack_from(f">{max(n, 0)}i", data, pos))
            pos += 4 * max(n, 0)
            out.append((topic, parts))
        return out
    except (struct.error, UnicodeDecodeError):
        return None
