"""Kafka's RecordBatch v2 (magic 2): the header layout, its CRC, and its varint records.

The header is a second `protocol.batch.BatchLayout` (`LAYOUT`, declared in
protocol/batch.py as `KAFKA_LAYOUT`: every offset, `BatchWalk` and `tally` work on it
as on Tidelog's). Big-endian:

    offset  type    field
    0       int64   base_offset
    8       int32   batch_length            bytes after this field (= size - 12)
    12      int32   partition_leader_epoch
    16      int8    magic                   2
    17      uint32  crc                     CRC-32C of bytes 21 .. end of batch
    21      int16   attributes              bits 0-2 compression, 3 timestamp type,
                                            4 transactional, 5 control, 6 delete horizon
    23      int32   last_offset_delta
    27      int64   base_timestamp
    35      int64   max_timestamp
    43      int64   producer_id
    51      int16   producer_epoch
    53      int32   base_sequence
    57      int32   record_count
    61      bytes   records                 compressed per attributes

From `attributes` on, the fields are Tidelog's (protocol/batch.py) byte for byte,
4 bytes further along. A record is

    varint  length          bytes after this field
    int8    attributes      unused, 0
    varlong timestamp_delta
    varint  offset_delta
    varint  key_length      -1 = null key
    bytes   key
    varint  value_length    -1 = null value
    bytes   value
    varint  header_count
    (varint key_length, UTF-8 key, varint value_length (-1 = null), value) * header_count

Records are handled as Tidelog's record tuples `(offset_delta, timestamp_delta,
key, value, headers)` so a conversion is one decode and one encode.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import crc32c

from protocol import batch as tidelog
from protocol.batch import (
    COMPRESSION_MASK,
    CONTROL_MASK,
    DELETE_HORIZON_MASK,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    HeaderFields,
)
from protocol.kafka import recordwalk
from protocol.kafka.columns import decode_columns, encode_columns
from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.kafka.varint import read_varint, varint

__all__ = [
    "COMPRESSION_MASK",
    "CONTROL_MASK",
    "CRC_START",
    "DECODE_COLUMNS_MIN_RECORDS",
    "DELETE_HORIZON_MASK",
    "ENCODE_COLUMNS_MIN_RECORDS",
    "HEADER",
    "HEADER_SIZE",
    "LAYOUT",
    "MAGIC",
    "TIMESTAMP_TYPE_MASK",
    "TRANSACTIONAL_MASK",
    "DeltaSummary",
    "KafkaBatchHeader",
    "assemble_batch",
    "decode_each",
    "decode_headers",
    "decode_records",
    "delta_summary",
    "encode_each",
    "encode_header_entries",
    "encode_records",
    "read_batch_header",
]

MAGIC = tidelog.KAFKA_MAGIC

# Kafka's own head, then Tidelog's header from `attributes` on, byte for byte: the
# one declaration every offset and tuple position below derives from (in
# protocol/batch.py, whose ANY_LAYOUT walk reads both layouts).
LAYOUT = tidelog.KAFKA_LAYOUT
HEADER = LAYOUT.header
HEADER_SIZE = LAYOUT.size  # 61
assert HEADER_SIZE == 61

BASE_OFFSET_OFFSET = LAYOUT.offset["base_offset"]
BATCH_LENGTH_OFFSET = LAYOUT.offset["batch_length"]
PARTITION_LEADER_EPOCH_OFFSET = LAYOUT.offset["partition_leader_epoch"]
MAGIC_OFFSET = LAYOUT.offset["magic"]
CRC_OFFSET = LAYOUT.offset["crc"]
ATTRIBUTES_OFFSET = LAYOUT.offset["attributes"]
CRC_START = LAYOUT.crc_start
LOG_OVERHEAD = LAYOUT.log_overhead
MIN_BATCH_LENGTH = LAYOUT.min_batch_length
# HeaderFields.size counts Tidelog's overhead: the same 12 bytes.
assert LOG_OVERHEAD == tidelog.LOG_OVERHEAD

# From these batch sizes on, the column-wise paths (columns.py) beat the per-record
# loops. Decoding walks the records in C, then slices with numpy: a fixed ~9 µs per
# batch against ~1 µs a record one at a time; encoding's numpy calls cost ~140 µs per
# batch against ~0.3 µs a record saved (100-byte values; measured crossovers about 10
# and 600 records, CPU time).
DECODE_COLUMNS_MIN_RECORDS = 12
ENCODE_COLUMNS_MIN_RECORDS = 640

# length, attributes, timestamp delta, offset delta, key length, value length and
# header count: one byte each at least.
MIN_RECORD_BYTES = 7

_UINT32 = struct.Struct(">I")
# The header up to the CRC: what a conversion writes itself (the rest it copies).
_HEAD = LAYOUT.head_before("crc")
RecordTuple = tuple[int, int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]


@dataclass(frozen=True, slots=True)
class KafkaBatchHeader(HeaderFields):
    """The 61-byte header of one Kafka v2 batch, parsed (fields in `LAYOUT`'s order;
    what follows from them is `HeaderFields`', shared with Tidelog's `BatchHeader`)."""

    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int


assert tuple(LAYOUT.index) == tuple(f.name for f in dataclasses.fields(KafkaBatchHeader))


def _corrupt(message: str) -> KafkaCodecError:
    return KafkaCodecError(KafkaError.CORRUPT_MESSAGE, message)


def read_batch_header(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    check_crc: bool = True,
    fields: tuple[int, ...] | None = None,
) -> KafkaBatchHeader:
    """Parse and check the whole v2 batch at `pos`: presence, magic, length, CRC-32C.

    `fields`: the raw header a `BatchWalk` with `LAYOUT` already read at `pos` (it
    checked presence, magic and length): only the CRC is left to check.
    """
    if fields is None:
        left = len(buf) - pos
        if pos < 0 or left < HEADER_SIZE:
            raise _corrupt(
                f"Kafka batch header at byte {pos} needs {HEADER_SIZE} bytes, {left} left"
            )
        header = KafkaBatchHeader(*HEADER.unpack_from(buf, pos))
        if header.magic != MAGIC:
            raise _corrupt(f"Kafka batch at byte {pos} has magic {header.magic}, expected {MAGIC}")
        if header.batch_length < MIN_BATCH_LENGTH or header.size > left:
            raise _corrupt(
                f"Kafka batch at byte {pos} has batch_length {header.batch_length}, "
                f"{left - LOG_OVERHEAD} bytes present"
            )
    else:
        header = KafkaBatchHeader(*fields)
    if check_crc:
        actual = crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + header.size])
        if actual != header.crc:
            raise _corrupt(
                f"Kafka batch at byte {pos} has CRC {header.crc:#010x}, computed {actual:#010x}"
            )
    return header


def decode_records(data: bytes, count: int) -> list[RecordTuple]:
    """`count` varint records from uncompressed `data`, as Tidelog record tuples.

    Batches of DECODE_COLUMNS_MIN_RECORDS or more are decoded column-wise (columns.py).
    """
    _check_count(data, count)
    if count >= DECODE_COLUMNS_MIN_RECORDS:
        return decode_columns(data, count, decode_headers)
    return decode_each(data, count)


class DeltaSummary(NamedTuple):
    """What a produce-side check needs from the records: are the offset deltas
    0, 1, 2, ... in order, and the largest timestamp delta."""

    counting: bool
    max_timestamp_delta: int


def delta_summary(data: bytes, count: int) -> DeltaSummary:
    """Summarise `count` records' deltas (count >= 1), every bound checked, in one
    walk in C (protocol/kafka/recordwalk.py) that copies no key or value."""
    _check_count(data, count)
    try:
        summary = recordwalk.summarize(data, count)
    except ValueError as exc:
        raise _corrupt(f"malformed records: {exc}") from exc
    return DeltaSummary(summary.first_misplaced < 0, summary.max_timestamp_delta)


def _check_count(data: bytes, count: int) -> None:
    # A record takes at least MIN_RECORD_BYTES: refuse a count the bytes cannot
    # hold before allocating anything for it.
    if count < 0 or count * MIN_RECORD_BYTES > len(data):
        raise _corrupt(f"batch claims {count} records in {len(data)} bytes")


def decode_each(data: bytes, count: int) -> list[RecordTuple]:
    """`decode_records` one record at a time: the reference, and faster for few records."""
    out: list[RecordTuple] = []
    append = out.append
    end = len(data)
    pos = 0
    try:
        for _ in range(count):
            length, pos = read_varint(data, pos, 5)
            record_end = pos + length
            if length < 0 or record_end > end:
                raise _corrupt(f"record of {length} bytes at byte {pos} runs past the records")
            timestamp_delta, pos = read_varint(data, pos + 1)
            offset_delta, pos = read_varint(data, pos, 5)
            size, pos = read_varint(data, pos, 5)
            if size < -1:
                raise _corrupt(f"record key length {size}")
            if size < 0:
                key = None
            else:
                key = data[pos : pos + size]
                pos += size
            size, pos = read_varint(data, pos, 5)
            if size < -1:
                raise _corrupt(f"record value length {size}")
            if size < 0:
                value = None
            else:
                value = data[pos : pos + size]
                pos += size
            header_count, pos = read_varint(data, pos, 5)
            headers: tuple[tuple[str, bytes | None], ...] = ()
            if header_count:
                headers, pos = decode_headers(data, pos, header_count, record_end)
            if pos != record_end:
                raise _corrupt(f"record ending at byte {pos} declared {length} bytes")
            append((offset_delta, timestamp_delta, key, value, headers))
    except (IndexError, ValueError, UnicodeDecodeError) as exc:
        raise _corrupt(f"malformed record at byte {pos}: {exc}") from exc
    if pos != end:
        raise _corrupt(f"{end - pos} bytes follow the batch's {count} records")
    return out


def decode_headers(
    data: bytes, pos: int, count: int, record_end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    """One record's headers; any damage (bad UTF-8 included) is CORRUPT_MESSAGE."""
    if count < 0 or count > record_end - pos:
        raise _corrupt(f"record claims {count} headers")
    headers = []
    try:
        for _ in range(count):
            size, pos = read_varint(data, pos, 5)
            if size < 0:
                raise _corrupt("record header with a null key")
            key = str(data[pos : pos + size], "utf-8")
            pos += size
            size, pos = read_varint(data, pos, 5)
            if size < -1:
                raise _corrupt(f"record header value length {size}")
            if size < 0:
                value = None
            else:
                value = data[pos : pos + size]
                pos += size
            headers.append((key, value))
    except (IndexError, ValueError) as exc:  # UnicodeDecodeError is a ValueError
        raise _corrupt(f"malformed record header at byte {pos}: {exc}") from exc
    return tuple(headers), pos


_NULL = varint(-1)
_NO_HEADERS = varint(0)


def encode_records(records: Sequence[Sequence[Any]]) -> bytes:
    """Varint records from Tidelog record tuples (or lists): the uncompressed payload.

    Batches of ENCODE_COLUMNS_MIN_RECORDS or more are encoded column-wise (columns.py).
    """
    if len(records) >= ENCODE_COLUMNS_MIN_RECORDS:
        return encode_columns(records, encode_header_entries)
    return encode_each(records)


def encode_header_entries(headers: Sequence[Sequence[Any]]) -> bytes:
    """A record's header entries (after their count)."""
    out = bytearray()
    for header_key, header_value in headers:
        raw = header_key.encode()
        out += varint(len(raw))
        out += raw
        if header_value is None:
            out += _NULL
        else:
            out += varint(len(header_value))
            out += header_value
    return bytes(out)


def encode_each(records: Sequence[Sequence[Any]]) -> bytes:
    """`encode_records` one record at a time: the reference, and faster for few records."""
    parts: list[bytes | bytearray] = []
    append = parts.append
    for offset_delta, timestamp_delta, key, value, headers in records:
        body = bytearray(b"\x00")
        body += varint(timestamp_delta)
        body += varint(offset_delta)
        if key is None:
            body += _NULL
        else:
            body += varint(len(key))
            body += key
        if value is None:
            body += _NULL
        else:
            body += varint(len(value))
            body += value
        if headers:
            body += varint(len(headers))
            body += encode_header_entries(headers)
        else:
            body += _NO_HEADERS
        append(varint(len(body)))
        append(body)
    return b"".join(parts)


def assemble_batch(
    records_payload: bytes,
    fields_from_attributes: bytes | memoryview,
    *,
    base_offset: int = 0,
    partition_leader_epoch: int = -1,
) -> bytes:
    """A v2 batch from its (compressed) records and the 40 header bytes from attributes on."""
    size = HEADER_SIZE + len(records_payload)
    out = bytearray(size)
    _HEAD.pack_into(out, 0, base_offset, size - LOG_OVERHEAD, partition_leader_epoch, MAGIC)
    out[CRC_START:HEADER_SIZE] = fields_from_attributes
    out[HEADER_SIZE:] = records_payload
    _UINT32.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[CRC_START:]))
    return bytes(out)
