"""Kafka varint records decoded and encoded column-wise with numpy: the bulk path of
`decode_records` and `encode_records`.

A record's fields sit one after another, each starting where the previous one's
varint or bytes end, so a per-record parser walks every field in Python (about
2 µs a record). Here every field is read for all records at once: a varint
column is gathered as an (n, width) byte matrix at the records' current
positions and decoded with a few array operations, then every position moves on
by the sizes just read. Keys and values become `bytes` through C-level `map`s
over slices. Only two things stay per record in Python: finding where each
record starts (a record's length says where the next begins, so this is a chain;
one tight loop over the length prefixes), and the headers of records that have
any (rare; parsed by the per-record code).

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

from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.kafka.varint import VARINT_MAX_BYTES, VARLONG_MAX_BYTES, read_uvarint, varint

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from protocol.batch import RecordHeaders

__all__ = ["RecordColumns", "decode_columns", "encode_columns", "scan_columns"]


def _corrupt(message: str) -> KafkaCodecError:
    return KafkaCodecError(KafkaError.CORRUPT_MESSAGE, message)


def _record_starts(data: bytes, count: int) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of each record's body, walking the length prefixes.

    Lengths of up to 2 bytes (records under 8 KiB) are read inline: this loop is
    the one per-record Python step of the path.
    """
    starts = [0] * count
    ends = [0] * count
    pos = 0
    try:
        for i in range(count):
            raw = data[pos]
            if raw < 0x80:
                pos += 1
            else:
                second = data[pos + 1]
                if second < 0x80:
                    raw = (raw & 0x7F) | (second << 7)
                    pos += 2
                else:
                    raw, pos = read_uvarint(data, pos, VARINT_MAX_BYTES)
            if raw & 1:
                raise _corrupt(f"record {i} has a negative length")
            starts[i] = pos
            pos += raw >> 1
            ends[i] = pos
    except (IndexError, ValueError) as exc:
        raise _corrupt(f"record length prefixes run past the records: {exc}") from exc
    if pos != len(data):
        raise _corrupt(f"records end at byte {pos} of {len(data)}")
    return np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64)


def _varints(padded: np.ndarray, pos: np.ndarray, width: int) -> tuple[np.ndarray, np.ndarray]:
    """Zigzag varints starting at every position: (values, sizes in bytes).

    Reads one byte for every record, then only for the records whose varint goes
    on: the work follows the bytes actually there (timestamp deltas are often 2).
    """
    byte = padded[pos]
    raw = (byte & 0x7F).astype(np.uint64)
    sizes = np.ones(len(pos), dtype=np.int64)
    going = np.flatnonzero(byte >= 0x80)
    shift = 0
    while len(going):
        shift += 7
        if shift >= 7 * width:
            raise _corrupt(f"varint longer than {width} bytes")
        byte = padded[pos[going] + sizes[going]]
        if shift == 63 and (byte > 1).any():  # a 10th byte may carry only bit 63
            raise _corrupt("varlong overflows 64 bits")
        raw[going] |= (byte & 0x7F).astype(np.uint64) << np.uint64(shift)
        sizes[going] += 1
        going = going[byte >= 0x80]
    if width == VARINT_MAX_BYTES and (raw >> np.uint64(32)).any():
        raise _corrupt("varint overflows 32 bits")
    values = (raw >> np.uint64(1)).astype(np.int64) ^ -(raw & np.uint64(1)).astype(np.int64)
    return values, sizes


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
    starts, ends = _record_starts(data, count)
    # Padding lets every varint window be gathered without a bounds check; a field
    # read into the padding is caught by the end-of-record check below.
    # Positions only grow, so a record whose fields overrun it ends past its end.
    padded = np.frombuffer(data + bytes(VARLONG_MAX_BYTES), dtype=np.uint8)
    end = len(data)
    pos = starts + 1  # skip the record attributes byte
    timestamp_deltas, size = _varints(padded, np.minimum(pos, end), VARLONG_MAX_BYTES)
    pos += size
    offset_deltas, size = _varints(padded, np.minimum(pos, end), VARINT_MAX_BYTES)
    pos += size
    key_lengths, size = _varints(padded, np.minimum(pos, end), VARINT_MAX_BYTES)
    key_starts = pos + size
    pos = key_starts + np.maximum(key_lengths, 0)
    value_lengths, size = _varints(padded, np.minimum(pos, end), VARINT_MAX_BYTES)
    value_starts = pos + size
    pos = value_starts + np.maximum(value_lengths, 0)
    header_counts, size = _varints(padded, np.minimum(pos, end), VARINT_MAX_BYTES)
    pos += size
    if (key_lengths < -1).any() or (value_lengths < -1).any():
        raise _corrupt("record key or value length below -1")
    headers: list[RecordHeaders] | repeat[RecordHeaders] = repeat((), count)
    with_headers = np.flatnonzero(header_counts)
    if (pos > ends).any():
        bad = int(np.flatnonzero(pos > ends)[0])
        raise _corrupt(f"record {bad}'s fields run past its end")
    if len(with_headers):
        headers = [()] * count
        for i in with_headers.tolist():  # only records that carry headers
            headers[i], pos[i] = decode_headers(
                data, int(pos[i]), int(header_counts[i]), int(ends[i])
            )
    if not np.array_equal(pos, ends):
        bad = int(np.flatnonzero(pos != ends)[0])
        raise _corrupt(f"record {bad} ends at byte {int(pos[bad])}, declared {int(ends[bad])}")
    return RecordColumns(
        offset_deltas,
        timestamp_deltas,
        key_starts,
        key_lengths,
        value_starts,
        value_lengths,
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
