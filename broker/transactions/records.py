"""`__transaction_state` records in Kafka's `TransactionLog` format.

Key (TransactionLogKey, version 0, not flexible)::

    int16 version (0) | string transactional_id (int16 length + UTF-8)

Value (TransactionLogValue, written at version 0, not flexible; version 1 is read
too, its tagged fields skipped)::

    int16 version | int64 producer_id | int16 producer_epoch | int32 timeout_ms
    | int8 status | int32 n (or -1: null) x (string topic | int32 m x int32 partition)
    | int64 last_update_ms | int64 start_ms

A value of None (a tombstone) removes the id: written when an id expires
(`transactional.id.expiration.ms`), so the compacted topic forgets it.
A transaction's TxnOffsetCommits are in `partitions` as Kafka keeps them: the
group's `__consumer_offsets` partition (AddOffsetsToTxn adds it), whose marker
commits or drops every pending offset of the producer.
"""

from __future__ import annotations

import struct

import msgpack

from broker.transactions.state import TopicPartition, TxnMetadata, TxnState

__all__ = [
    "PendingOffsets",
    "RecordError",
    "decode_key",
    "decode_pending_key",
    "decode_pending_value",
    "decode_value",
    "encode_key",
    "encode_pending_key",
    "encode_pending_value",
    "encode_value",
    "key_version",
]

KEY_VERSION = 0
VALUE_VERSION = 0

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_HEAD = struct.Struct(">hqhib")  # version, producer id, epoch, timeout, status
_TAIL = struct.Struct(">qq")  # last update, start


class RecordError(ValueError):
    """A `__transaction_state` record that is not Kafka's format."""


def _string(text: str) -> bytes:
    raw = text.encode()
    return _I16.pack(len(raw)) + raw


def encode_key(transactional_id: str) -> bytes:
    return _I16.pack(KEY_VERSION) + _string(transactional_id)


def decode_key(data: bytes) -> str:
    try:
        (version,) = _I16.unpack_from(data, 0)
        (size,) = _I16.unpack_from(data, 2)
    except struct.error as exc:
        raise RecordError("short transaction log key") from exc
    if version != KEY_VERSION or size < 0 or 4 + size != len(data):
        raise RecordError(f"not a transaction log key (version {version})")
    return data[4 : 4 + size].decode()


def encode_value(meta: TxnMetadata) -> bytes:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(meta.partitions):
        by_topic.setdefault(topic, []).append(partition)
    entries = [(topic, parts) for topic, parts in by_topic.items()]
    parts = [
        _HEAD.pack(
            VALUE_VERSION, meta.producer_id, meta.producer_epoch, meta.timeout_ms, meta.state.value
        ),
        _I32.pack(len(entries)),
    ]
    for topic, partitions in entries:
        parts.append(_string(topic))
        parts.append(_I32.pack(len(partitions)))
        parts.extend(_I32.pack(p) for p in partitions)
    parts.append(_TAIL.pack(meta.last_update_ms, meta.start_ms))
    return b"".join(parts)


class _Reader:
    __slots__ = ("data", "pos")

    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        try:
            values = fmt.unpack_from(self.data, self.pos)
        except struct.error as exc:
            raise RecordError("short transaction log value") from exc
        self.pos += fmt.size
        return values

    def string(self) -> str:
        (size,) = self.take(_I16)
        if size < 0 or self.pos + size > len(self.data):
            raise RecordError("bad string in transaction log value")
        raw = self.data[self.pos : self.pos + size]
        self.pos += size
        return raw.decode()


def decode_value(transactional_id: str, data: bytes) -> TxnMetadata:
    reader = _Reader(data)
    version, producer_id, epoch, timeout_ms, status = reader.take(_HEAD)
    if version not in (0, 1):
        raise RecordError(f"unknown transaction log value version {version}")
    if version == 1:
        raise RecordError("flexible transaction log values (version 1) are not read")
    try:
        state = TxnState(status)
    except ValueError as exc:
        raise RecordError(f"unknown transaction status {status}") from exc
    (count,) = reader.take(_I32)
    partitions: set[TopicPartition] = set()
    for _ in range(max(count, 0)):
        topic = reader.string()
        (n,) = reader.take(_I32)
        ids = [reader.take(_I32)[0] for _ in range(max(n, 0))]
        partitions.update((topic, p) for p in ids)
    last_update_ms, start_ms = reader.take(_TAIL)
    return TxnMetadata(
        transactional_id=transactional_id,
        producer_id=producer_id,
        producer_epoch=epoch,
        timeout_ms=timeout_ms,
        state=state,
        partitions=frozenset(partitions),
        start_ms=start_ms,
        last_update_ms=last_update_ms,
    )


# --- Tidelog's pending transactional offsets (key version 1) ------------------------
#
# Key:   int16 version (1) | string transactional_id | string group
# Value: msgpack [producer_id, producer_epoch, [[topic, partition, offset, metadata], ...]]
# A tombstone once the transaction completes. Kafka keeps these in
# `__consumer_offsets` as transactional batches; Tidelog keeps them with the
# transaction (see docs/transactions.md).

PENDING_KEY_VERSION = 1

PendingOffsets = dict[TopicPartition, tuple[int, str]]


def encode_pending_key(transactional_id: str, group: str) -> bytes:
    return _I16.pack(PENDING_KEY_VERSION) + _string(transactional_id) + _string(group)


def key_version(data: bytes) -> int:
    try:
        return int(_I16.unpack_from(data, 0)[0])
    except struct.error as exc:
        raise RecordError("short transaction log key") from exc


def decode_pending_key(data: bytes) -> tuple[str, str]:
    reader = _Reader(data)
    (version,) = reader.take(_I16)
    if version != PENDING_KEY_VERSION:
        raise RecordError(f"not a pending offsets key (version {version})")
    tid, group = reader.string(), reader.string()
    if reader.pos != len(data):
        raise RecordError("trailing bytes in a pending offsets key")
    return tid, group


def encode_pending_value(producer_id: int, epoch: int, offsets: PendingOffsets) -> bytes:
    rows = [[t, p, off, meta] for (t, p), (off, meta) in sorted(offsets.items())]
    return bytes(msgpack.packb([producer_id, epoch, rows]))


def decode_pending_value(data: bytes) -> tuple[int, int, PendingOffsets]:
    try:
        producer_id, epoch, rows = msgpack.unpackb(data)
        offsets = {(str(t), int(p)): (int(off), str(meta)) for t, p, off, meta in rows}
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        raise RecordError(f"bad pending offsets value: {exc}") from exc
    return int(producer_id), int(epoch), offsets
