"""Kafka v2 batches to Tidelog batches and back (PROTOCOL.md §3 <-> records.py).

The two headers hold the same fields from `attributes` on (40 bytes, same order,
widths and meanings), so a conversion copies them and rewrites only what sits in
front: Kafka's leader epoch and magic 2 against Tidelog's magic 1. The records
differ (varints against a msgpack array) and are decoded and re-encoded, then
compressed again with the batch's own codec. Keys, values, null against empty,
headers, timestamps and the timestamp type survive both ways.

Snappy: Java, kafka-python and aiokafka write xerial-framed snappy (a 16-byte
`82 'SNAPPY' 00` header, then int32-length-prefixed raw blocks); librdkafka writes
one raw block. Both are accepted; we write a raw block, which every client reads.

Transactional and control batches are refused (Tidelog has no transactions):
INVALID_RECORD. Every damaged input is KafkaCodecError(CORRUPT_MESSAGE).
"""

from __future__ import annotations

import struct

import cramjam
import crc32c

from protocol import batch as tidelog
from protocol.compression import Compression, compress, decompress
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka.errors import CORRUPT_MESSAGE, ERRORS_BY_NAME, KafkaCodecError

__all__ = [
    "XERIAL_MAGIC",
    "kafka_to_tidelog",
    "kafka_to_tidelog_all",
    "tidelog_to_kafka",
    "tidelog_to_kafka_all",
]

# xerial's snappy-java stream header: magic, then int32 version and int32 compatible version.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = len(XERIAL_MAGIC) + 8
_INT32 = struct.Struct(">i")
_UINT32 = struct.Struct(">I")
# Tidelog's header up to its CRC: base_offset, batch_length, magic.
_TIDELOG_HEAD = struct.Struct(">qib")
assert _TIDELOG_HEAD.size == tidelog.CRC_OFFSET

# The 40 header bytes both layouts share, attributes .. record_count.
_SHARED = slice(kafka.ATTRIBUTES_OFFSET, kafka.HEADER_SIZE)
_SHARED_TIDELOG = slice(tidelog.ATTRIBUTES_OFFSET, tidelog.HEADER_SIZE)
assert _SHARED.stop - _SHARED.start == _SHARED_TIDELOG.stop - _SHARED_TIDELOG.start == 40

INVALID_RECORD = ERRORS_BY_NAME["INVALID_RECORD"]


def _unxerial(data: memoryview, max_bytes: int) -> bytes:
    """Concatenate the raw blocks of a xerial snappy stream, under the cap."""
    pos = _XERIAL_HEADER_SIZE
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise KafkaCodecError(CORRUPT_MESSAGE, "xerial snappy block length truncated")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise KafkaCodecError(CORRUPT_MESSAGE, f"xerial snappy block of {size} bytes truncated")
        block = bytes(data[pos : pos + size])
        pos += size
        try:
            declared = cramjam.snappy.decompress_raw_len(block)
            if len(out) + declared > max_bytes:
                raise KafkaCodecError(
                    CORRUPT_MESSAGE, f"snappy payload inflates beyond the {max_bytes}-byte cap"
                )
            out += cramjam.snappy.decompress_raw(block)
        except cramjam.DecompressionError as exc:
            raise KafkaCodecError(CORRUPT_MESSAGE, f"bad xerial snappy block: {exc}") from exc
    return bytes(out)


def _inflate(codec: int, data: memoryview, max_bytes: int) -> bytes:
    if codec == Compression.SNAPPY and data[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        return _unxerial(data, max_bytes)
    try:
        return decompress(codec, data, max_bytes)
    except CorruptMessage as exc:
        raise KafkaCodecError(CORRUPT_MESSAGE, exc.message) from exc


def kafka_to_tidelog(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[bytes, int]:
    """The Tidelog batch for the Kafka v2 batch at `pos`, and the Kafka batch's size.

    The base offset is kept (producers send 0); the leader epoch is dropped.
    """
    header = kafka.read_batch_header(buf, pos)
    if header.attributes & (kafka.TRANSACTIONAL_MASK | kafka.CONTROL_MASK):
        raise KafkaCodecError(
            INVALID_RECORD,
            f"transactional or control batch (attributes {header.attributes:#06x}): "
            "transactions are not supported",
        )
    view = memoryview(buf)
    codec = header.compression
    if codec > Compression.ZSTD:
        raise KafkaCodecError(CORRUPT_MESSAGE, f"unknown compression codec {codec}")
    body = view[pos + kafka.HEADER_SIZE : pos + header.size]
    raw = _inflate(codec, body, max_decompressed) if codec else bytes(body)
    records = kafka.decode_records(raw, header.record_count)
    payload = compress(Compression(codec), tidelog.encode_payload(records))
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
        raise KafkaCodecError(CORRUPT_MESSAGE, exc.message) from exc
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


def kafka_to_tidelog_all(buf: bytes | bytearray | memoryview, **kw: int) -> bytes:
    """Every back-to-back Kafka batch in `buf` (a produce request's records) converted."""
    out = []
    pos = 0
    while pos < len(buf):
        batch, size = kafka_to_tidelog(buf, pos, **kw)
        out.append(batch)
        pos += size
    return b"".join(out)


def tidelog_to_kafka_all(buf: bytes | bytearray | memoryview, **kw: int) -> bytes:
    """Every back-to-back Tidelog batch in `buf` (a fetch answer's records) converted."""
    out = []
    pos = 0
    while pos < len(buf):
        batch, size = tidelog_to_kafka(buf, pos, **kw)
        out.append(batch)
        pos += size
    return b"".join(out)
