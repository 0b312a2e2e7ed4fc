"""Reading and checking a whole Kafka v2 batch: header, CRC, payload, records.
(Transactional batches and markers read like any other since issue 36.)

`decode_batch` is what every reader of a Kafka batch needs (the conversion to
Tidelog's layout, a native store's fetch-side tools); `validate_batch` adds the
produce rules, mirroring protocol/batch.py's for Tidelog batches, so a broker
storing Kafka batches as they are can refuse what it must not append.

Snappy: Java, kafka-python and aiokafka write xerial-framed snappy (a 16-byte
`82 'SNAPPY' 00` header, version and compat ints, then int32-length-prefixed raw
blocks); librdkafka writes one raw block. Both are read, every block under the
same decompression cap as the other codecs (protocol/compression.py).
"""

from __future__ import annotations

import struct

import cramjam

from protocol import batch as tidelog
from protocol.compression import Compression, decompress
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka.errors import KafkaCodecError, KafkaError

__all__ = ["XERIAL_MAGIC", "decode_batch", "inflate", "inflate_batch", "validate_batch"]

# xerial's snappy-java stream header: magic, then int32 version and int32 compatible version.
XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER_SIZE = len(XERIAL_MAGIC) + 8
_INT32 = struct.Struct(">i")


def _corrupt(message: str) -> KafkaCodecError:
    return KafkaCodecError(KafkaError.CORRUPT_MESSAGE, message)


def _unxerial(data: memoryview, max_bytes: int) -> bytes:
    """Concatenate the raw blocks of a xerial snappy stream, under the cap."""
    pos = _XERIAL_HEADER_SIZE
    out = bytearray()
    while pos < len(data):
        if pos + 4 > len(data):
            raise _corrupt("xerial snappy block length truncated")
        (size,) = _INT32.unpack_from(data, pos)
        pos += 4
        if size < 0 or pos + size > len(data):
            raise _corrupt(f"xerial snappy block of {size} bytes truncated")
        block = bytes(data[pos : pos + size])
        pos += size
        try:
            declared = cramjam.snappy.decompress_raw_len(block)
            if len(out) + declared > max_bytes:
                raise _corrupt(f"snappy payload inflates beyond the {max_bytes}-byte cap")
            out += cramjam.snappy.decompress_raw(block)
        except cramjam.DecompressionError as exc:
            raise _corrupt(f"bad xerial snappy block: {exc}") from exc
    return bytes(out)


def inflate(codec: int, data: memoryview, max_bytes: int) -> bytes:
    """The uncompressed records of a batch payload (xerial or raw snappy alike)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.SNAPPY and data[: len(XERIAL_MAGIC)] == XERIAL_MAGIC:
        return _unxerial(data, max_bytes)
    try:
        return decompress(codec, data, max_bytes)
    except CorruptMessage as exc:
        raise _corrupt(exc.message) from exc


def decode_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
    fields: tuple[int, ...] | None = None,
) -> tuple[kafka.KafkaBatchHeader, list[kafka.RecordTuple]]:
    """The checked header and the record tuples of the Kafka batch at `pos`.

    Transactional and control batches are refused with INVALID_RECORD: Tidelog
    has no transactions, and a control batch holds markers, not records. `fields`:
    the raw header a `BatchWalk` with `records.LAYOUT` already read at `pos`.
    """
    header, raw = inflate_batch(buf, pos, max_decompressed=max_decompressed, fields=fields)
    return header, kafka.decode_records(raw, header.record_count)


def inflate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
    fields: tuple[int, ...] | None = None,
) -> tuple[kafka.KafkaBatchHeader, bytes]:
    """`decode_batch`'s checked header and the uncompressed records, not yet decoded."""
    header = _read_header(buf, pos, fields)
    return header, inflate(header.compression, _payload(buf, pos, header), max_decompressed)


def _read_header(
    buf: bytes | bytearray | memoryview, pos: int, fields: tuple[int, ...] | None = None
) -> kafka.KafkaBatchHeader:
    """The checked header: CRC, a known codec. Transactional batches and markers
    (control batches, issue 36) are read like any stored batch; a reader that hands
    records to users skips control batches itself (`CONTROL_MASK`)."""
    header = kafka.read_batch_header(buf, pos, fields=fields)
    if header.compression > Compression.ZSTD:
        raise _corrupt(f"unknown compression codec {header.compression}")
    return header


def _payload(
    buf: bytes | bytearray | memoryview, pos: int, header: kafka.KafkaBatchHeader
) -> memoryview:
    return memoryview(buf)[pos + kafka.HEADER_SIZE : pos + header.size]


def validate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> kafka.KafkaBatchHeader:
    """Check a produced Kafka batch as protocol/batch.py checks a Tidelog one.

    CRC, codec and well-formed records (CORRUPT_MESSAGE); at least one record,
    offset deltas 0..n-1 and `max_timestamp` matching the records (CreateTime);
    base offset 0 and no delete horizon (INVALID_RECORD). Records are walked
    column-wise and no key or value is copied (`records.delta_summary`).
    """
    header = _read_header(buf, pos)
    where = f"Kafka batch at byte {pos}"
    if header.attributes & kafka.CONTROL_MASK:
        raise KafkaCodecError(
            KafkaError.INVALID_RECORD, "Clients are not allowed to write control records"
        )
    if header.base_offset != 0:
        raise KafkaCodecError(
            KafkaError.INVALID_RECORD, f"{where} has base_offset {header.base_offset}"
        )
    if header.attributes & kafka.DELETE_HORIZON_MASK:
        raise KafkaCodecError(
            KafkaError.INVALID_RECORD, f"{where} sets the delete-horizon attribute"
        )
    if header.record_count < 1:
        raise _corrupt(f"{where} holds no records")
    raw = inflate(header.compression, _payload(buf, pos, header), max_decompressed)
    summary = kafka.delta_summary(raw, header.record_count)
    if header.last_offset_delta != header.record_count - 1 or not summary.counting:
        raise _corrupt(f"{where}: offset deltas must be 0, 1, 2, ... in order")
    if not header.attributes & kafka.TIMESTAMP_TYPE_MASK:
        largest = header.base_timestamp + summary.max_timestamp_delta
        if largest != header.max_timestamp:
            raise _corrupt(
                f"{where}: max_timestamp {header.max_timestamp} differs from the largest "
                f"record timestamp {largest}"
            )
    return header
