"""Batches of both layouts in one buffer: which layouts are there, and all of them in one.

A log holds the layout each producer sent (docs/kafka.md "Storage decision"):
Tidelog's (docs/protocol.md §3) from msgpack produces, Kafka's v2 from Kafka
Produces. A reader gets the batches as stored and converts only those not in the
layout it reads (`to_layout`): a Kafka consumer of msgpack-produced batches, a
msgpack consumer (without `kafka_batches`) of Kafka-produced ones. Batches already
in the wanted layout are copied as they are, in runs.

One `protocol.batch.ANY_LAYOUT` walk finds both; the per-record work is
protocol/kafka/convert.py's (column-wise for all but small batches). Errors are
CorruptMessage, whichever side found them. Stateless; thread-safe.
"""

from __future__ import annotations

from collections.abc import Sequence

from protocol.batch import (
    ANY_LAYOUT,
    CONTROL_MASK,
    F_ATTRIBUTES,
    F_BATCH_LENGTH,
    F_MAGIC,
    KAFKA_MAGIC,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_MASK,
    UNPRICED_NS,
    BatchHeader,
    BatchWalk,
    tally,
)
from protocol.errors import CorruptMessage
from protocol.kafka.control import AbortedFilter
from protocol.kafka.convert import conversion_cost_ns, kafka_to_tidelog, tidelog_to_kafka
from protocol.kafka.errors import KafkaCodecError

__all__ = ["conversion_cost", "drop_uncommitted", "layouts_of", "to_layout"]


def layouts_of(buf: bytes | bytearray | memoryview) -> int:
    """The layouts of the back-to-back batches in `buf`, as a bitmask of `1 << magic`
    (`protocol.batch.TIDELOG_BATCHES`, `KAFKA_BATCHES`); one struct read a batch.
    Bytes the walk cannot read add nothing: `to_layout` says what is wrong there."""
    layouts = 0
    for _, fields in BatchWalk(buf, layout=ANY_LAYOUT, whole=False):
        layouts |= 1 << fields[F_MAGIC]
    return layouts


def conversion_cost(buf: bytes | bytearray | memoryview) -> int:
    """What `to_layout` of `buf` costs at most, in nanoseconds (every batch priced as
    if converted; UNPRICED_NS when compressed or too many to price)."""
    if not buf:
        return 0
    block = tally(buf, layout=ANY_LAYOUT)
    return UNPRICED_NS if block.problem is not None else conversion_cost_ns(block)


def to_layout(buf: bytes | bytearray | memoryview, magic: int) -> bytes:
    """Every batch of `buf` in the layout of `magic` (MAGIC: Tidelog's, KAFKA_MAGIC:
    Kafka's v2), offsets, producer fields and timestamps kept; batches already in it
    copied as they are. A converted Tidelog batch gets partition leader epoch 0, as
    every stored Kafka batch has. Into Tidelog's layout, a Kafka control batch (a
    transaction marker, issue 36) has no §3 form and is left out, and a transactional
    batch becomes a plain one (its bit 4 cleared: §3 knows no transactions; a
    read_committed fetch has removed aborted ones before). CorruptMessage for bytes
    that are no batch."""
    if magic not in (MAGIC, KAFKA_MAGIC):
        raise ValueError(f"no batch layout has magic {magic}")
    view = memoryview(buf)
    out: list[bytes | memoryview] = []
    kept_from = 0  # where the run of batches already in the layout began
    walk = BatchWalk(buf, layout=ANY_LAYOUT)
    try:
        for pos, fields in walk:
            if fields[F_MAGIC] == magic:
                continue
            if kept_from < pos:
                out.append(view[kept_from:pos])
            if magic == KAFKA_MAGIC:
                converted, size = tidelog_to_kafka(buf, pos, fields=fields)
            elif fields[F_ATTRIBUTES] & CONTROL_MASK:
                converted, size = b"", fields[F_BATCH_LENGTH] + LOG_OVERHEAD
            else:
                converted, size = kafka_to_tidelog(buf, pos)
            out.append(converted)
            kept_from = pos + size
    except KafkaCodecError as exc:
        raise CorruptMessage(exc.message) from exc
    if walk.problem is not None:
        raise CorruptMessage(f"batch at byte {walk.position}: {walk.problem}")
    if kept_from == 0:
        return bytes(buf)
    out.append(view[kept_from:])
    return b"".join(out)


def drop_uncommitted(data: bytes, aborted: Sequence[tuple[int, int]]) -> tuple[bytes, int]:
    """Fetched batches (either layout) without markers and without the batches of the
    aborted transactions (`AbortedFilter`): what a read_committed reader that gets
    records, not batches, may see; and the offset after the last batch walked (-1:
    none), where such a reader goes on. One header walk; kept runs copied once."""
    skip = AbortedFilter(aborted)
    kept: list[bytes] = []
    run_start = 0
    next_offset = -1
    view = memoryview(data)
    for pos, fields in BatchWalk(data, whole=False, layout=ANY_LAYOUT):
        header = BatchHeader(*fields)
        next_offset = header.next_offset
        attributes = header.attributes
        if attributes & _TXN_BITS and (attributes & CONTROL_MASK or skip.aborted(header)):
            if attributes & CONTROL_MASK:
                skip.marker(data, pos, header)
            kept.append(bytes(view[run_start:pos]))
            run_start = pos + header.size
            continue
        if header.producer_id >= 0:
            skip.consume_up_to(header.last_offset)
    if run_start == 0:
        return data, next_offset
    kept.append(bytes(view[run_start:]))
    return b"".join(kept), next_offset


_TXN_BITS = TRANSACTIONAL_MASK | CONTROL_MASK
