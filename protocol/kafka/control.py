"""Kafka's transaction markers: the v2 control batches that end a transaction.

A marker is a Kafka v2 batch with attributes control | transactional (0x30), no
compression, base sequence -1 and one record (Kafka's EndTransactionMarker):

    key    int16 version 0, int16 type (0 ABORT, 1 COMMIT)
    value  int16 version 0, int32 coordinator_epoch

`marker_batch` builds one (base offset 0: the log stamps it); `read_marker` reads
the type and coordinator epoch back from a stored control batch's bytes;
`AbortedFilter` is Kafka's read_committed batch filter, for our readers of fetched
batches (tidelog's Consumer, the Spark Data Source).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple

from protocol.batch import CONTROL_MASK, TRANSACTIONAL_MASK, HeaderFields
from protocol.kafka import records as kafka
from protocol.kafka.varint import read_varint, varint

__all__ = [
    "ABORT",
    "COMMIT",
    "CONTROL_ATTRIBUTES",
    "AbortedFilter",
    "Marker",
    "is_control",
    "marker_batch",
    "read_marker",
]

ABORT: Final = 0
COMMIT: Final = 1
CONTROL_ATTRIBUTES: Final = CONTROL_MASK | TRANSACTIONAL_MASK
_KEY = struct.Struct(">hh")
_VALUE = struct.Struct(">hi")
# attributes .. record_count: Tidelog's header fields from `attributes` on.
_FIELDS = struct.Struct(">hiqqqhii")


class Marker(NamedTuple):
    """One marker's record: whether it commits, and the coordinator epoch it carries."""

    commit: bool
    coordinator_epoch: int


def is_control(attributes: int) -> bool:
    return bool(attributes & CONTROL_MASK)


def marker_batch(
    producer_id: int, producer_epoch: int, *, commit: bool, coordinator_epoch: int, timestamp: int
) -> bytes:
    """The control batch of one COMMIT or ABORT marker (base offset 0)."""
    key = _KEY.pack(0, COMMIT if commit else ABORT)
    value = _VALUE.pack(0, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + varint(0)  # timestamp delta
        + varint(0)  # offset delta
        + varint(len(key))
        + key
        + varint(len(value))
        + value
        + varint(0)  # no headers
    )
    record = varint(len(body)) + body
    fields = _FIELDS.pack(
        CONTROL_ATTRIBUTES, 0, timestamp, timestamp, producer_id, producer_epoch, -1, 1
    )
    return kafka.assemble_batch(record, fields, partition_leader_epoch=0)


def read_marker(batch: bytes | bytearray | memoryview) -> Marker | None:
    """The marker a stored control batch holds (its whole bytes), or None when it holds
    none (the cleaner may empty one) or is no marker Kafka knows (a future type)."""
    data = memoryview(batch)
    if len(data) <= kafka.HEADER_SIZE:
        return None
    try:
        pos = kafka.HEADER_SIZE
        _, pos = read_varint(data, pos)  # record length
        pos += 1  # attributes
        _, pos = read_varint(data, pos)  # timestamp delta
        _, pos = read_varint(data, pos)  # offset delta
        key_length, pos = read_varint(data, pos)
        if key_length < _KEY.size:
            return None
        version, kind = _KEY.unpack_from(data, pos)
        pos += key_length
        value_length, pos = read_varint(data, pos)
        epoch = _VALUE.unpack_from(data, pos)[1] if value_length >= _VALUE.size else -1
    except (IndexError, ValueError, struct.error):
        return None
    if version < 0 or kind not in (ABORT, COMMIT):
        return None
    return Marker(kind == COMMIT, epoch)


class AbortedFilter:
    """Kafka's read_committed batch filter (its CompletedFetch): the aborted entries
    whose first offset is at or below a batch's last offset mark their producers
    aborted; an ABORT marker clears its producer; a transactional batch of an aborted
    producer is skipped. Per batch, never per record."""

    __slots__ = ("_aborted", "_pending")

    def __init__(self, aborted: Sequence[tuple[int, int]]) -> None:
        self._pending = sorted(aborted, key=lambda e: e[1], reverse=True)  # pop() = lowest
        self._aborted: set[int] = set()

    def consume_up_to(self, offset: int) -> None:
        pending = self._pending
        while pending and pending[-1][1] <= offset:
            self._aborted.add(pending.pop()[0])

    def aborted(self, header: HeaderFields) -> bool:
        """Whether a transactional batch is aborted data (its entries consumed first)."""
        self.consume_up_to(header.last_offset)
        return header.producer_id in self._aborted and not header.attributes & CONTROL_MASK

    def marker(self, data: bytes | memoryview, pos: int, header: HeaderFields) -> None:
        self.consume_up_to(header.last_offset)
        found = read_marker(memoryview(data)[pos : pos + header.size])
        if found is not None and not found.commit:
            self._aborted.discard(header.producer_id)


_TXN_BITS = TRANSACTIONAL_MASK | CONTROL_MASK
