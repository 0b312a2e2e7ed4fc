"""Kafka varint records decoded and encoded column-wise: the bulk path of
`decode_records` and `encode_records`.

A record's fields sit one after another, each starting where the previous one's
varint or bytes end, so a per-record parser walks every field in Python (about
2 µs a record). Decoding, the walk runs in C instead (protocol/kafka/recordwalk.py):
one call gives every record's field positions as an int64 array, and keys and
values become `bytes` through C-level `map`s over slices. Only the headers of
records that have any stay per record in Python (rare; parsed by the per-record
code). Encoding, every field is written for all records at once with numpy.

Arrays carry fixed overhead per call, so small batches take the per-record path
(see `records.DECODE_COLUMNS_MIN_RECORDS` and `ENCODE_COLUMNS_MIN_RECORDS`).
Both paths give identical results, and any inconsistency (a field running past
its record, a bad length) is KafkaCodecError(CORRUPT_MESSAGE).
"""

from __future__ import annotations

from itertools import repeat
from operator import is_
from typing import TYPE_CHECKING, Any, NamedTuple, cast

import numpy as np

from protocol.kafka import recordwalk
from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.kafka.varint import varint

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from protocol.batch import RecordHeaders

__all__ = ["RecordColumns", "decode_columns", "encode_columns", "scan_columns"]


def _corrupt(message: str) -> KafkaCodecError:
    return KafkaCodecError(KafkaError.CORRUPT_MESSAGE, message)


def _blobs(data: bytes, starts: np.ndarray, lengths: np.ndarray) -> list[bytes | None]:
    """data[start:start+length] per record, None where the length is -1."""
    nulls = lengths < 0
    if nulls.all():
        return [None] * len(lengths)
    stops = starts + np.maximum(lengths, 0)
    out: list[bytes | None] = list(
        map(data.__getitem__, map(slice, starts.tolist(), stops.tolist()))
    )
    if nulls.any():
        column = np.empty(len(out), dtype=object)
        column[:] = out
        column[nulls] = None
        return column.tolist()
    return out


class RecordColumns(NamedTuple):
    """Every record's fields as arrays (positions into the data), headers parsed."""

    offset_deltas: np.ndarray
    timestamp_deltas: np.ndarray
    key_starts: np.ndarray
    key_lengths: np.ndarray
    value_starts: np.ndarray
    value_lengths: np.ndarray
    headers: list[RecordHeaders] | repeat[RecordHeaders]


def scan_columns(
    data: bytes,
    count: int,
    decode_headers: Callable[[bytes, int, int, int], tuple[RecordHeaders, int]],
) -> RecordColumns:
    """Walk `count` records of uncompressed `data` column-wise, checking every bound.

    `decode_headers(data, pos, header_count, record_end)` parses one record's
    headers (the per-record code's), for the records that have any. No key or
    value is copied: a produce-side check needs only the deltas.
    """
    try:
        rows = recordwalk.columns(data, count)
    except ValueError as exc:
        raise _corrupt(f"malformed records: {exc}") from exc
    headers: list[RecordHeaders] | repeat[RecordHeaders] = repeat((), count)
    header_counts = rows[:, recordwalk.HEADER_COUNT]
    with_headers = np.flatnonzero(header_counts)
    if len(with_headers):  # only records that carry headers: parsed per record (rare)
        headers = [()] * count
        starts, ends = rows[:, recordwalk.HEADERS_START], rows[:, recordwalk.RECORD_END]
        for i in with_headers.tolist():
            headers[i], _ = decode_headers(
                data, int(starts[i]), int(header_counts[i]), int(ends[i])
            )
    return RecordColumns(
        rows[:, recordwalk.OFFSET_DELTA],
        rows[:, recordwalk.TIMESTAMP_DELTA],
        rows[:, recordwalk.KEY_START],
        rows[:, recordwalk.KEY_LENGTH],
        rows[:, recordwalk.VALUE_START],
        rows[:, recordwalk.VALUE_LENGTH],
        headers,
    )


def decode_columns(
    data: bytes,
    count: int,
    decode_headers: Callable[[bytes, int, int, int], tuple[RecordHeaders, int]],
) -> list[tuple[int, int, bytes | None, bytes | None, RecordHeaders]]:
    """`count` records of uncompressed `data` as Tidelog record tuples, column-wise."""
    columns = scan_columns(data, count, decode_headers)
    return list(
        zip(
            columns.offset_deltas.tolist(),
            columns.timestamp_deltas.tolist(),
            _blobs(data, columns.key_starts, columns.key_lengths),
            _blobs(data, columns.value_starts, columns.value_lengths),
            columns.headers,
            strict=False,
        )
    )


def _varint_column(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(zigzag raw values, bytes each varint takes) for one int64 column."""
    raw = ((values << 1) ^ (values >> 63)).view(np.uint64)
    sizes = np.ones(len(raw), dtype=np.int64)
    top = int(raw.max()) if len(raw) else 0
    bits = 7
    while bits < 64 and top >> bits:  # only as many passes as the largest value needs
        sizes += raw >= np.uint64(1 << bits)
        bits += 7
    return raw, sizes


def _varint_rows(columns: list[tuple[np.ndarray, np.ndarray]]) -> list[bytes]:
    """Per record, the varints of `columns` back to back, as one bytes object."""
    row_sizes = np.sum([size for _, size in columns], axis=0)
    bounds = np.zeros(len(row_sizes) + 1, dtype=np.int64)
    np.cumsum(row_sizes, out=bounds[1:])
    buf = np.zeros(int(bounds[-1]), dtype=np.uint8)
    pos = bounds[:-1].copy()
    for raw, size in columns:
        buf[pos] = (raw & np.uint64(0x7F)).astype(np.uint8) | ((size > 1).astype(np.uint8) << 7)
        live = np.flatnonzero(size > 1)
        index = 1
        while len(live):
            more = size[live] > index + 1
            byte = ((raw[live] >> np.uint64(7 * index)) & np.uint64(0x7F)).astype(np.uint8)
            buf[pos[live] + index] = byte | (more.astype(np.uint8) << 7)
            live = live[more]
            index += 1
        pos += size
    data = buf.tobytes()
    return list(map(data.__getitem__, map(slice, bounds[:-1].tolist(), bounds[1:].tolist())))


def _lengths(blobs: tuple[bytes | None, ...]) -> tuple[np.ndarray, list[bytes]]:
    """Lengths (-1 for None) and the blobs with None as b"" (for joining), in C loops."""
    present = cast("list[bytes]", list(map(_NULL_AS_EMPTY.get, blobs, blobs)))  # no None left
    lengths = np.fromiter(map(len, present), dtype=np.int64, count=len(present))
    nulls = np.fromiter(map(is_, blobs, repeat(None)), dtype=bool, count=len(blobs))
    lengths[nulls] = -1
    return lengths, present


# dict.get(blob, blob): b"" for None, the blob itself otherwise.
_NULL_AS_EMPTY: dict[bytes | None, bytes] = {None: b""}


def encode_columns(
    records: Sequence[Sequence[Any]],
    encode_header_entries: Callable[[Sequence[Sequence[Any]]], bytes],
) -> bytes:
    """Varint records from Tidelog record tuples, column-wise (see `decode_columns`).

    Each record becomes pieces joined in C: its varint prefix (length, attributes,
    timestamp delta, offset delta, key length), key, value length, value, and header
    count (+ entries, built per record only where present). When no record has key
    bytes (all null or empty, as producers without keys write), the key length and
    value length are one piece: three pieces a record instead of five. A record
    without headers ends with the shared `b"\\x00"`, not a slice of its own.
    """
    offset_deltas, timestamp_deltas, keys, values, headers = zip(*records, strict=True)
    count = len(keys)
    key_lengths, key_blobs = _lengths(keys)
    value_lengths, value_blobs = _lengths(values)
    header_counts = np.fromiter(map(len, headers), dtype=np.int64, count=count)
    with_headers = np.flatnonzero(header_counts).tolist()
    entries = {i: encode_header_entries(headers[i]) for i in with_headers}
    entry_sizes = np.zeros(count, dtype=np.int64)
    entry_sizes[with_headers] = [len(entries[i]) for i in with_headers]
    timestamp_column = _varint_column(np.array(timestamp_deltas, dtype=np.int64))
    offset_column = _varint_column(np.array(offset_deltas, dtype=np.int64))
    key_column = _varint_column(key_lengths)
    value_column = _varint_column(value_lengths)
    header_column = _varint_column(header_counts)
    body_sizes = (
        1
        + timestamp_column[1]
        + offset_column[1]
        + key_column[1]
        + np.maximum(key_lengths, 0)
        + value_column[1]
        + np.maximum(value_lengths, 0)
        + header_column[1]
        + entry_sizes
    )
    attributes = _varint_column(np.zeros(count, dtype=np.int64))
    head = [_varint_column(body_sizes), attributes, timestamp_column, offset_column, key_column]
    tails = [_NO_HEADERS] * count
    for i in with_headers:
        tails[i] = varint(int(header_counts[i])) + entries[i]
    if not (key_lengths > 0).any():
        return _interleave(_varint_rows([*head, value_column]), value_blobs, tails)
    return _interleave(
        _varint_rows(head), key_blobs, _varint_rows([value_column]), value_blobs, tails
    )


# The end of a record without headers: a header count of 0.
_NO_HEADERS = b"\x00"


def _interleave(*columns: list[bytes]) -> bytes:
    """Record 0's pieces, then record 1's, ... joined in C (no per-record tuples)."""
    width = len(columns)
    pieces: list[bytes] = [b""] * (width * len(columns[0]))
    for index, column in enumerate(columns):
        pieces[index::width] = column
    return b"".join(pieces)
