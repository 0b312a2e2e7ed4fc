"""Kafka's LogValidator for one produced v2 batch that is stored as it was sent.

A Kafka Produce keeps the producer's bytes (docs/kafka.md), so nothing is converted
and these checks are all that stands between a client and the log: the CRC-32C, a
known codec, the header's offset range against its record count (Kafka's
`validateBatch`), no control batch from a client, a producer id on a transactional
batch (issue 36: the producer state checks its epoch and sequence, and the log opens
its transaction), and every record walked once
(Kafka's `validateRecord`): well formed, offset deltas 0..n-1, a key on a compacted
topic, each CreateTime timestamp within the topic's bounds. `max_timestamp` is
computed from the records, as Kafka does before it writes a batch; the caller
overwrites the header field when it differs.

Errors are protocol.errors' (CorruptMessage, InvalidRecord, InvalidTimestamp), the
ones storage.validator raises for Tidelog batches, with Kafka's messages where Kafka
has one.
"""

from __future__ import annotations

from typing import NamedTuple

import crc32c
import numpy as np

from protocol import batch as tidelog
from protocol.batch import TimestampType
from protocol.compression import Compression
from protocol.errors import CorruptMessage, InvalidRecord, InvalidTimestamp
from protocol.kafka import records as kafka
from protocol.kafka import recordwalk
from protocol.kafka.errors import KafkaCodecError
from protocol.kafka.recordwalk import RecordSummary
from protocol.kafka.validate import inflate

__all__ = ["ProducedBatch", "check_produced"]

# Positions in the raw header tuple of the ANY_LAYOUT walk: Tidelog's (protocol.batch),
# a Kafka header being read with its leader epoch skipped.
_I = tidelog.LAYOUT.index
_BASE_OFFSET, _BATCH_LENGTH, _MAGIC, _CRC = (
    _I["base_offset"],
    _I["batch_length"],
    _I["magic"],
    _I["crc"],
)
_ATTRIBUTES, _LAST_OFFSET_DELTA, _BASE_TIMESTAMP = (
    _I["attributes"],
    _I["last_offset_delta"],
    _I["base_timestamp"],
)
_PRODUCER_ID, _PRODUCER_EPOCH, _BASE_SEQUENCE, _RECORD_COUNT = (
    _I["producer_id"],
    _I["producer_epoch"],
    _I["base_sequence"],
    _I["record_count"],
)

# Kafka's RecordBatch.NO_TIMESTAMP: a record without a timestamp passes every bound.
NO_TIMESTAMP = -1
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
# Indexed by whether attribute bit 3 is set (calling the enum costs ~0.7 µs).
_TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)


class ProducedBatch(NamedTuple):
    """What the log needs from a checked batch: its offset count, its real largest
    timestamp, and its producer fields (-1: not idempotent)."""

    record_count: int
    last_offset_delta: int
    max_timestamp: int  # from the records (NO_TIMESTAMP if none has one)
    timestamp_type: TimestampType
    producer_id: int
    producer_epoch: int
    base_sequence: int
    attributes: int
    size: int  # bytes of the whole batch, header included


def check_produced(
    buf: bytes | bytearray | memoryview,
    pos: int,
    fields: tuple[int, ...],
    *,
    max_decompressed: int,
    timestamp_bounds: tuple[int, int] | None,
    compacted: bool,
) -> ProducedBatch:
    """Check the Kafka v2 batch at `pos` as Kafka's LogValidator checks a client's.

    `fields`: its raw header from the ANY_LAYOUT walk (presence, magic and length
    checked there). `timestamp_bounds` (low, high): every CreateTime record's
    timestamp must lie within, or be NO_TIMESTAMP (None: no bounds, as on a
    LogAppendTime topic). `compacted`: every record needs a key.
    """
    size = fields[_BATCH_LENGTH] + kafka.LOG_OVERHEAD
    where = f"Kafka batch at byte {pos}"
    _check_header(buf, pos, fields, size, where)
    attributes, count = fields[_ATTRIBUTES], fields[_RECORD_COUNT]
    data = _records(buf, pos, size, attributes, max_decompressed)
    summary = _walk(data, count, where)
    if summary.first_misplaced >= 0:
        raise CorruptMessage(
            f"{where}: record {summary.first_misplaced} has the wrong offset delta "
            "(inner offsets must be 0, 1, 2, ... in order)"
        )
    if compacted and summary.first_null_key >= 0:
        raise InvalidRecord("Compacted topic cannot accept message without key")
    base = fields[_BASE_TIMESTAMP]
    smallest = base + summary.min_timestamp_delta
    largest = base + summary.max_timestamp_delta
    if smallest < _INT64_MIN or largest > _INT64_MAX:
        raise CorruptMessage(f"{where}: a record timestamp overflows 64 bits")
    timestamp_type = _TIMESTAMP_TYPES[(attributes & kafka.TIMESTAMP_TYPE_MASK) != 0]
    if timestamp_bounds is not None and timestamp_type == TimestampType.CREATE_TIME:
        low, high = timestamp_bounds
        undated = smallest == largest == NO_TIMESTAMP  # no record has a timestamp
        if not undated and (smallest < low or largest > high):
            _check_each_timestamp(data, count, base, low, high)
    return ProducedBatch(
        count,
        fields[_LAST_OFFSET_DELTA],
        max(largest, NO_TIMESTAMP),
        timestamp_type,
        fields[_PRODUCER_ID],
        fields[_PRODUCER_EPOCH],
        fields[_BASE_SEQUENCE],
        attributes,
        size,
    )


def _check_header(
    buf: bytes | bytearray | memoryview, pos: int, fields: tuple[int, ...], size: int, where: str
) -> None:
    """Kafka's batch-level checks (`validateBatch`), the CRC and the codec."""
    if fields[_MAGIC] != kafka.MAGIC or pos < 0 or pos + size > len(buf):
        raise CorruptMessage(f"{where} is no whole Kafka v2 batch")
    actual = crc32c.crc32c(memoryview(buf)[pos + kafka.CRC_START : pos + size])
    if actual != fields[_CRC]:
        raise CorruptMessage(
            f"{where}: record is corrupt (stored crc = {fields[_CRC]}, computed crc = {actual})"
        )
    attributes = fields[_ATTRIBUTES]
    if attributes & kafka.COMPRESSION_MASK > Compression.ZSTD:
        raise CorruptMessage(f"{where}: unknown compression codec {attributes & 7}")
    if attributes & kafka.CONTROL_MASK:
        raise InvalidRecord("Clients are not allowed to write control records")
    if attributes & kafka.TRANSACTIONAL_MASK and fields[_PRODUCER_ID] < 0:
        raise InvalidRecord(
            f"{where} is transactional without a producer id: a transactional producer "
            "sends the id and epoch InitProducerId gave it"
        )
    if attributes & kafka.DELETE_HORIZON_MASK:
        raise InvalidRecord(f"{where} sets the delete-horizon attribute")
    base_offset, last_delta = fields[_BASE_OFFSET], fields[_LAST_OFFSET_DELTA]
    if base_offset != 0:
        raise InvalidRecord(f"{where} has base_offset {base_offset}, a producer sends 0")
    count = fields[_RECORD_COUNT]
    if last_delta < 0:
        raise InvalidRecord(
            f"Batch has an invalid offset range: [{base_offset}, {base_offset + last_delta}]"
        )
    if count <= 0:
        raise InvalidRecord(f"Invalid reported count for record batch: {count}")
    if last_delta + 1 != count:
        raise InvalidRecord(
            f"Inconsistent batch offset range [{base_offset}, {base_offset + last_delta}] "
            f"and count of records {count}"
        )
    if fields[_PRODUCER_ID] >= 0 and fields[_BASE_SEQUENCE] < 0:
        raise InvalidRecord(
            f"Invalid sequence number {fields[_BASE_SEQUENCE]} in record batch with "
            f"producerId {fields[_PRODUCER_ID]}"
        )


def _records(
    buf: bytes | bytearray | memoryview, pos: int, size: int, attributes: int, cap: int
) -> bytes | memoryview:
    """The uncompressed records (a view of `buf` when the batch is not compressed)."""
    payload = memoryview(buf)[pos + kafka.HEADER_SIZE : pos + size]
    codec = attributes & kafka.COMPRESSION_MASK
    if codec == Compression.NONE:
        return payload
    try:
        return inflate(codec, payload, cap)
    except KafkaCodecError as exc:
        raise CorruptMessage(exc.message) from exc


def _walk(data: bytes | memoryview, count: int, where: str) -> RecordSummary:
    """One pass over the records in C, every bound checked; damage is CorruptMessage."""
    try:
        return recordwalk.summarize(data, count)
    except ValueError as exc:
        raise CorruptMessage(f"{where}: {exc}") from exc


def _check_each_timestamp(
    data: bytes | memoryview, count: int, base: int, low: int, high: int
) -> None:
    """Raise InvalidTimestamp for the first record outside [low, high] that has a
    timestamp (Kafka's message). Reached only when the smallest or largest is out of
    bounds: a refusal, or records without a timestamp among dated ones."""
    deltas = recordwalk.columns(data, count)[:, recordwalk.TIMESTAMP_DELTA]
    timestamps = deltas + base  # no overflow: the smallest and largest were checked
    low, high = max(low, _INT64_MIN), min(high, _INT64_MAX)
    outside = np.flatnonzero(
        (timestamps != NO_TIMESTAMP) & ((timestamps < low) | (timestamps > high))
    )
    if len(outside):
        index = int(outside[0])
        raise InvalidTimestamp(
            f"Timestamp {int(timestamps[index])} of message with offset {index} is out of "
            f"range. The timestamp should be within [{low}, {high}]"
        )
