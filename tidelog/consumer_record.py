"""`ConsumerRecord` and `decode_fetched`: fetched batches straight into records.

A fetch answer holds whole batches; the consumer turns every record into a
`ConsumerRecord` with kafka-python's attributes (topic, partition, offset,
timestamp, timestamp_type, key, value, headers). That is the client's hot path,
so records are built by msgspec's C decoder directly from each batch's payload,
one call per batch, with no Python bytecode and no intermediate tuples per record:

- `ConsumerRecord` is an array-like msgspec Struct whose first five fields are the
  payload's `[offset_delta, timestamp_delta, key, value, headers]`, in wire order.
- Its sixth field, the batch's `_BatchOrigin` (topic, partition, base offset and
  timestamps), is not on the wire: the decoder fills it from its default factory,
  the `get` of a context variable that `decode_batch` sets around the decode (one
  C call per record, no bytecode). A context variable is per thread and per trio
  task, so threads decode side by side without a lock and never see each other's
  origin. (Setting the origin after the decode, with `force_setattr` mapped over
  the records, cost 6% more instructions per batch: callgrind, docs/benchmarks.md.)
- `offset` and `timestamp` are properties (base + delta, or the broker's time
  for a LogAppendTime batch); topic, partition and timestamp_type read the origin.

A Kafka v2 batch (a Kafka producer's, stored as it was sent, and fetched as it is
when the client asks for that layout: docs/protocol.md) has its varint records
walked once in C into Tidelog's msgpack payload (`protocol.kafka.stored.tidelog_payload`),
which the same decoder turns into records, the origin filled the same way: a Kafka
batch costs about what a Tidelog one does (docs/kafka.md, "Storage decision").

Records are untracked by the garbage collector (`gc=False`: their fields are
ints, bytes, str and tuples, never cycles), so decoding millions of them triggers
no collections. A record is immutable, hashable, picklable, and equal to another
when all eight attributes are; it is not a tuple (no indexing or unpacking).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from contextvars import ContextVar
from operator import attrgetter
from typing import Any

import msgspec

from protocol.batch import (
    ANY_LAYOUT,
    CONTROL_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    HEADER_SIZE,
    KAFKA_MAGIC,
    TIMESTAMP_TYPE_MASK,
    TRANSACTIONAL_MASK,
    BatchHeader,
    BatchWalk,
    TimestampType,
    check_crc,
    decode_payload,
)
from protocol.compression import decompress
from protocol.errors import CorruptMessage

Headers = tuple[tuple[str, bytes | None], ...]


class _BatchOrigin:
    """What every record of one batch shares: where it was read and its time base.

    A plain class on purpose: msgspec cannot decode one from msgpack, so a record
    array with a sixth item is refused instead of overriding the origin.
    """

    __slots__ = ("base_offset", "base_timestamp", "partition", "timestamp_type", "topic")

    def __init__(
        self,
        topic: str,
        partition: int,
        base_offset: int,
        base_timestamp: int,
        timestamp_type: int,
    ) -> None:
        self.topic = topic
        self.partition = partition
        self.base_offset = base_offset
        # LogAppendTime: the broker's time (max_timestamp), the same for every record.
        self.base_timestamp = base_timestamp
        self.timestamp_type = timestamp_type


# A record's origin outside a decode (never seen by users: `decode_batch` sets the real one).
_NO_ORIGIN = _BatchOrigin("", -1, -1, -1, 0)
# The origin of the batch being decoded in this thread or task.
_DECODING: ContextVar[_BatchOrigin] = ContextVar("tidelog_decoding_origin", default=_NO_ORIGIN)


class _RecordMeta(msgspec.StructMeta):
    """Builds a record from kafka-python's eight attributes (the decoder bypasses it)."""

    def __call__(
        cls,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Iterable[Iterable[Any]] = (),
    ) -> Any:
        origin = _BatchOrigin(topic, partition, offset, timestamp, int(timestamp_type))
        return super().__call__(0, 0, key, value, tuple(map(tuple, headers)), origin)


class ConsumerRecord(msgspec.Struct, metaclass=_RecordMeta, frozen=True, gc=False, array_like=True):
    """One record: `ConsumerRecord(topic, partition, offset, timestamp, timestamp_type,
    key, value, headers)`, kafka-python's attributes in its order."""

    _offset_delta: int
    _timestamp_delta: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    _origin: _BatchOrigin = msgspec.field(default_factory=_DECODING.get)

    topic = property(attrgetter("_origin.topic"))
    partition = property(attrgetter("_origin.partition"))
    timestamp_type = property(attrgetter("_origin.timestamp_type"))  # 0 CreateTime, 1 LogAppend

    @property
    def offset(self) -> int:
        return self._origin.base_offset + self._offset_delta

    @property
    def timestamp(self) -> int:
        origin = self._origin
        if origin.timestamp_type:  # LogAppendTime: the broker's time for the whole batch
            return origin.base_timestamp
        return origin.base_timestamp + self._timestamp_delta

    def _attributes(self) -> tuple[Any, ...]:
        return (
            self.topic,
            self.partition,
            self.offset,
            self.timestamp,
            self.timestamp_type,
            self.key,
            self.value,
            self.headers,
        )

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ConsumerRecord):
            return NotImplemented
        return self._attributes() == other._attributes()

    def __hash__(self) -> int:
        return hash(self._attributes())

    def __reduce__(self) -> tuple[type[ConsumerRecord], tuple[Any, ...]]:
        return ConsumerRecord, self._attributes()

    def __repr__(self) -> str:
        return (
            f"ConsumerRecord(topic={self.topic!r}, partition={self.partition}, "
            f"offset={self.offset}, timestamp={self.timestamp}, "
            f"timestamp_type={self.timestamp_type}, key={self.key!r}, value={self.value!r}, "
            f"headers={self.headers!r})"
        )


_RECORD_LIST = list[ConsumerRecord]
_RECORDS = msgspec.msgpack.Decoder(_RECORD_LIST)
_OFFSET_DELTA = attrgetter("_offset_delta")


def decode_fetched(
    topic: str,
    partition: int,
    data: bytes,
    position: int,
    *,
    check_crcs: bool = True,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> tuple[list[ConsumerRecord], int]:
    """Records at or after `position` in fetched batches, and the next position.

    A trailing partial batch (possible when a byte limit cut the answer) is left
    for the next fetch. After compaction offsets may have gaps, so the next
    position comes from the batch header, never from a record count.

    Transaction markers (Kafka control batches) are never records. `aborted`: a
    read_committed answer's aborted transactions, (producer id, first offset):
    their batches are skipped as Kafka's consumer skips them (per batch, see
    `AbortedFilter`); None (read_uncommitted) keeps every data batch.
    """
    records: list[ConsumerRecord] = []
    skip = None
    if aborted is not None:  # imported here: Kafka's codec loads numpy (see below)
        from protocol.kafka.control import AbortedFilter

        skip = AbortedFilter(aborted)
    for pos, header in _headers(data):
        if header.next_offset <= position:
            continue
        attributes = header.attributes
        if attributes & _TXN_BITS and (
            attributes & CONTROL_MASK or (skip is not None and skip.aborted(header))
        ):
            if skip is not None and attributes & CONTROL_MASK:
                skip.marker(data, pos, header)
            position = header.next_offset
            continue
        if skip is not None and header.producer_id >= 0:
            skip.consume_up_to(header.last_offset)
        if header.magic == KAFKA_MAGIC:
            batch = decode_kafka_batch(topic, partition, data, pos, header, check_crcs)
        else:
            if check_crcs:
                check_crc(data, pos)
            batch = decode_batch(topic, partition, data, pos, header)
        records += _from(batch, header, position)
        position = header.next_offset
    return records, position


_TXN_BITS = TRANSACTIONAL_MASK | CONTROL_MASK


def _from(batch: list[ConsumerRecord], header: BatchHeader, position: int) -> list[ConsumerRecord]:
    """`batch` without its records below `position` (a fetch starts mid-batch)."""
    if header.base_offset < position:
        del batch[: bisect_left(batch, position - header.base_offset, key=_OFFSET_DELTA)]
    return batch


def _headers(data: bytes) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch of a fetch answer, either layout; a
    trailing partial batch (a byte limit cut it) ends the walk."""
    walk = BatchWalk(data, whole=False, layout=ANY_LAYOUT)
    for pos, fields in walk:
        yield pos, BatchHeader(*fields)
    if walk.problem is not None:
        raise CorruptMessage(f"batch at byte {walk.position}: {walk.problem}")


def _origin(topic: str, partition: int, header: BatchHeader) -> _BatchOrigin:
    if header.attributes & TIMESTAMP_TYPE_MASK:
        stamp_type, time_base = TimestampType.LOG_APPEND_TIME, header.max_timestamp
    else:
        stamp_type, time_base = TimestampType.CREATE_TIME, header.base_timestamp
    return _BatchOrigin(topic, partition, header.base_offset, time_base, int(stamp_type))


def decode_kafka_batch(
    topic: str, partition: int, data: bytes, pos: int, header: BatchHeader, check_crc: bool
) -> list[ConsumerRecord]:
    """Every record of the Kafka v2 batch at `pos`, its CRC checked if asked.

    Kafka's codec loads numpy: imported at the first Kafka batch, so a client that
    never meets one starts without it.
    """
    from protocol.kafka import stored

    if check_crc:
        stored.check_stored_crc(data, pos, header)
    payload = stored.tidelog_payload(data, pos, header)
    decoding = _DECODING.set(_origin(topic, partition, header))
    try:
        return _RECORDS.decode(payload)
    finally:
        _DECODING.reset(decoding)


def decode_batch(
    topic: str, partition: int, data: bytes, pos: int, header: BatchHeader
) -> list[ConsumerRecord]:
    """Every record of the Tidelog batch at `pos` (its CRC is the caller's to check)."""
    origin = _origin(topic, partition, header)
    payload: bytes | memoryview = memoryview(data)[pos + HEADER_SIZE : pos + header.size]
    if header.compression:
        payload = decompress(header.compression, payload, DEFAULT_MAX_DECOMPRESSED_BYTES)
    decoding = _DECODING.set(origin)
    try:
        records = _RECORDS.decode(payload)
    except msgspec.MsgspecError as exc:
        decode_payload(data, pos, header=header)  # raises CorruptMessage saying what is wrong
        raise CorruptMessage(
            f"batch at offset {header.base_offset}: malformed records ({exc})"
        ) from exc
    finally:
        _DECODING.reset(decoding)
    if len(records) != header.record_count:
        raise CorruptMessage(
            f"batch at offset {header.base_offset}: header says {header.record_count} records, "
            f"payload holds {len(records)}"
        )
    return records


def next_position(data: bytes, position: int) -> int:
    """Where reading continues after the whole batches of `data` (a fetch answer
    read from `position`), without decoding their records."""
    for _, header in _headers(data):
        position = max(position, header.next_offset)
    return position
