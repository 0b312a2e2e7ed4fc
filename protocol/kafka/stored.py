"""A stored Kafka v2 batch as Tidelog's readers see it: its records, its keys, and
the batch rebuilt from surviving records (what the cleaner writes).

Storage keeps Kafka-produced batches verbatim beside Tidelog's (docs/kafka.md); its
header walk (`protocol.batch.ANY_LAYOUT`) yields both as the same raw header tuple,
so `protocol.batch.F_*` and `BatchHeader(*fields)` mean the same fields whatever the
magic. What differs is the records (varints, not msgpack) and where they start
(`records.HEADER_SIZE`): this module is that difference, for every reader outside
the Kafka path (the cleaner, Tidelog's client, `dump-log`, the Spark Data Source).
A batch's records are walked once in C into Tidelog's msgpack payload
(`tidelog_payload`, `recordwalk.transcode`), which msgspec decodes into Tidelog's
record tuples `(offset_delta, timestamp_delta, key, value, headers)` or straight
into a client's records, as it does Tidelog's own batches: no Python object per
record on the way. The Spark Data Source, which wants positions rather than
objects, walks many batches column-wise at once (`scan_run`).

Every damaged batch raises `protocol.errors.CorruptMessage` (cause chained), the
error Tidelog's readers already handle for their own layout.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator, Sequence
from operator import add, itemgetter
from typing import Any, NamedTuple

import crc32c
import msgspec
import numpy as np

from protocol.batch import (
    ANY_LAYOUT,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    BatchHeader,
    BatchWalk,
    HeaderFields,
)
from protocol.compression import Compression, compress
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka import recordwalk
from protocol.kafka.columns import RecordColumns, scan_columns
from protocol.kafka.errors import KafkaCodecError
from protocol.kafka.validate import inflate

__all__ = [
    "MAGIC",
    "RecordRun",
    "build_v2_batch",
    "check_stored_crc",
    "decode_stored",
    "is_kafka",
    "iter_any_headers",
    "keys_of_stored",
    "leader_epoch_of",
    "scan_run",
    "stored_payload",
    "tidelog_payload",
]

MAGIC = kafka.MAGIC
_EPOCH = slice(kafka.PARTITION_LEADER_EPOCH_OFFSET, kafka.MAGIC_OFFSET)
# The header fields from attributes on, packed as both layouts declare them.
_SHARED = struct.Struct(">" + "".join(code for _, code in kafka.LAYOUT.fields_from("attributes")))
_DELTA = itemgetter(0)
_KEY = itemgetter(2)
_TUPLES = msgspec.msgpack.Decoder(list[kafka.RecordTuple])


def is_kafka(header: HeaderFields) -> bool:
    """True for a Kafka v2 batch (magic 2), False for Tidelog's layout (magic 1)."""
    return header.magic == MAGIC


def leader_epoch_of(buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
    """The partition leader epoch of the Kafka batch at `pos` (outside the CRC)."""
    return int.from_bytes(buf[pos + _EPOCH.start : pos + _EPOCH.stop], "big", signed=True)


def stored_payload(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: HeaderFields,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """The uncompressed varint records of the Kafka batch at `pos` (xerial or raw
    snappy alike, under the decompression cap)."""
    view = memoryview(buf)[pos + kafka.HEADER_SIZE : pos + header.size]
    try:
        return inflate(header.compression, view, max_decompressed)
    except KafkaCodecError as exc:
        raise _corrupt(header, exc) from exc


def tidelog_payload(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: HeaderFields,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> bytes:
    """The records of the Kafka batch at `pos` as Tidelog's uncompressed msgpack
    payload (docs/protocol.md §3), walked once in C with every bound checked: the
    header's record count must be exactly the records its payload holds. Its CRC is
    the caller's."""
    if header.compression == Compression.NONE:  # walked in place, not copied first
        raw: bytes | memoryview = memoryview(buf)[pos + kafka.HEADER_SIZE : pos + header.size]
    else:
        raw = stored_payload(buf, pos, header, max_decompressed=max_decompressed)
    try:
        return recordwalk.transcode(raw, header.record_count)
    except ValueError as exc:
        raise CorruptMessage(
            f"Kafka batch at offset {header.base_offset}: malformed records: {exc}"
        ) from exc


def decode_stored(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: HeaderFields,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[kafka.RecordTuple]:
    """The record tuples of the Kafka batch at `pos` (its CRC is the caller's)."""
    return _TUPLES.decode(tidelog_payload(buf, pos, header, max_decompressed=max_decompressed))


class RecordRun(NamedTuple):
    """The records of consecutive Kafka batches, walked once: their payloads joined."""

    buffer: bytes  # every batch's records, uncompressed, back to back
    columns: RecordColumns  # positions into `buffer`
    headers: list[BatchHeader]  # the batches that hold records, in order
    counts: np.ndarray  # their record counts


def scan_run(
    buf: bytes | bytearray | memoryview,
    batches: Sequence[tuple[int, BatchHeader]],
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> RecordRun | None:
    """Walk the records of the Kafka batches `batches` (position, header) of `buf`
    column-wise in one pass, or None when none holds a record.

    Length-prefixed records back to back are one valid record stream whatever batch
    they came from, so many small batches (a Java producer's 16 KiB ones) cost one
    numpy walk, not one each. Every record must lie inside its own batch's payload:
    a record count that shifts records between batches is CorruptMessage, like any
    other damage.
    """
    parts: list[bytes] = []
    headers: list[BatchHeader] = []
    for pos, header in batches:
        if header.record_count:
            parts.append(stored_payload(buf, pos, header, max_decompressed=max_decompressed))
            headers.append(header)
    if not headers:
        return None
    counts = np.fromiter((h.record_count for h in headers), np.int64, len(headers))
    joined = b"".join(parts)
    total = int(counts.sum())
    if total * kafka.MIN_RECORD_BYTES > len(joined):
        raise CorruptMessage(f"Kafka batches claim {total} records in {len(joined)} bytes")
    try:
        columns = scan_columns(joined, total, kafka.decode_headers)
    except KafkaCodecError as exc:
        raise CorruptMessage(f"Kafka batch records do not decode: {exc.message}") from exc
    part_starts = np.zeros(len(parts), dtype=np.int64)
    np.cumsum([len(p) for p in parts[:-1]], out=part_starts[1:])
    owners = np.searchsorted(part_starts, columns.key_starts, "right") - 1
    if not np.array_equal(owners, np.repeat(np.arange(len(headers)), counts)):
        raise CorruptMessage("a Kafka batch's record count does not match its records")
    return RecordRun(joined, columns, headers, counts)


def keys_of_stored(
    buf: bytes | bytearray | memoryview,
    pos: int,
    header: HeaderFields,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[list[int], list[bytes | None]]:
    """The offset deltas and keys of the Kafka batch at `pos`, no value copied for
    batches walked column-wise (what the cleaner's offset map needs)."""
    raw = stored_payload(buf, pos, header, max_decompressed=max_decompressed)
    count = header.record_count
    try:
        if count >= kafka.DECODE_COLUMNS_MIN_RECORDS and count * kafka.MIN_RECORD_BYTES <= len(raw):
            columns = scan_columns(raw, count, kafka.decode_headers)
            return columns.offset_deltas.tolist(), _blobs(
                raw, columns.key_starts.tolist(), columns.key_lengths.tolist()
            )
        records = kafka.decode_records(raw, count)
    except KafkaCodecError as exc:
        raise _corrupt(header, exc) from exc
    return list(map(_DELTA, records)), list(map(_KEY, records))


def _blobs(raw: bytes, starts: list[int], lengths: list[int]) -> list[bytes | None]:
    """raw[start:start+length] per record, None where the length is -1 (C-level maps;
    nulls are rare, so those are patched after)."""
    keys: list[bytes | None] = list(
        map(raw.__getitem__, map(slice, starts, map(add, starts, lengths)))
    )
    if -1 in lengths:
        for i, length in enumerate(lengths):
            if length < 0:
                keys[i] = None
    return keys


def build_v2_batch(
    entries: Sequence[tuple[int, int, bytes | None, bytes | None, Sequence[Any]]],
    *,
    base_offset: int,
    base_timestamp: int,
    attributes: int,
    last_offset_delta: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    partition_leader_epoch: int,
) -> bytes:
    """A Kafka v2 batch of `(offset_delta, timestamp_ms, key, value, headers)` entries
    (Kafka's `MemoryRecords.buildRetainedRecordsInto`): the given header identity,
    timestamp deltas from `base_timestamp`, records compressed with the attributes'
    codec. `protocol.batch.build_batch`'s counterpart."""
    records = [
        (delta, ts - base_timestamp, key, value, headers)
        for delta, ts, key, value, headers in entries
    ]
    payload = compress(
        Compression(attributes & kafka.COMPRESSION_MASK), kafka.encode_records(records)
    )
    shared = _SHARED.pack(
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        len(entries),
    )
    return kafka.assemble_batch(
        payload, shared, base_offset=base_offset, partition_leader_epoch=partition_leader_epoch
    )


def _corrupt(header: HeaderFields, exc: KafkaCodecError) -> CorruptMessage:
    return CorruptMessage(f"Kafka batch at offset {header.base_offset}: {exc.message}")


def check_stored_crc(buf: bytes | bytearray | memoryview, pos: int, header: HeaderFields) -> None:
    """Raise CorruptMessage unless the Kafka batch at `pos` matches its CRC-32C."""
    actual = crc32c.crc32c(memoryview(buf)[pos + kafka.CRC_START : pos + header.size])
    if actual != header.crc:
        raise CorruptMessage(
            f"Kafka batch at offset {header.base_offset} (byte {pos}) has CRC "
            f"{header.crc:#010x}, computed {actual:#010x}"
        )


def iter_any_headers(buf: bytes | bytearray | memoryview) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch of back-to-back batches of either layout
    (a fetch answer: a trailing partial batch ends the walk); bytes that are no batch
    raise CorruptMessage."""
    walk = BatchWalk(buf, whole=False, layout=ANY_LAYOUT)
    for pos, fields in walk:
        yield pos, BatchHeader(*fields)
    if walk.problem is not None:
        raise CorruptMessage(f"batch at byte {walk.position}: {walk.problem}")
