"""Kafka v2 batches to Tidelog batches and back (docs/protocol.md §3 <-> records.py).

The two headers hold the same fields from `attributes` on (40 bytes, same order,
widths and meanings), so a conversion copies them and rewrites only what sits in
front: Kafka's leader epoch and magic 2 against Tidelog's magic 1. The records
differ (varints against a msgpack array): Kafka's are walked once in C straight into
Tidelog's msgpack (`recordwalk.transcode`, no Python object per record), Tidelog's
are decoded and re-encoded; then compressed again with the batch's own codec. Keys,
values, null against empty, headers, timestamps and the timestamp type survive both
ways.

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
from protocol.kafka.recordwalk import transcode
from protocol.kafka.validate import inflate_batch

__all__ = [
    "CONVERT_NS_PER_BYTE",
    "CONVERT_NS_PER_RECORD",
    "conversion_cost_ns",
    "kafka_to_tidelog",
    "kafka_to_tidelog_all",
    "tally_kafka",
    "tally_tidelog",
    "tidelog_to_kafka",
    "tidelog_to_kafka_all",
]

_UINT32 = struct.Struct(">I")
_ATTRIBUTES = struct.Struct(">h")
# Tidelog's header up to its CRC: base_offset, batch_length, magic.
_TIDELOG_HEAD = tidelog.LAYOUT.head_before("crc")
assert _TIDELOG_HEAD.size == tidelog.CRC_OFFSET

# A conversion decodes and re-encodes every record: ~0.5-1 µs a record column-wise
# (batches of DECODE_COLUMNS_MIN_RECORDS or more), ~2 µs one at a time, ~1 µs a record
# header; and copies, checksums and compresses every byte (~5 ns a byte uncompressed).
CONVERT_NS_PER_RECORD = 1_000
CONVERT_NS_PER_BYTE = 5

# The 40 header bytes both layouts share, attributes .. record_count.
_SHARED = slice(kafka.ATTRIBUTES_OFFSET, kafka.HEADER_SIZE)
_SHARED_TIDELOG = slice(tidelog.ATTRIBUTES_OFFSET, tidelog.HEADER_SIZE)
assert _SHARED.stop - _SHARED.start == _SHARED_TIDELOG.stop - _SHARED_TIDELOG.start == 40


def kafka_to_tidelog(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = tidelog.DEFAULT_MAX_DECOMPRESSED_BYTES,
    fields: tuple[int, ...] | None = None,
) -> tuple[bytes, int]:
    """The Tidelog batch for the Kafka v2 batch at `pos`, and the Kafka batch's size.

    The base offset is kept (producers send 0); the leader epoch is dropped, and so is
    the transactional bit (§3 has none; control batches are not converted at all:
    `protocol.layouts.to_layout` leaves them out).
    `fields`: its raw header, when a `BatchWalk` (a `tally`) already read it.
    """
    header, raw = inflate_batch(buf, pos, max_decompressed=max_decompressed, fields=fields)
    try:
        records = transcode(raw, header.record_count)
    except ValueError as exc:
        raise KafkaCodecError(KafkaError.CORRUPT_MESSAGE, f"malformed records: {exc}") from exc
    view = memoryview(buf)
    payload = compress(Compression(header.compression), records)
    size = tidelog.HEADER_SIZE + len(payload)
    out = bytearray(size)
    _TIDELOG_HEAD.pack_into(out, 0, header.base_offset, size - tidelog.LOG_OVERHEAD, tidelog.MAGIC)
    out[_SHARED_TIDELOG] = view[pos + _SHARED.start : pos + _SHARED.stop]
    if header.attributes & kafka.TRANSACTIONAL_MASK:  # §3 knows no transactions
        _ATTRIBUTES.pack_into(out, tidelog.ATTRIBUTES_OFFSET, header.attributes & ~0x30)
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
    fields: tuple[int, ...] | None = None,
) -> tuple[bytes, int]:
    """The Kafka v2 batch for the Tidelog batch at `pos`, and the Tidelog batch's size.
    `fields`: its raw header, when a `BatchWalk` (a `tally`) already read it."""
    try:
        header = tidelog.check_crc(buf, pos, fields=fields)
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


def tally_kafka(buf: bytes | bytearray | memoryview) -> tidelog.BlockTally:
    """The header walk of a produce request's Kafka batches (what prices and then
    drives their conversion: `conversion_cost_ns`, `kafka_to_tidelog_all`)."""
    return tidelog.tally(buf, layout=kafka.LAYOUT)


def tally_tidelog(buf: bytes | bytearray | memoryview) -> tidelog.BlockTally:
    """The header walk of fetched Tidelog batches, for `tidelog_to_kafka_all`."""
    return tidelog.tally(buf)


def conversion_cost_ns(block: tidelog.BlockTally) -> int:
    """What converting a tallied block costs, either way, in nanoseconds; UNPRICED_NS
    when compressed (its records are unknown until inflated) or not wholly tallied."""
    if block.compressed or not block.priced:
        return tidelog.UNPRICED_NS
    return max(block.records, 0) * CONVERT_NS_PER_RECORD + block.end * CONVERT_NS_PER_BYTE


def _explain_kafka(buf: bytes | bytearray | memoryview, pos: int) -> None:
    kafka.read_batch_header(buf, pos, check_crc=False)  # raises, saying what is wrong


def _explain_tidelog(buf: bytes | bytearray | memoryview, pos: int) -> None:
    try:
        tidelog.read_header(buf, pos)
        tidelog.check_crc(buf, pos)
    except CorruptMessage as exc:
        raise KafkaCodecError(KafkaError.CORRUPT_MESSAGE, exc.message) from exc


def _each_batch(
    convert: Callable[..., tuple[bytes, int]],
    explain: Callable[[bytes | bytearray | memoryview, int], None],
    layout: tidelog.BatchLayout,
    buf: bytes | bytearray | memoryview,
    block: tidelog.BlockTally | None,
    **kw: int,
) -> bytes:
    """Convert every batch of `buf`: those `block` tallied, then the rest, walked from
    where the tally stopped (one header walk in all)."""
    out = []
    start = 0
    if block is not None:
        out = [convert(buf, pos, fields=fields, **kw)[0] for pos, fields in block.headers]
        start = block.end
    walk = tidelog.BatchWalk(buf, start, layout=layout)
    out.extend(convert(buf, pos, fields=fields, **kw)[0] for pos, fields in walk)
    if walk.problem is not None:
        explain(buf, walk.position)
        raise KafkaCodecError(
            KafkaError.CORRUPT_MESSAGE, f"batch at byte {walk.position}: {walk.problem}"
        )
    return b"".join(out)


def kafka_to_tidelog_all(
    buf: bytes | bytearray | memoryview, block: tidelog.BlockTally | None = None, **kw: int
) -> bytes:
    """Every back-to-back Kafka batch in `buf` (a produce request's records) converted;
    `block`: its `tally_kafka`, when the caller priced the conversion with it."""
    return _each_batch(kafka_to_tidelog, _explain_kafka, kafka.LAYOUT, buf, block, **kw)


def tidelog_to_kafka_all(
    buf: bytes | bytearray | memoryview, block: tidelog.BlockTally | None = None, **kw: int
) -> bytes:
    """Every back-to-back Tidelog batch in `buf` (a fetch answer's records) converted;
    `block`: its `tally_tidelog`, when the caller priced the conversion with it."""
    return _each_batch(tidelog_to_kafka, _explain_tidelog, tidelog.LAYOUT, buf, block, **kw)
