"""The record batch of docs/protocol.md §3: the same bytes on the wire and on disk.

Layout (big-endian), written once here; every offset below derives from it:

    offset  type    field
    0       int64   base_offset        assigned by the broker; producers send 0
    8       int32   batch_length       bytes after this field (= size - 12)
    12      int8    magic              1
    13      uint32  crc                CRC-32C of bytes 17 .. end of batch
    17      int16   attributes         bits 0-2 compression, 3 timestamp type,
                                       4-5 reserved (zero), 6 delete horizon set
    19      int32   last_offset_delta
    23      int64   base_timestamp
    31      int64   max_timestamp
    39      int64   producer_id
    47      int16   producer_epoch
    49      int32   base_sequence
    53      int32   record_count
    57      bytes   payload            msgpack array of records, compressed per attributes

A record is `[offset_delta, timestamp_delta, key: bin|nil, value: bin|nil,
headers: [[str, bin|nil], ...]]`.

Validation decodes the payload once with a typed msgspec decoder, which checks
every record's shape in C while it builds the tuples, then checks offset deltas
and timestamps with C-level `map` passes: the broker does no per-record Python
work on the produce path. A payload the typed decoder refuses is decoded again
by the slower generic path only to say precisely what is wrong. Every malformed
input, including whatever msgpack, msgspec or a decompressor raises on hostile
bytes, becomes `CorruptMessage` (or `InvalidRecord` for a produce-rule breach)
with the cause chained.
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from itertools import chain, repeat
from operator import add, itemgetter
from typing import Any, NamedTuple, cast

import crc32c
import msgpack
import msgspec

from protocol.compression import Compression, compress, decompress
from protocol.errors import CorruptMessage, InvalidRecord, InvalidTimestamp, MessageTooLarge

MAGIC = 1


class BatchLayout:
    """One batch header layout: its fields in order and one `struct.Struct`.

    Every byte offset and tuple position a reader needs is derived here from the
    format, so a layout change (or a second wire layout, such as Kafka's RecordBatch
    v2 in protocol/kafka/records.py) is one declaration handed to `BatchWalk`. The
    layout must name `base_offset`, `batch_length` (bytes after that field), `magic`,
    `crc` (covering `crc_from` to the end of the batch), `last_offset_delta`,
    `max_timestamp` and `record_count`. Immutable; shared freely between threads.
    """

    __slots__ = (
        "crc_start",
        "declaration",
        "header",
        "index",
        "log_overhead",
        "magic",
        "min_batch_length",
        "offset",
        "size",
    )

    def __init__(self, fmt: str, fields: Sequence[str], *, magic: int, crc_from: str) -> None:
        self.header = struct.Struct(fmt)
        byte_order, codes = fmt[0], fmt[1:]
        if len(codes) != len(fields):
            raise ValueError(f"layout {fmt!r} has {len(codes)} fields, {len(fields)} named")
        self.size = self.header.size
        self.magic = magic
        self.declaration = tuple(zip(fields, codes, strict=True))
        # Byte offset and tuple position of each field, from the format's prefixes.
        self.offset = {
            name: struct.calcsize(byte_order + codes[:i]) for i, name in enumerate(fields)
        }
        self.index = {name: i for i, name in enumerate(fields)}
        self.crc_start = self.offset[crc_from]
        # base_offset + batch_length: the part of a batch batch_length does not count.
        self.log_overhead = self.offset["batch_length"] + struct.calcsize(
            byte_order + codes[self.index["batch_length"]]
        )
        # batch_length of a batch with an empty payload.
        self.min_batch_length = self.size - self.log_overhead

    @classmethod
    def declare(
        cls, fields: Sequence[tuple[str, str]], *, magic: int, crc_from: str
    ) -> BatchLayout:
        """The layout of big-endian `(name, struct code)` fields, in order: the one
        declaration every offset, width and tuple position is derived from."""
        names = [name for name, _ in fields]
        return cls(">" + "".join(code for _, code in fields), names, magic=magic, crc_from=crc_from)

    def fields_from(self, name: str) -> tuple[tuple[str, str], ...]:
        """This layout's declaration from field `name` on (what a second layout that
        shares the tail of this one declares after its own head)."""
        return self.declaration[self.index[name] :]

    def head_before(self, name: str) -> struct.Struct:
        """The fields before `name` as one struct (the head a writer packs itself)."""
        codes = "".join(code for _, code in self.declaration[: self.index[name]])
        return struct.Struct(self.header.format[0] + codes)

    def unpack_from(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, ...]:
        """The raw header at `pos` (`header_bytes` of it must be there)."""
        return cast("tuple[int, ...]", self.header.unpack_from(buf, pos))

    def header_bytes(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
        """How many bytes the header at `pos` takes (`buf` holds at least `size`)."""
        return self.size

    def crc_start_of(self, magic: int) -> int:
        """Where the CRC of a batch with this magic starts."""
        return self.crc_start

    def header_problem(self, magic: int, size: int) -> str | None:
        """Why a header with this magic and total batch `size` cannot start a batch,
        or None (what `BatchWalk` checks before it trusts a length)."""
        if magic != self.magic:
            return f"a batch header has magic {magic}, expected {self.magic}"
        if size < self.size:
            return f"a batch header has batch_length {size - self.log_overhead}, below the minimum"
        return None


# The field names follow BatchHeader's order (the dataclass is built from this tuple's
# unpacked values).
LAYOUT = BatchLayout.declare(
    (
        ("base_offset", "q"),
        ("batch_length", "i"),
        ("magic", "b"),
        ("crc", "I"),
        ("attributes", "h"),
        ("last_offset_delta", "i"),
        ("base_timestamp", "q"),
        ("max_timestamp", "q"),
        ("producer_id", "q"),
        ("producer_epoch", "h"),
        ("base_sequence", "i"),
        ("record_count", "i"),
    ),
    magic=MAGIC,
    crc_from="attributes",
)
HEADER = LAYOUT.header
HEADER_SIZE = LAYOUT.size  # 57
assert HEADER_SIZE == 57

# Kafka's RecordBatch v2 (magic 2): its own head (the partition leader epoch before
# the magic), then Tidelog's fields from `attributes` on, byte for byte.
# protocol/kafka/records.py documents it and works with it as `records.LAYOUT`.
KAFKA_MAGIC = 2
KAFKA_LAYOUT = BatchLayout.declare(
    (
        ("base_offset", "q"),
        ("batch_length", "i"),
        ("partition_leader_epoch", "i"),
        ("magic", "b"),
        ("crc", "I"),
        *LAYOUT.fields_from("attributes"),
    ),
    magic=KAFKA_MAGIC,
    crc_from="attributes",
)
assert KAFKA_LAYOUT.log_overhead == LAYOUT.log_overhead


class AnyLayout(BatchLayout):
    """The pseudo-layout of a log holding both layouts (docs/storage.md "Both
    layouts in one log"): `BatchWalk(..., layout=ANY_LAYOUT)` yields Tidelog's raw
    header tuple for either, so every `F_*` position names the same field; a Kafka
    v2 header is read with a struct that skips its partition leader epoch, and
    `fields[F_MAGIC]` (1 or 2) says which layout the batch is (`layout_of`).

    Byte 12 tells them apart: Tidelog's magic (1) there, and in a Kafka batch the top
    byte of the leader epoch, which the broker stores as 0 (a producer's is -1 or a
    small epoch). Its own `header`, `offset`, `size` and `crc_start` are Tidelog's;
    `max_size` is the larger header (a reader that must hold a whole header reads
    that many bytes), and `kafka_header` reads a Kafka header as Tidelog's tuple.
    """

    __slots__ = ("kafka_header", "max_size")

    def __init__(self) -> None:
        fmt, names = LAYOUT.header.format, tuple(LAYOUT.index)
        super().__init__(fmt, names, magic=MAGIC, crc_from="attributes")
        codes = "".join(code for _, code in KAFKA_LAYOUT.declaration)
        # The leader epoch becomes a pad byte run: the tuple keeps Tidelog's positions.
        epoch = KAFKA_LAYOUT.index["partition_leader_epoch"]
        skipped = codes[:epoch] + "4x" + codes[epoch + 1 :]
        self.kafka_header = struct.Struct(">" + skipped)
        self.max_size = KAFKA_LAYOUT.size

    def header_problem(self, magic: int, size: int) -> str | None:
        """Why a header with this magic and batch `size` cannot start a batch of
        either layout, or None."""
        if magic == MAGIC:
            return LAYOUT.header_problem(magic, size)
        if magic == KAFKA_MAGIC:
            return KAFKA_LAYOUT.header_problem(magic, size)
        return f"a batch header has magic {magic}, expected {MAGIC} or {KAFKA_MAGIC}"

    def _is_kafka(self, buf: bytes | bytearray | memoryview, pos: int) -> bool:
        return bool(
            buf[pos + LAYOUT.offset["magic"]] != MAGIC
            and buf[pos + KAFKA_LAYOUT.offset["magic"]] == KAFKA_MAGIC
        )

    def unpack_from(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, ...]:
        """The raw header at `pos` as Tidelog's tuple, whichever layout it is; a
        header that is neither is returned as Tidelog's struct reads it (its magic
        then fails `header_problem`). Needs `header_bytes` bytes."""
        if self._is_kafka(buf, pos):
            return cast("tuple[int, ...]", self.kafka_header.unpack_from(buf, pos))
        return cast("tuple[int, ...]", LAYOUT.header.unpack_from(buf, pos))

    def header_bytes(self, buf: bytes | bytearray | memoryview, pos: int = 0) -> int:
        """57 for a Tidelog header (or bytes that are neither), 61 for Kafka's."""
        return KAFKA_LAYOUT.size if self._is_kafka(buf, pos) else LAYOUT.size

    def crc_start_of(self, magic: int) -> int:
        return KAFKA_LAYOUT.crc_start if magic == KAFKA_MAGIC else LAYOUT.crc_start


# Which layouts some batches are in, as a bitmask of `1 << magic` (a read's answer
# says it, so a reader converts only when the layout it reads is not all there is).
TIDELOG_BATCHES = 1 << MAGIC
KAFKA_BATCHES = 1 << KAFKA_MAGIC
BOTH_LAYOUTS = TIDELOG_BATCHES | KAFKA_BATCHES


def layout_of(magic: int) -> BatchLayout:
    """The layout of a batch whose raw header (an ANY_LAYOUT walk's) has this magic:
    its header size (57 or 61) and CRC start."""
    if magic == MAGIC:
        return LAYOUT
    if magic == KAFKA_MAGIC:
        return KAFKA_LAYOUT
    raise CorruptMessage(f"a batch has magic {magic}, expected {MAGIC} or {KAFKA_MAGIC}")


# Byte offsets of the header fields writers patch in place (derived from LAYOUT).
BASE_OFFSET_OFFSET = LAYOUT.offset["base_offset"]
BATCH_LENGTH_OFFSET = LAYOUT.offset["batch_length"]
MAGIC_OFFSET = LAYOUT.offset["magic"]
CRC_OFFSET = LAYOUT.offset["crc"]
ATTRIBUTES_OFFSET = LAYOUT.offset["attributes"]
BASE_TIMESTAMP_OFFSET = LAYOUT.offset["base_timestamp"]
MAX_TIMESTAMP_OFFSET = LAYOUT.offset["max_timestamp"]
PRODUCER_ID_OFFSET = LAYOUT.offset["producer_id"]
CRC_START = LAYOUT.crc_start
LOG_OVERHEAD = LAYOUT.log_overhead
# Kafka v2's: the fields a broker rewrites in a stored Kafka batch.
KAFKA_MAGIC_OFFSET = KAFKA_LAYOUT.offset["magic"]
KAFKA_LEADER_EPOCH_OFFSET = KAFKA_LAYOUT.offset["partition_leader_epoch"]
MIN_BATCH_LENGTH = LAYOUT.min_batch_length

# Positions in a raw HEADER tuple, for readers that skip building a BatchHeader.
F_BASE_OFFSET = LAYOUT.index["base_offset"]
F_BATCH_LENGTH = LAYOUT.index["batch_length"]
F_MAGIC = LAYOUT.index["magic"]
F_CRC = LAYOUT.index["crc"]
F_ATTRIBUTES = LAYOUT.index["attributes"]
F_PRODUCER_ID = LAYOUT.index["producer_id"]
F_LAST_OFFSET_DELTA = LAYOUT.index["last_offset_delta"]
F_MAX_TIMESTAMP = LAYOUT.index["max_timestamp"]
F_RECORD_COUNT = LAYOUT.index["record_count"]

ANY_LAYOUT = AnyLayout()


COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
DELETE_HORIZON_MASK = 0x40
# Bits a valid batch may set; anything else is reserved and must be zero.
KNOWN_ATTRIBUTES_MASK = COMPRESSION_MASK | TIMESTAMP_TYPE_MASK | DELETE_HORIZON_MASK

# docs/protocol.md §3: a batch may not inflate beyond message.max.bytes x 16 or 64 MiB,
# whichever is larger. 64 MiB is the floor every caller gets by default.
DEFAULT_MAX_DECOMPRESSED_BYTES = 64 * 1024 * 1024
DECOMPRESSION_FACTOR = 16

_INT64 = struct.Struct(">q")
_UINT32 = struct.Struct(">I")
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# producer_id, producer_epoch, base_sequence: adjacent in the header (asserted below).
_PRODUCER_FIELDS = struct.Struct(">qhi")
assert LAYOUT.offset["base_sequence"] == PRODUCER_ID_OFFSET + 10
_NONE_TYPE = type(None)
_BLOB_TYPES = {bytes, _NONE_TYPE}
_OFFSET_DELTA = itemgetter(0)
_TIMESTAMP_DELTA = itemgetter(1)

# docs/protocol.md §3's record, as msgspec checks it while decoding (bin, not str, for
# keys and values; bool and float are not integers).
# One record's headers, as decoded: (name, value or None) pairs.
RecordHeaders = tuple[tuple[str, bytes | None], ...]
RecordTuple = tuple[int, int, bytes | None, bytes | None, RecordHeaders]
_PAYLOAD_DECODER = msgspec.msgpack.Decoder(tuple[RecordTuple, ...])
# A record's headers as callers hand them in: (name, value) pairs, tuples or lists.
HeaderPairs = Sequence[Sequence[str | bytes | None]]
# msgspec writes the same bytes as msgpack's packb(use_bin_type=True), four times
# faster; it holds the GIL throughout, so one encoder serves every thread.
_PAYLOAD_ENCODER = msgspec.msgpack.Encoder()


def encode_payload(records: Sequence[Sequence[Any]]) -> bytes:
    """The uncompressed msgpack payload of record rows, with one C call."""
    return _PAYLOAD_ENCODER.encode(records)


def encode_payload_into(records: Sequence[Sequence[Any]], out: bytearray, offset: int) -> None:
    """`encode_payload` written into `out` from `offset` on (which grows it): no copy."""
    _PAYLOAD_ENCODER.encode_into(records, out, offset)


__all__ = [
    "ANY_LAYOUT",
    "BOTH_LAYOUTS",
    "HEADER",
    "HEADER_SIZE",
    "KAFKA_BATCHES",
    "KAFKA_LAYOUT",
    "KAFKA_MAGIC",
    "LAYOUT",
    "LOG_OVERHEAD",
    "MAGIC",
    "PRICED_BATCHES_MAX",
    "TIDELOG_BATCHES",
    "UNPRICED_NS",
    "AnyLayout",
    "BatchHeader",
    "BatchLayout",
    "BatchWalk",
    "BlockTally",
    "Compression",
    "HeaderFields",
    "HeaderPairs",
    "Record",
    "RecordHeaders",
    "RecordTuple",
    "TimestampType",
    "append_cost_ns",
    "build_batch",
    "check_crc",
    "decode_payload",
    "decode_records",
    "encode_batch",
    "encode_payload",
    "encode_payload_into",
    "iter_headers",
    "iter_records",
    "layout_of",
    "max_decompressed_bytes",
    "read_any_header",
    "read_header",
    "set_base_offset",
    "set_leader_epoch",
    "set_log_append_time",
    "set_max_timestamp",
    "set_producer_fields",
    "tally",
    "validate_batch",
]


class TimestampType(IntEnum):
    """Attribute bit 3."""

    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


# Indexed by whether bit 3 is set: calling the enum costs ~0.7 µs, and the validator
# asks each produced batch three times.
_TIMESTAMP_TYPES = (TimestampType.CREATE_TIME, TimestampType.LOG_APPEND_TIME)


class HeaderFields:
    """What every parsed batch header offers, whatever its layout: the fields both
    layouts share and what follows from them (`BatchHeader` here, Kafka's
    `KafkaBatchHeader` in protocol/kafka/records.py). Both layouts have the same
    12-byte log overhead (asserted there)."""

    __slots__ = ()

    base_offset: int
    batch_length: int
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

    @property
    def size(self) -> int:
        """Bytes the whole batch occupies, header included."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        return _TIMESTAMP_TYPES[(self.attributes & TIMESTAMP_TYPE_MASK) != 0]

    @property
    def has_delete_horizon(self) -> bool:
        return bool(self.attributes & DELETE_HORIZON_MASK)


@dataclass(frozen=True, slots=True)
class BatchHeader(HeaderFields):
    """The 57-byte header of one batch, parsed (fields in `LAYOUT`'s order)."""

    base_offset: int
    batch_length: int
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


assert tuple(LAYOUT.index) == tuple(f.name for f in dataclasses.fields(BatchHeader))


class Record(NamedTuple):
    """One decoded record with its absolute offset and timestamp."""

    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: RecordHeaders


def max_decompressed_bytes(message_max_bytes: int) -> int:
    """The decompression cap docs/protocol.md §3 derives from `message.max.bytes`."""
    return max(message_max_bytes * DECOMPRESSION_FACTOR, DEFAULT_MAX_DECOMPRESSED_BYTES)


def read_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """Parse the header at `pos`; checks only presence, magic and a sane length."""
    if pos < 0 or len(buf) - pos < HEADER_SIZE:
        raise CorruptMessage(
            f"batch header at byte {pos} needs {HEADER_SIZE} bytes, {max(len(buf) - pos, 0)} left"
        )
    header = BatchHeader(*HEADER.unpack_from(buf, pos))
    if header.magic != MAGIC:
        raise CorruptMessage(f"batch at byte {pos} has magic {header.magic}, expected {MAGIC}")
    if header.batch_length < MIN_BATCH_LENGTH:
        raise CorruptMessage(
            f"batch at byte {pos} has batch_length {header.batch_length} < {MIN_BATCH_LENGTH}"
        )
    return header


def _whole_batch(buf: bytes | bytearray | memoryview, pos: int) -> BatchHeader:
    header = read_header(buf, pos)
    if len(buf) - pos < header.size:
        raise CorruptMessage(
            f"batch at byte {pos} is truncated: {len(buf) - pos} of {header.size} bytes present"
        )
    return header


def read_any_header(buf: bytes | bytearray | memoryview, pos: int = 0) -> BatchHeader:
    """`read_header` for a batch of either layout (the ANY_LAYOUT tuple, parsed:
    `magic` says which); checks presence, magic and a sane length."""
    left = len(buf) - pos
    if pos < 0 or left < HEADER_SIZE:
        raise CorruptMessage(
            f"batch header at byte {pos} needs {HEADER_SIZE} bytes, {max(left, 0)} left"
        )
    kafka = buf[pos + MAGIC_OFFSET] != MAGIC and buf[pos + KAFKA_MAGIC_OFFSET] == KAFKA_MAGIC
    if kafka and left < KAFKA_LAYOUT.size:
        raise CorruptMessage(
            f"Kafka batch header at byte {pos} needs {KAFKA_LAYOUT.size} bytes, {left} left"
        )
    header = BatchHeader(*ANY_LAYOUT.unpack_from(buf, pos))
    problem = ANY_LAYOUT.header_problem(header.magic, header.size)
    if problem is not None:
        raise CorruptMessage(f"batch at byte {pos}: {problem}")
    if left < header.size:
        raise CorruptMessage(
            f"batch at byte {pos} is truncated: {left} of {header.size} bytes present"
        )
    return header


def _crc_of(buf: bytes | bytearray | memoryview, pos: int, size: int) -> int:
    return crc32c.crc32c(memoryview(buf)[pos + CRC_START : pos + size])


def check_crc(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    fields: tuple[int, ...] | None = None,
    layout: BatchLayout = LAYOUT,
) -> BatchHeader:
    """Header and CRC-32C only: what a recovery scan needs, without decoding records.

    `fields`: the raw header a `BatchWalk` already read (and found whole) at `pos`
    (either layout's, as an ANY_LAYOUT walk yields them). `layout=ANY_LAYOUT`: the
    batch at `pos` may be Kafka's.
    """
    if fields is not None:
        header = BatchHeader(*fields)
    elif layout is ANY_LAYOUT:
        header = read_any_header(buf, pos)
    else:
        header = _whole_batch(buf, pos)
    start = KAFKA_LAYOUT.crc_start if header.magic == KAFKA_MAGIC else CRC_START
    actual = crc32c.crc32c(memoryview(buf)[pos + start : pos + header.size])
    if actual != header.crc:
        raise CorruptMessage(
            f"batch at offset {header.base_offset} (byte {pos}) has CRC {header.crc:#010x}, "
            f"computed {actual:#010x}"
        )
    return header


def decode_payload(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    header: BatchHeader | None = None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> tuple[BatchHeader, tuple[RecordTuple, ...]]:
    """The record tuples of one batch, decompressed under the cap and well shaped.

    Shape only: the count, offset deltas and timestamps against the header are
    `validate_batch`'s job.
    """
    if header is None:
        header = _whole_batch(buf, pos)
    return header, _decode_records(header, _payload(buf, pos, header, max_decompressed))


def _payload(
    buf: bytes | bytearray | memoryview, pos: int, header: BatchHeader, max_decompressed: int
) -> bytes | memoryview:
    raw: bytes | memoryview = memoryview(buf)[pos + HEADER_SIZE : pos + header.size]
    if header.compression:
        raw = decompress(header.compression, raw, max_decompressed)
    return raw


def _decode_records(header: BatchHeader, raw: bytes | memoryview) -> tuple[RecordTuple, ...]:
    try:
        records: tuple[RecordTuple, ...] = _PAYLOAD_DECODER.decode(raw)
        return records
    except msgspec.MsgspecError as exc:
        _explain_malformed(header, raw, exc)
        raise AssertionError("unreachable") from exc  # _explain_malformed always raises


# Kafka's RecordBatch.NO_TIMESTAMP: a record without a timestamp passes every bound.
NO_TIMESTAMP = -1


def _check_records(
    header: BatchHeader,
    records: tuple[RecordTuple, ...],
    producer: bool,
    timestamp_bounds: tuple[int, int] | None = None,
) -> None:
    """The header's claims against well-shaped records, with C-level passes only.

    Each pass builds a list (`map` into `tuple` grows it step by step, ~1.7x slower),
    and the timestamp deltas are sorted rather than scanned by `min` and `max`: for the
    in-order deltas producers write, timsort makes one pass of specialised int
    compares, ~35% cheaper than one `max`, and yields both bounds.
    """
    where = f"batch at offset {header.base_offset}"
    if len(records) != header.record_count:
        raise CorruptMessage(
            f"{where}: header says {header.record_count} records, payload holds {len(records)}"
        )
    if not records:
        return
    deltas = list(map(_OFFSET_DELTA, records))
    if producer:
        if deltas != _counting(len(records)) or header.last_offset_delta != len(records) - 1:
            raise CorruptMessage(f"{where}: offset deltas must be 0, 1, 2, ... in order")
    elif deltas[-1] > header.last_offset_delta or min(deltas) < 0 or max(deltas) != deltas[-1]:
        raise CorruptMessage(f"{where}: offset deltas exceed last_offset_delta")
    if header.timestamp_type == TimestampType.CREATE_TIME:
        timestamp_deltas = sorted(map(_TIMESTAMP_DELTA, records))
        smallest = header.base_timestamp + timestamp_deltas[0]
        largest = header.base_timestamp + timestamp_deltas[-1]
        if largest != header.max_timestamp:
            raise CorruptMessage(
                f"{where}: max_timestamp {header.max_timestamp} differs from the largest "
                f"record timestamp {largest}"
            )
        if timestamp_bounds is not None:
            low, high = timestamp_bounds
            undated = smallest == largest == NO_TIMESTAMP  # no record has a timestamp
            if not undated and (smallest < max(low, NO_TIMESTAMP) or largest > high):
                _check_each_timestamp(header, records, low, high)


def _check_each_timestamp(
    header: BatchHeader, records: tuple[RecordTuple, ...], low: int, high: int
) -> None:
    """Raise InvalidTimestamp naming the first record outside [low, high] (Kafka's
    LogValidator), passing records without a timestamp (-1).

    Reached only when the batch's smallest or largest timestamp is out of bounds: a
    refusal, or a batch mixing records without a timestamp with dated ones.
    """
    base = header.base_timestamp
    for index, delta in enumerate(map(_TIMESTAMP_DELTA, records)):
        timestamp = base + delta
        if timestamp == NO_TIMESTAMP:
            continue
        problem = None
        if timestamp < 0:
            problem = "is negative"
        elif timestamp < low:
            problem = "is more than message.timestamp.before.max.ms before now"
        elif timestamp > high:
            problem = "is more than message.timestamp.after.max.ms after now"
        if problem is not None:
            raise InvalidTimestamp(
                f"batch at offset {header.base_offset}: record {index} has timestamp "
                f"{timestamp}, which {problem} (allowed: {low} to {high})"
            )


@lru_cache(maxsize=16)
def _counting(count: int) -> list[int]:
    """0..count-1, kept for the few batch sizes a producer uses (shared: never mutate)."""
    return list(range(count))


def _explain_malformed(
    header: BatchHeader, raw: bytes | memoryview, cause: msgspec.MsgspecError
) -> None:
    """Raise CorruptMessage saying in words what the typed decoder refused.

    Only bad input comes here, so a second, generic decode is affordable.
    """
    where = f"batch at offset {header.base_offset}"
    try:
        records = msgpack.unpackb(raw, use_list=False, raw=False, strict_map_key=True)
    except Exception as exc:
        raise CorruptMessage(f"{where}: payload is not valid msgpack ({exc!r})") from exc
    if type(records) is not tuple:
        raise CorruptMessage(
            f"{where}: payload is a {type(records).__name__}, not an array"
        ) from cause
    if set(map(type, records)) - {tuple}:
        raise CorruptMessage(f"{where}: every record must be an array of 5 items") from cause
    try:
        deltas, ts_deltas, keys, values, headers = zip(*records, strict=True)
    except ValueError as exc:
        raise CorruptMessage(f"{where}: every record must be an array of 5 items") from exc
    if set(map(type, deltas + ts_deltas)) - {int}:
        raise CorruptMessage(f"{where}: offset and timestamp deltas must be integers") from cause
    if set(map(type, keys + values)) - _BLOB_TYPES:
        raise CorruptMessage(f"{where}: keys and values must be bin or nil") from cause
    if set(map(type, headers)) - {tuple}:
        raise CorruptMessage(f"{where}: record headers must be arrays") from cause
    pairs = tuple(chain.from_iterable(headers))
    if set(map(type, pairs)) - {tuple} or set(map(len, pairs)) - {2}:
        raise CorruptMessage(f"{where}: each record header must be a [key, value] pair") from cause
    header_keys, header_values = zip(*pairs, strict=True) if pairs else ((), ())
    if set(map(type, header_keys)) - {str} or set(map(type, header_values)) - _BLOB_TYPES:
        raise CorruptMessage(f"{where}: header keys must be str and values bin or nil") from cause
    raise CorruptMessage(f"{where}: malformed records ({cause})") from cause


def validate_batch(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_batch_bytes: int | None = None,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
    producer: bool = False,
    timestamp_bounds: tuple[int, int] | None = None,
) -> BatchHeader:
    """Check one whole batch: header, CRC-32C, and a payload of well-shaped records.

    With `producer=True` the produce rules apply too: `record_count >= 1`, offset
    deltas 0..n-1 (CorruptMessage), and a zero base offset with bit 6 clear
    (InvalidRecord), as docs/protocol.md §3 says. `timestamp_bounds` (low, high): every
    CreateTime record's timestamp must lie within, or be -1 (InvalidTimestamp).
    """
    header = check_crc(buf, pos)
    if max_batch_bytes is not None and header.size > max_batch_bytes:
        raise MessageTooLarge(
            f"batch of {header.size} bytes exceeds the limit of {max_batch_bytes} bytes"
        )
    if header.attributes & ~KNOWN_ATTRIBUTES_MASK & 0xFFFF:
        raise CorruptMessage(
            f"batch at offset {header.base_offset} sets reserved attribute bits "
            f"({header.attributes:#06x})"
        )
    if header.compression > Compression.ZSTD:
        raise CorruptMessage(f"unknown compression codec {header.compression}")
    if producer:
        if header.record_count < 1:
            raise CorruptMessage("a produced batch must hold at least one record")
        if header.base_offset != 0:
            raise InvalidRecord(
                f"a produced batch must have base_offset 0, not {header.base_offset}"
            )
        if header.has_delete_horizon:
            raise InvalidRecord("producers may not set the delete-horizon attribute (bit 6)")
    records = _decode_records(header, _payload(buf, pos, header, max_decompressed))
    _check_records(header, records, producer, timestamp_bounds)
    return header


class BatchWalk:
    """The one walk over back-to-back batch headers in a buffer, for any `BatchLayout`.

    Iterating yields `(position, raw header tuple)` for each batch that is plausible
    (right magic, a length of at least a header) and lies whole inside
    `buf[start:end]`; index the tuple with the layout's positions (`F_*` here). One
    struct read per batch, no CRC: that is the caller's choice. After the iteration
    `position` is where it stopped and `problem` is None, or says why the bytes there
    cannot be a batch. A batch or header cut by `end` is only a stop, unless `whole`
    says the bytes end on a batch boundary (then it is a problem too).
    """

    __slots__ = ("_buf", "_end", "_layout", "_whole", "position", "problem")

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        start: int = 0,
        end: int | None = None,
        *,
        whole: bool = True,
        layout: BatchLayout = LAYOUT,
    ) -> None:
        self._buf = buf
        self._end = len(buf) if end is None else end
        self._whole = whole
        self._layout = layout
        self.position = start
        self.problem: str | None = None

    def __iter__(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        if self._layout is ANY_LAYOUT:
            return self._iter_any()
        return self._iter_one()

    def _iter_one(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        layout, buf, end = self._layout, self._buf, self._end
        unpack, size_min = layout.header.unpack_from, layout.size
        length_at, magic_at = layout.index["batch_length"], layout.index["magic"]
        overhead, magic = layout.log_overhead, layout.magic
        pos = self.position
        last_header = end - size_min
        while pos <= last_header:
            fields = unpack(buf, pos)
            size = fields[length_at] + overhead
            if fields[magic_at] != magic or size < size_min:
                self.position, self.problem = pos, layout.header_problem(fields[magic_at], size)
                return
            if pos + size > end:
                if self._whole:
                    self.problem = f"a batch header's length ({size} bytes) runs past the end"
                self.position = pos
                return
            self.position = pos
            yield pos, fields
            pos += size
        self.position = pos
        if self._whole and pos < end:
            self.problem = "a batch header is cut by the end of the bytes"

    def _iter_any(self) -> Iterator[tuple[int, tuple[int, ...]]]:
        """Both layouts: a Tidelog batch costs what `_iter_one` spends on it (one
        struct read, the same checks); only a header whose byte 12 is not Tidelog's
        magic is read again as Kafka's."""
        buf, end = self._buf, self._end
        unpack, unpack_kafka = HEADER.unpack_from, ANY_LAYOUT.kafka_header.unpack_from
        length_at, magic_at, overhead = F_BATCH_LENGTH, F_MAGIC, LOG_OVERHEAD
        magic, kafka_magic, kafka_magic_at = MAGIC, KAFKA_MAGIC, KAFKA_LAYOUT.offset["magic"]
        size_min, kafka_size_min = HEADER_SIZE, KAFKA_LAYOUT.size
        pos = self.position
        last_header = end - size_min
        while pos <= last_header:
            fields = unpack(buf, pos)
            size = fields[length_at] + overhead
            if fields[magic_at] != magic or size < size_min:
                if fields[magic_at] == magic or buf[pos + kafka_magic_at] != kafka_magic:
                    self.position = pos
                    self.problem = ANY_LAYOUT.header_problem(fields[magic_at], size)
                    return
                if pos + kafka_size_min > end:
                    break  # a Kafka header cut by the end
                fields = unpack_kafka(buf, pos)
                if size < kafka_size_min:
                    self.position = pos
                    self.problem = KAFKA_LAYOUT.header_problem(kafka_magic, size)
                    return
            if pos + size > end:
                if self._whole:
                    self.problem = f"a batch header's length ({size} bytes) runs past the end"
                self.position = pos
                return
            self.position = pos
            yield pos, fields
            pos += size
        self.position = pos
        if self._whole and pos < end:
            self.problem = "a batch header is cut by the end of the bytes"


# Batch headers one pricing walk reads (~1 µs each, on the event loop); a block
# packing more is not priced, so pricing stays cheap whatever a peer sends.
PRICED_BATCHES_MAX = 16
# The cost of work that cannot be priced before it starts (a compressed batch's
# decoded size is unknown until it is inflated: 3.6 KB of zstd can hold 6.5 M
# records), or whose headers are too many to read: above every budget.
UNPRICED_NS = 1 << 62
# Validating a produced batch decodes its msgpack payload: ~0.3 µs a record (a
# 1,000-record 100 KB batch: ~0.3 ms) and ~15 ns a byte for values and headers; the
# densest msgpack (records of many tiny headers) costs up to ~60 ns a byte, which the
# per-byte price understates by 4x at most (~60 ms for 1 MiB, as accepted before).
VALIDATE_NS_PER_RECORD = 300
VALIDATE_NS_PER_BYTE = 15
# Checking a produced Kafka v2 batch (protocol.kafka.produce_check) walks every
# record's bounds in C without building it: ~15-50 ns a 100 B record, ~200 ns a 1 KiB
# one in 16 KiB batches (docs/kafka.md "Validating a Kafka produce"), most of that the
# ~3 µs of Python around each batch's walk, which the per-batch price covers.
KAFKA_CHECK_NS_PER_RECORD = 100
KAFKA_CHECK_NS_PER_BATCH = 10_000
# Its bytes are checksummed and copied once, never decoded: ~0.5 ns a byte, priced at 2.
KAFKA_CHECK_NS_PER_BYTE = 2


class BlockTally(NamedTuple):
    """What the headers of back-to-back batches say, read without decoding anything:
    the one header walk that prices a block (and that a conversion then reuses)."""

    headers: list[tuple[int, tuple[int, ...]]]  # (position, raw header) of each batch read
    records: int  # their record_count, summed
    compressed: bool  # some batch read is compressed: what it inflates to is unknown
    end: int  # where the walk stopped: a reader of the whole block resumes here
    priced: bool  # False if the walk stopped at `max_batches`, not at the end
    problem: str | None  # why the bytes at `end` are no batch (BatchWalk.problem)


def tally(
    buf: bytes | bytearray | memoryview,
    *,
    layout: BatchLayout = LAYOUT,
    max_batches: int = PRICED_BATCHES_MAX,
) -> BlockTally:
    """Walk at most `max_batches` headers of `buf` (any layout): how many batches and
    records the block holds and whether any is compressed. One struct read a batch."""
    headers: list[tuple[int, tuple[int, ...]]] = []
    records = 0
    compressed = False
    count_at, attributes_at = layout.index["record_count"], layout.index["attributes"]
    walk = BatchWalk(buf, layout=layout)
    for batch in walk:
        if len(headers) == max_batches:
            return BlockTally(headers, records, compressed, batch[0], False, None)
        headers.append(batch)
        fields = batch[1]
        records += fields[count_at]
        if fields[attributes_at] & COMPRESSION_MASK:
            compressed = True
    return BlockTally(headers, records, compressed, walk.position, True, walk.problem)


def append_cost_ns(buf: bytes | bytearray | memoryview, *, layout: BatchLayout = LAYOUT) -> int:
    """What validating produced batches (an append of `buf`) costs at most, in
    nanoseconds, priced from their headers alone; `UNPRICED_NS` when compressed, when
    they are too many, or when a header's record_count differs from the count its
    payload's msgpack array announces (a lying header would let the decoder build
    whatever the array says). Bytes that are no batch are refused before anything is
    decoded: only the whole batches before them count. `layout=KAFKA_LAYOUT`: Kafka
    v2 batches, stored as sent (their records walked, never built)."""
    if layout is KAFKA_LAYOUT:
        block = tally(buf, layout=ANY_LAYOUT)
        if block.compressed or not block.priced:
            return UNPRICED_NS
        walk_ns = block.records * KAFKA_CHECK_NS_PER_RECORD
        walk_ns += len(block.headers) * KAFKA_CHECK_NS_PER_BATCH
        return max(walk_ns, block.end * KAFKA_CHECK_NS_PER_BYTE)
    block = tally(buf)
    if block.compressed or not block.priced:
        return UNPRICED_NS
    for pos, fields in block.headers:
        if _array_length(buf, pos + HEADER_SIZE) != fields[F_RECORD_COUNT]:
            return UNPRICED_NS
    return max(block.records * VALIDATE_NS_PER_RECORD, block.end * VALIDATE_NS_PER_BYTE)


# msgpack's array16 and array32 tags: the width of the count that follows.
_ARRAY_COUNT_WIDTHS = {0xDC: 2, 0xDD: 4}


def _array_length(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """The element count a msgpack array header at `pos` announces (None if not one)."""
    if pos >= len(buf):
        return None
    tag = buf[pos]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    width = _ARRAY_COUNT_WIDTHS.get(tag)
    if width is None or pos + 1 + width > len(buf):
        return None
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")


def iter_headers(
    buf: bytes | bytearray | memoryview, *, allow_partial: bool = False
) -> Iterator[tuple[int, BatchHeader]]:
    """(position, header) of each whole batch in back-to-back batches.

    A trailing partial batch raises CorruptMessage, or ends the iteration when
    `allow_partial` is set (a reader that asked for a byte limit may see one).
    """
    walk = BatchWalk(buf, whole=not allow_partial)
    for pos, fields in walk:
        yield pos, BatchHeader(*fields)
    if walk.problem is not None:
        _whole_batch(buf, walk.position)  # raises, saying precisely what is wrong
        raise CorruptMessage(f"batch at byte {walk.position}: {walk.problem}")


def decode_records(
    buf: bytes | bytearray | memoryview,
    pos: int = 0,
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_BYTES,
) -> list[Record]:
    """The records of one batch with absolute offsets and timestamps."""
    header, records = decode_payload(buf, pos, max_decompressed=max_decompressed)
    _check_records(header, records, producer=False)
    if not records:
        return []
    deltas, ts_deltas, keys, values, headers = zip(*records, strict=True)
    timestamps: Iterable[int]
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        # As in Kafka: every record of a LogAppendTime batch carries the broker's time.
        timestamps = repeat(header.max_timestamp, len(records))
    else:
        timestamps = map(add, ts_deltas, repeat(header.base_timestamp))
    return list(
        map(
            Record,
            map(add, deltas, repeat(header.base_offset)),
            timestamps,
            keys,
            values,
            headers,
        )
    )


def iter_records(
    buf: bytes | bytearray | memoryview, *, allow_partial: bool = False
) -> Iterator[Record]:
    """Every record of back-to-back batches, in offset order."""
    for pos, _ in iter_headers(buf, allow_partial=allow_partial):
        yield from decode_records(buf, pos)


def build_batch(
    entries: Sequence[tuple[int, int, bytes | None, bytes | None, HeaderPairs]],
    *,
    base_offset: int,
    base_timestamp: int,
    attributes: int,
    last_offset_delta: int | None = None,
    max_timestamp: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """Assemble a batch from `(offset_delta, timestamp_ms, key, value, headers)` entries.

    The low-level constructor: the cleaner uses it to rewrite a batch keeping its
    base offset, last offset delta, producer fields and attributes (compression
    included). Timestamp deltas are taken relative to `base_timestamp`.
    """
    payload_records = [
        [delta, ts - base_timestamp, key, value, [list(h) for h in hdrs]]
        for delta, ts, key, value, hdrs in entries
    ]
    if last_offset_delta is None:
        last_offset_delta = entries[-1][0] if entries else 0
    if max_timestamp is None:
        max_timestamp = max((e[1] for e in entries), default=base_timestamp)
    payload = encode_payload(payload_records)
    payload = compress(Compression(attributes & COMPRESSION_MASK), payload)
    return _assemble(
        payload,
        base_offset=base_offset,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=base_timestamp,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(entries),
    )


def _assemble(payload: bytes, **fields: int) -> bytes:
    size = HEADER_SIZE + len(payload)
    out = bytearray(size)
    HEADER.pack_into(
        out,
        0,
        fields["base_offset"],
        size - LOG_OVERHEAD,
        MAGIC,
        0,
        fields["attributes"],
        fields["last_offset_delta"],
        fields["base_timestamp"],
        fields["max_timestamp"],
        fields["producer_id"],
        fields["producer_epoch"],
        fields["base_sequence"],
        fields["record_count"],
    )
    out[HEADER_SIZE:] = payload
    _UINT32.pack_into(out, CRC_OFFSET, _crc_of(out, 0, size))
    return bytes(out)


def encode_batch(
    records: Iterable[tuple[bytes | None, bytes | None, HeaderPairs | None, int | None]],
    *,
    compression: Compression | int = Compression.NONE,
    base_offset: int = 0,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    now_ms: int | None = None,
) -> bytes:
    """Encode `(key, value, headers, timestamp_ms | None)` records as one batch.

    A record without a timestamp gets `now_ms` (the caller's clock; required then).
    Offset deltas are 0..n-1, as producers must send them.
    """
    rows = list(records)
    if not rows:
        raise ValueError("a batch needs at least one record")
    maybe_timestamps = [now_ms if r[3] is None else r[3] for r in rows]
    if None in maybe_timestamps:
        raise ValueError("now_ms is required for records without a timestamp")
    timestamps = cast("list[int]", maybe_timestamps)  # None refused just above
    base_timestamp = timestamps[0]
    payload_records = [
        [i, ts - base_timestamp, key, value, [list(h) for h in hdrs] if hdrs else []]
        for i, ((key, value, hdrs, _), ts) in enumerate(zip(rows, timestamps, strict=True))
    ]
    payload = compress(Compression(compression), encode_payload(payload_records))
    attributes = int(compression) & COMPRESSION_MASK
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        attributes |= TIMESTAMP_TYPE_MASK
    return _assemble(
        payload,
        base_offset=base_offset,
        attributes=attributes,
        last_offset_delta=len(rows) - 1,
        base_timestamp=base_timestamp,
        max_timestamp=max(timestamps),
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        record_count=len(rows),
    )


def set_base_offset(buf: bytearray | memoryview, pos: int, base_offset: int) -> None:
    """Assign offsets in place: base_offset is outside the CRC, so nothing else changes."""
    _INT64.pack_into(buf, pos + BASE_OFFSET_OFFSET, base_offset)


def set_producer_fields(
    buf: bytearray | memoryview, pos: int, producer_id: int, producer_epoch: int, base_sequence: int
) -> None:
    """Stamp an idempotent producer's id, epoch and first sequence on an encoded batch
    (a producer that numbers batches when it sends them) and recompute its CRC."""
    size = _INT32.unpack_from(buf, pos + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
    _PRODUCER_FIELDS.pack_into(
        buf, pos + PRODUCER_ID_OFFSET, producer_id, producer_epoch, base_sequence
    )
    _UINT32.pack_into(buf, pos + CRC_OFFSET, _crc_of(buf, pos, size))


def set_log_append_time(
    buf: bytearray | memoryview, pos: int, timestamp_ms: int, *, layout: BatchLayout = LAYOUT
) -> None:
    """Stamp a batch of `layout` with the broker's time (LogAppendTime: max_timestamp
    and the timestamp-type bit, as Kafka does) and recompute its CRC."""
    at = layout.offset["attributes"]
    attributes = _INT16.unpack_from(buf, pos + at)[0] | TIMESTAMP_TYPE_MASK
    _INT16.pack_into(buf, pos + at, attributes)
    set_max_timestamp(buf, pos, timestamp_ms, layout=layout)


def set_max_timestamp(
    buf: bytearray | memoryview, pos: int, timestamp_ms: int, *, layout: BatchLayout = LAYOUT
) -> None:
    """Write a batch's max_timestamp and recompute its CRC (Kafka writes the largest
    record timestamp it found when the producer's header says otherwise)."""
    size = _INT32.unpack_from(buf, pos + layout.offset["batch_length"])[0] + LOG_OVERHEAD
    _INT64.pack_into(buf, pos + layout.offset["max_timestamp"], timestamp_ms)
    crc = crc32c.crc32c(memoryview(buf)[pos + layout.crc_start : pos + size])
    _UINT32.pack_into(buf, pos + layout.offset["crc"], crc)


def set_leader_epoch(buf: bytearray | memoryview, pos: int, epoch: int) -> None:
    """A stored Kafka batch's partition leader epoch (outside its CRC: nothing else
    changes). The broker writes 0, so byte 12 of every stored Kafka batch is 0."""
    _INT32.pack_into(buf, pos + KAFKA_LEADER_EPOCH_OFFSET, epoch)
