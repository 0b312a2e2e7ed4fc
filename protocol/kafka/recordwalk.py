"""One bounds-checked walk over the records of an uncompressed Kafka v2 batch.

The walk is a chain of dependent reads (each field starts where the previous one
ends), so it runs in C (`_recordwalk.c`, built by `pip install`); `walk_each` here
is the same walk in Python, the reference the C one is tested against. Both raise
ValueError naming the record on any damage; see the C file for the rules.

`summarize` gives what a produce check needs, `columns` every record's field
positions (COLUMNS int64s a record) for a decoder to slice keys and values from,
`transcode` the records as Tidelog's msgpack payload (docs/protocol.md §3), which
msgspec decodes straight into records or tuples: a reader of Kafka batches then
costs what a reader of Tidelog's does, with no Python object per record on the way
(`transcode_each` is its reference, walk_each's rows encoded by msgspec).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

try:
    from protocol.kafka._recordwalk import columns as _columns
    from protocol.kafka._recordwalk import summarize as _summarize
    from protocol.kafka._recordwalk import transcode
except ImportError as exc:  # a checkout whose C module was never compiled
    raise ImportError(
        "protocol/kafka/_recordwalk.c is not built: run `make install` (or `make ext` in a "
        "second checkout)"
    ) from exc
from protocol.batch import encode_payload
from protocol.kafka.varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES, read_varint

__all__ = [
    "COLUMNS",
    "MIN_RECORD_BYTES",
    "RecordSummary",
    "columns",
    "summarize",
    "transcode",
    "transcode_each",
    "walk_each",
]

# Per record: offset delta, timestamp delta, key start, key length, value start, value
# length, headers start, header count, record end (a length of -1 is null).
COLUMNS = 9
(
    OFFSET_DELTA,
    TIMESTAMP_DELTA,
    KEY_START,
    KEY_LENGTH,
    VALUE_START,
    VALUE_LENGTH,
    HEADERS_START,
    HEADER_COUNT,
    RECORD_END,
) = range(COLUMNS)
MIN_RECORD_BYTES = 7


class RecordSummary(NamedTuple):
    """What a produce check needs from one walk over the records."""

    min_timestamp_delta: int
    max_timestamp_delta: int
    first_null_key: int  # index of the first record without a key, -1 if none
    first_misplaced: int  # index of the first record whose offset delta is not its index, or -1


def summarize(data: bytes | bytearray | memoryview, count: int) -> RecordSummary:
    """Walk `count` records of `data` in C; ValueError on any damage."""
    return RecordSummary(*_summarize(data, count))


def columns(data: bytes | bytearray | memoryview, count: int) -> np.ndarray:
    """(count, COLUMNS) int64 array of every record's fields, walked in C."""
    return np.frombuffer(_columns(data, count), dtype=np.int64).reshape(count, COLUMNS)


def walk_each(
    data: bytes | bytearray | memoryview, count: int
) -> tuple[RecordSummary, list[tuple[int, ...]]]:
    """The walk in Python, one record at a time: the summary and the column rows."""
    view = memoryview(data).cast("B")
    size = len(view)
    if count < 0 or count > size // MIN_RECORD_BYTES:
        raise ValueError(f"batch claims {count} records in {size} bytes")
    rows: list[tuple[int, ...]] = []
    pos = 0
    for index in range(count):
        row, pos = _record(view, pos, size, index)
        rows.append(row)
    if pos != size:
        raise ValueError(f"{size - pos} bytes follow the batch's {count} records")
    if not rows:
        return RecordSummary(0, 0, -1, -1), rows
    timestamps = [row[TIMESTAMP_DELTA] for row in rows]
    nulls = [i for i, row in enumerate(rows) if row[KEY_LENGTH] < 0]
    misplaced = [i for i, row in enumerate(rows) if row[OFFSET_DELTA] != i]
    summary = RecordSummary(
        min(timestamps),
        max(timestamps),
        nulls[0] if nulls else -1,
        misplaced[0] if misplaced else -1,
    )
    return summary, rows


def transcode_each(data: bytes | bytearray | memoryview, count: int) -> bytes:
    """`transcode` in Python: walk_each's rows as record tuples, encoded by msgspec."""
    _, rows = walk_each(data, count)
    view = bytes(data)
    records = [
        (
            row[OFFSET_DELTA],
            row[TIMESTAMP_DELTA],
            _slice(view, row[KEY_START], row[KEY_LENGTH]),
            _slice(view, row[VALUE_START], row[VALUE_LENGTH]),
            _headers(view, row[HEADERS_START], row[HEADER_COUNT]),
        )
        for row in rows
    ]
    return encode_payload(records)


def _slice(data: bytes, start: int, length: int) -> bytes | None:
    return None if length < 0 else data[start : start + length]


def _headers(data: bytes, pos: int, count: int) -> tuple[tuple[str, bytes | None], ...]:
    """The headers of a record walk_each has checked."""
    view = memoryview(data)
    headers = []
    for _ in range(count):
        key_start, key_length, pos = _blob(view, pos, len(data), -1, nullable=False)
        value_start, value_length, pos = _blob(view, pos, len(data), -1)
        key = str(data[key_start : key_start + key_length], "utf-8")
        headers.append((key, _slice(data, value_start, value_length)))
    return tuple(headers)


def _varint(data: memoryview, pos: int, end: int, width: int, index: int) -> tuple[int, int]:
    """A zigzag varint that ends by `end`."""
    try:
        value, after = read_varint(data[pos:end], 0, width)
    except (IndexError, ValueError) as exc:
        raise ValueError(f"record {index}: bad varint at byte {pos}: {exc}") from None
    return value, pos + after


def _blob(
    data: memoryview,
    pos: int,
    end: int,
    index: int,
    *,
    nullable: bool = True,
    utf8: bool = False,
) -> tuple[int, int, int]:
    """(start, length, next position) of a length-prefixed blob inside the record."""
    length, pos = _varint(data, pos, end, VARINT_MAX_BYTES, index)
    if length < (-1 if nullable else 0) or length > end - pos:
        raise ValueError(f"record {index}: length {length} at byte {pos}")
    if utf8:
        try:
            str(data[pos : pos + length], "utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"record {index}: header key is not UTF-8") from None
    return pos, length, pos + max(length, 0)


def _record(data: memoryview, pos: int, size: int, index: int) -> tuple[tuple[int, ...], int]:
    """One record's column row, and where the next record starts."""
    length, pos = _varint(data, pos, size, VARINT_MAX_BYTES, index)
    if length < 0 or length > size - pos:
        raise ValueError(f"record {index}: length {length} at byte {pos}")
    end = pos + length
    if pos >= end:
        raise ValueError(f"record {index}: attributes byte runs past the record")
    timestamp_delta, pos = _varint(data, pos + 1, end, VARLONG_MAX_BYTES, index)
    offset_delta, pos = _varint(data, pos, end, VARINT_MAX_BYTES, index)
    key_start, key_length, pos = _blob(data, pos, end, index)
    value_start, value_length, pos = _blob(data, pos, end, index)
    header_count, pos = _varint(data, pos, end, VARINT_MAX_BYTES, index)
    if header_count < 0 or header_count > (end - pos) // 2:
        raise ValueError(f"record {index}: header count {header_count}")
    headers_start = pos
    for _ in range(header_count):
        _, _, pos = _blob(data, pos, end, index, nullable=False, utf8=True)
        _, _, pos = _blob(data, pos, end, index)
    if pos != end:
        raise ValueError(f"record {index}: fields end at byte {pos}, the record at {end}")
    row = (
        offset_delta,
        timestamp_delta,
        key_start,
        key_length,
        value_start,
        value_length,
        headers_start,
        header_count,
        end,
    )
    return row, end
