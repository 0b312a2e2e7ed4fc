"""Fixed-layout chunks: record positions by arithmetic, checked with strided reads.

`record_scan` locates records with gathers: every field of every record is read at an
index array, about 30 ns a record. A bulk producer (a loader, a Spark sink, a benchmark)
often writes fixed-size records in batches of a fixed count. Then record i of every
batch sits at the same place in its batch: the first record's layout plus the growth of
the offset delta's encoding (1 byte below 128, 2 below 256, 3 below 65536). Each of those
three runs of records is a 3-D strided view of the buffer (batch, record, byte) with no
index arrays: one strided compare checks a structure byte of every record, one strided
copy moves every value into an Arrow buffer. About 15 ns a record, values included.

Exactness: a record is accepted only if, at its computed start, the bytes say fixarray-5,
an offset delta of the run's width, a positive fixint timestamp delta, the first
record's exact key and value headers, and an empty headers array as its last byte. By
induction from the first record (whose start is known) every record is then exactly
where it was computed, and the last one ends where the payload ends (the lengths must
add up). Anything else returns None and `record_scan` handles the chunk.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from spark_connector.record_scan import (
    BIN8,
    BIN16,
    BIN32,
    EMPTY_ARRAY,
    FIXARRAY_5,
    NIL,
    UINT8,
    UINT16,
    Payload,
)

# Offset-delta encodings of a dense batch by record index: (first index, width, type
# byte or None for a fixint).
_RUNS = ((0, 1, None), (128, 2, UINT8), (256, 3, UINT16))
_MAX_RECORDS = 65536  # past this a delta takes 5 bytes (record_scan handles it)
_WORD = 8
_FIXINT_SIGN = 0x80  # a positive fixint has this bit clear
_MAX_ARROW_BYTES = 2**31 - 1  # int32 offsets of an Arrow binary array


@dataclass(frozen=True, slots=True)
class _Field:
    """A nil-or-bin item of the first record: where its header starts (relative to the
    record), its header bytes, and its data length (None for nil)."""

    at: int
    header: bytes
    length: int | None

    @property
    def data_at(self) -> int:
        return self.at + len(self.header)

    @property
    def end(self) -> int:
        return self.data_at + (self.length or 0)


@dataclass(frozen=True, slots=True)
class UniformFields:
    """A fixed-layout chunk: per-record timestamp deltas as (batch, record) and the key
    and value columns, in record order; offset deltas are the record indexes."""

    batches: int
    records_per_batch: int
    timestamp_deltas: np.ndarray
    keys: pa.Array
    values: pa.Array


def _bin_item(buf: bytes | memoryview, pos: int, at: int) -> _Field | None:
    """The nil or bin item whose header is at `pos` (`at` relative to its record)."""
    kind = buf[pos]
    if kind == NIL:
        return _Field(at, bytes([NIL]), None)
    size = {BIN8: 1, BIN16: 2, BIN32: 4}.get(kind)
    if size is None:
        return None
    length = int.from_bytes(buf[pos + 1 : pos + 1 + size], "big")
    return _Field(at, bytes(buf[pos : pos + 1 + size]), length)


def _first_record(buf: bytes | memoryview, start: int, end: int) -> tuple[_Field, _Field] | None:
    """Key and value items of a record 0 shaped as this path needs, or None."""
    if end - start < 6 or buf[start] != FIXARRAY_5 or buf[start + 1] != 0:
        return None
    if buf[start + 2] & _FIXINT_SIGN:
        return None  # the timestamp delta must be a positive fixint
    key = _bin_item(buf, start + 3, 3)
    if key is None or start + key.end >= end:
        return None
    value = _bin_item(buf, start + key.end, key.end)
    if value is None or start + value.end >= end or buf[start + value.end] != EMPTY_ARRAY:
        return None
    return key, value


def _same_shape(payloads: Sequence[Payload]) -> tuple[int, int] | None:
    """(records per batch, bytes between batches) if every payload is dense, equally
    long, holds as many records and they are evenly spaced; else None."""
    first = payloads[0]
    count, size, header = first.count, first.end - first.start, first.start - first.array_pos
    stride = payloads[1].array_pos - first.array_pos if len(payloads) > 1 else 0
    for b, p in enumerate(payloads):
        if (
            not p.dense
            or p.count != count
            or p.end - p.start != size
            or p.start - p.array_pos != header
            or p.array_pos != first.array_pos + b * stride
        ):
            return None
    return count, stride


def _runs(count: int, length: int) -> list[tuple[int, int, int, int | None, int]]:
    """(first index, end index, delta width, delta type byte, record length) of each
    non-empty run; `length` is the record length with a 1-byte delta."""
    runs = []
    for i, (lo, width, type_byte) in enumerate(_RUNS):
        hi = min(_RUNS[i + 1][0], count) if i + 1 < len(_RUNS) else count
        if lo < hi:
            runs.append((lo, hi, width, type_byte, length + width - 1))
    return runs


def _constraints(
    width: int, type_byte: int | None, key: _Field, value: _Field, length: int
) -> dict[int, tuple[int, int]]:
    """Byte position in a record of this run -> (mask, expected byte)."""
    shift = width - 1  # everything after the delta moves by its extra bytes
    rules = {0: (0xFF, FIXARRAY_5), 1 + width: (_FIXINT_SIGN, 0), length - 1: (0xFF, EMPTY_ARRAY)}
    rules[1] = (_FIXINT_SIGN, 0) if type_byte is None else (0xFF, type_byte)
    for item in (key, value):
        for j, byte in enumerate(item.header):
            rules[item.at + shift + j] = (0xFF, byte)
    return rules


def _windows(rules: dict[int, tuple[int, int]], length: int) -> list[tuple[int, int, int]]:
    """Cover the rules with 8-byte little-endian words inside the record: (position,
    mask, expected) per word."""
    words = []
    pending = sorted(rules)
    while pending:
        at = min(pending[0], length - _WORD)
        mask = expected = 0
        for pos in [p for p in pending if at <= p < at + _WORD]:
            byte_mask, byte = rules[pos]
            mask |= byte_mask << (8 * (pos - at))
            expected |= byte << (8 * (pos - at))
            pending.remove(pos)
        words.append((at, mask, expected))
    return words


def scan_uniform(buf: bytes | memoryview, payloads: Sequence[Payload]) -> UniformFields | None:
    """The records of `payloads` if the chunk has a fixed layout (see the module doc)."""
    if not payloads:
        return None
    shape = _same_shape(payloads)
    if shape is None:
        return None
    count, stride = shape
    first = payloads[0]
    if count > _MAX_RECORDS:
        return None
    items = _first_record(buf, first.start, first.end)
    if items is None:
        return None
    key, value = items
    length = value.end + 1
    runs = _runs(count, length)
    if length < _WORD or sum((hi - lo) * size for lo, hi, _, _, size in runs) != (
        first.end - first.start
    ):
        return None
    batches = len(payloads)
    run_start: dict[int, int] = {}  # first index of a run -> where its first record lies
    at = first.start
    for lo, hi, _, _, size in runs:
        run_start[lo] = at
        at += (hi - lo) * size

    def strided(lo: int, hi: int, size: int, pos: int, dtype: str = "u1") -> np.ndarray:
        """The item of `dtype` at byte `pos` of every record of a run, as (batch, record)."""
        return np.ndarray(
            (batches, hi - lo),
            dtype,
            buffer=buf,
            offset=run_start[lo] + pos,
            strides=(stride, size),
        )

    for lo, hi, width, type_byte, size in runs:
        rules = _constraints(width, type_byte, key, value, size)
        for pos, mask, expected in _windows(rules, size):
            words = strided(lo, hi, size, pos, "<u8")
            if not ((words & np.uint64(mask)) == np.uint64(expected)).all():
                return None

    timestamp_deltas = np.empty((batches, count), dtype=np.int64)
    for lo, hi, width, _, size in runs:
        timestamp_deltas[:, lo:hi] = strided(lo, hi, size, 1 + width)
    rows = batches * count
    columns = []
    for item in (key, value):
        if item.length is None:
            columns.append(pa.nulls(rows, pa.binary()))
            continue
        if rows * item.length > _MAX_ARROW_BYTES:
            return None
        data = np.empty(rows * item.length, dtype=np.uint8)
        if item.length:  # empty values have no bytes to copy (and V0 items cannot be shaped)
            # Each value as one opaque item: numpy copies it with one memcpy, not byte by byte.
            item_type = f"V{item.length}"
            values = data.view(item_type).reshape(batches, count)
            for lo, hi, width, _, size in runs:
                values[:, lo:hi] = strided(lo, hi, size, item.data_at + width - 1, item_type)
        bounds = np.arange(rows + 1, dtype=np.int32) * np.int32(item.length)
        buffers = [None, pa.py_buffer(bounds), pa.py_buffer(data)]
        columns.append(pa.Array.from_buffers(pa.binary(), rows, buffers))
    return UniformFields(batches, count, timestamp_deltas, columns[0], columns[1])
