"""Kafka v2 batches to Tidelog batches and back (PROTOCOL.md §3 <-> records.py).

The two headers hold the same fields from `attributes` on (40 bytes, same order,
widths and meanings), so a conversion copies them and rewrites only what sits in
front: Kafka's leader epoch and magic 2 against Tidelog's magic 1. The records
differ (varints against a msgpack array) and are decoded and re-encoded, then
compressed again with the batch's own codec. Keys, values, null against empty,
headers, timestamps and the timestamp type survive both ways.

Reading a Kafka batch (CRC, xerial or raw snappy, refusal of transactional
batches) is validate.py's; snappy is written as one raw block, which every
client reads. Every damaged input is KafkaCodecError(CORRUPT_MESSAGE).
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import crc32c

from protocol import batch as tidelog
from protocol.compression import Compression, compress
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.kafka.validate import decode_batch

__all__ = [
    "kafka_to_tidelog",
    "kafka_to_tidelog_all",
    "tidelog_to_kafka",
    "tidelog_to_kafka_all",
]

_UINT32 = struct.Struct(">I")
# Tidelog's header up to its CRC: base_offset, batch_length, magic.
_TIDELOG_HEAD = struct.Struct(">qib")
assert _TIDELOG_HEAD.size == tidelog.CRC_OFFSET

# The 40 header bytes both layouts share, attributes .. record_count.
_SHARED = slice(kafka.ATTRIBUTES_OFFSET, kafka.HEADER_SIZE)
_SHARED_TIDELOG = slice(tidelog.ATTRIBUTES_OFFSET, tidelog.HEADER_SIZE)
assert _SHARED.stop - _SHARED.start == _SHARED_TIDELOG.stop - _SHARED_TIDELOG.start == 40


def kafka_to_tidelog(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[bytes, int]:
    """The Tidelog batch for the Kafka v2 batch at `pos`, and the Kafka batch's size.

    The base offset is kept (producers send 0); the leader epoch is dropped.
    """
    header, records = decode_batch(buf, pos, max_decompressed=max_decompressed)
    view = memoryview(buf)
    payload = compress(Compression(header.compression), tidelog.encode_payload(records))
    size = tidelog.HEADER_SIZE + len(payload)
    out = bytearray(size)
    _TIDELOG_HEAD.pack_into(out, 0, header.base_offset, size - tidelog.LOG_OVERHEAD, tidelog.MAGIC)
    out[_SHARED_TIDELOG] = view[pos + _SHARED.start : pos + _SHARED.stop]
    out[tidelog.HEADER_SIZE :] = payload
    crc = crc32c.crc32c(memoryview(out)[tidelog.CRC_START :])
    _UINT32.pack_into(out, tidelog.CRC_OFFSET, crc)
    return bytes(out), header.size


def tidelog_to_kafka(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    partition_leader_epoch: int = 0,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[bytes, int]:
    """The Kafka v2 batch for the Tidelog batch at `pos`, and the Tidelog batch's size."""
    try:
        header = tidelog.check_crc(buf, pos)
        _, records = tidelog.decode_payload(
            buf, pos, header=header, max_decompressed=max_decompressed
        )
    except CorruptMessage as exc:
        raise KafkaCodecError(KafkaError.CORRUPT_MESSAGE, exc.message) from exc
    payload = compress(Compression(header.compression), kafka.encode_records(records))
    view = memoryview(buf)
    shared = view[pos + _SHARED_TIDELOG.start : pos + _SHARED_TIDELOG.stop]
    out = kafka.assemble_batch(
        payload,
        shared,
        base_offset=header.base_offset,
        partition_leader_epoch=partition_leader_epoch,
    )
    return out, header.size


def _each_batch(
    convert: Callable[..., tuple[bytes, int]], buf: bytes | bytearray | memoryview, **kw: int
) -> bytes:
    out = []
    pos = 0
    while pos < len(buf):
        batch, size = convert(buf, pos, **kw)
        out.append(batch)
        pos += size
    return b"".join(out)


def kafka_to_tidelog_all(buf: bytes | bytearray | memoryview, **kw: int) -> bytes:
    """Every back-to-back Kafka batch in `buf` (a produce request's records) converted."""
    return _each_batch(kafka_to_tidelog, buf, **kw)


def tidelog_to_kafka_all(buf: bytes | bytearray | memoryview, **kw: int) -> bytes:
    """Every back-to-back Tidelog batch in `buf` (a fetch answer's records) converted."""
    return _each_batch(tidelog_to_kafka, buf, **kw)
