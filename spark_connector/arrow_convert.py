"""Fetched record batches -> one Arrow RecordBatch, without a Python object per record.

The fast path (`record_scan`) locates every record's fields in the fetched bytes with
numpy and has Arrow copy keys and values straight out of them; offsets and timestamps
are numpy arithmetic over the batch headers, and the exact offset range is cut with
`searchsorted` over the (possibly gapped, after compaction) offsets. Records the scan
does not cover (headers wanted and present, or bytes outside the record grammar) are
decoded instead: one C-level msgspec call per stored batch, transposed with
`zip(*records)`, with the `headers` column built per record (a record without headers
must be null, not an empty list, as in Kafka).

Kafka v2 batches (a Kafka-produced topic, stored as produced) are scanned column-wise
by `kafka_scan`; a chunk holds batches of one layout (`split_selection` cuts where
the layout changes), and a selection of both is decoded batch by batch.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import lru_cache

import numpy as np
import pyarrow as pa

from protocol.batch import (
    CONTROL_MASK,
    DEFAULT_MAX_DECOMPRESSED_BYTES,
    HEADER_SIZE,
    TRANSACTIONAL_MASK,
    BatchHeader,
    RecordHeaders,
    TimestampType,
    decode_payload,
)
from protocol.compression import decompress
from protocol.kafka import stored
from spark_connector.kafka_scan import scan_kafka
from spark_connector.record_scan import Payload, array_header, binary_column, scan_records
from spark_connector.schema import HEADER_ARROW_TYPE, arrow_schema
from spark_connector.uniform_scan import UniformFields, scan_uniform

_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
# Offsets, timestamps (ms), keys, values, headers, and the slice [lo, hi) of a batch.
_BatchColumns = tuple[
    np.ndarray,
    np.ndarray,
    tuple[bytes | None, ...],
    tuple[bytes | None, ...],
    tuple[RecordHeaders, ...],
    int,
    int,
]
_US_PER_MS = 1000
# Fetched bytes converted into one Arrow batch. The scan reads its chunk about eight
# times over; a chunk that stays in a core's L2 cache converts about a third faster
# than an 8 MiB fetch answer (measured: 66-70 against 98 ns a row), and still makes
# batches of ~18,000 100-byte records, past the 10,000 rows Spark's Arrow path likes.
CONVERT_CHUNK_BYTES = 2 * 1024 * 1024
# (topic, partition, size) column pairs kept: a task reads a few partitions, and batch
# sizes round to a few powers of two.
CONSTANT_COLUMNS_CACHED = 32


@dataclass(slots=True)
class Converted:
    """The rows of one fetch response that fall in [start, end), and where to go next."""

    batch: pa.RecordBatch | None
    next_offset: int
    rows: int
    last_row_offset: int | None


def _columns_of_batch(
    buf: bytes | memoryview, pos: int, header: BatchHeader, start: int, end: int
) -> _BatchColumns | None:
    """Offsets, timestamps (ms), keys, values, headers of one batch cut to [start, end)."""
    records: Sequence[tuple[int, int, bytes | None, bytes | None, RecordHeaders]]
    if stored.is_kafka(header):
        records = stored.decode_stored(buf, pos, header)
    else:
        records = decode_payload(buf, pos, header=header)[1]
    if not records:
        return None
    deltas, ts_deltas, keys, values, headers = zip(*records, strict=True)
    count, base = len(records), header.base_offset
    if count == header.last_offset_delta + 1:
        # No gaps (deltas are strictly increasing, so they are exactly 0..n-1).
        lo, hi = max(start - base, 0), min(end - base, count)
        offsets = np.arange(base + lo, base + max(hi, lo), dtype=np.int64)
    else:  # compacted: use the deltas
        all_offsets = np.asarray(deltas, dtype=np.int64) + base
        lo = int(np.searchsorted(all_offsets, start, side="left"))
        hi = int(np.searchsorted(all_offsets, end, side="left"))
        offsets = all_offsets[lo:hi]
    if lo >= hi:
        return None
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME:
        # Kafka: every record of a LogAppendTime batch carries the broker's append time.
        timestamps = np.full(hi - lo, header.max_timestamp, dtype=np.int64)
    else:
        timestamps = np.asarray(ts_deltas[lo:hi], dtype=np.int64) + header.base_timestamp
    if lo > 0 or hi < count:
        keys, values, headers = keys[lo:hi], values[lo:hi], headers[lo:hi]
    return offsets, timestamps, keys, values, headers, int(header.timestamp_type), hi - lo


@contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while building many short-lived tuples.

    Decoding allocates millions of tuples that stay alive until the Arrow arrays are
    built; each allocation burst triggers full collections that find nothing (measured
    here: 1.2 M rows/s with the collector on, 3.2 M with it paused). Nothing created
    here forms cycles, so pausing is safe; the previous state is restored.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


_TXN_BITS = TRANSACTIONAL_MASK | CONTROL_MASK


@dataclass(frozen=True, slots=True)
class Selection:
    """The whole batches of a fetch answer holding offsets in [start, end), as
    (position, header) pairs, and `next_offset`: where the next fetch starts.

    That is past the last whole batch seen, or `end` once a batch reaching `end` was
    seen. Batches entirely below `start` (the fetch returns the batch containing
    `start`) and past `end` are left out.
    """

    batches: tuple[tuple[int, BatchHeader], ...]
    start: int
    end: int
    next_offset: int


def select_batches(
    buf: bytes | memoryview,
    start: int,
    end: int,
    aborted: Sequence[tuple[int, int]] | None = None,
) -> Selection:
    """One pass over the batch headers of a fetch answer (no payload is read).

    Transaction markers (control batches) are never rows; with `aborted` (a
    read_committed answer's aborted transactions) the batches of aborted
    transactions are left out too (Kafka's consumer rule, per batch)."""
    selected: list[tuple[int, BatchHeader]] = []
    next_offset = start
    skip = None
    if aborted is not None:
        from protocol.kafka.control import AbortedFilter

        skip = AbortedFilter(aborted)
    for pos, header in stored.iter_any_headers(buf):
        if header.base_offset >= end:
            next_offset = max(next_offset, end)
            break
        next_offset = max(next_offset, header.next_offset)
        if header.next_offset <= start:
            continue
        attributes = header.attributes
        if attributes & _TXN_BITS and (
            attributes & CONTROL_MASK or (skip is not None and skip.aborted(header))
        ):
            if skip is not None and attributes & CONTROL_MASK:
                skip.marker(buf, pos, header)
            if header.next_offset >= end:
                next_offset = max(next_offset, end)
                break
            continue
        if skip is not None and header.producer_id >= 0:
            skip.consume_up_to(header.last_offset)
        selected.append((pos, header))
        if header.next_offset >= end:
            next_offset = max(next_offset, end)
            break
    return Selection(tuple(selected), start, end, min(next_offset, end))


def split_selection(
    selection: Selection, chunk_bytes: int = CONVERT_CHUNK_BYTES
) -> list[Selection]:
    """Consecutive groups of the selected batches of up to `chunk_bytes` each (a bigger
    batch alone) and of one layout, to convert one at a time; each keeps the whole
    selection's bounds."""
    groups: list[Selection] = []
    group: list[tuple[int, BatchHeader]] = []
    group_bytes = 0
    for pos, header in selection.batches:
        if group and (
            group_bytes + header.size > chunk_bytes or header.magic != group[-1][1].magic
        ):
            groups.append(replace(selection, batches=tuple(group)))
            group, group_bytes = [], 0
        group.append((pos, header))
        group_bytes += header.size
    if group or not groups:
        groups.append(replace(selection, batches=tuple(group)))
    return groups


def records_to_arrow(
    buf: bytes | memoryview,
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> Converted:
    """Convert back-to-back batches (a fetch answer) to Arrow rows in [start, end)."""
    selection = select_batches(buf, start, end)
    return selection_to_arrow(
        buf, selection, topic=topic, partition=partition, include_headers=include_headers
    )


def selection_to_arrow(
    buf: bytes | memoryview,
    selection: Selection,
    *,
    topic: str,
    partition: int,
    include_headers: bool,
) -> Converted:
    """The rows of the selected batches that fall in [selection.start, selection.end)."""
    magics = {header.magic for _, header in selection.batches}
    with collector_paused():
        if magics == {stored.MAGIC}:
            columns = _kafka_columns(buf, selection, include_headers)
        elif stored.MAGIC in magics:  # both layouts (not from split_selection)
            columns = None
        else:
            columns = _scanned_columns(buf, selection, include_headers)
        if columns is None:
            columns = _decoded_columns(buf, selection, include_headers)
    if columns is None or not len(columns[0]):
        return Converted(None, selection.next_offset, 0, None)
    offsets, timestamps_ms, ts_types, keys, values, headers = columns
    rows = len(offsets)
    topic_column, partition_column = _constant_columns(topic, partition, _capacity(rows))
    arrays = [
        keys,
        values,
        topic_column.slice(0, rows),
        partition_column.slice(0, rows),
        pa.array(offsets),
        pa.array(timestamps_ms * _US_PER_MS, type=_TIMESTAMP_TYPE),
        pa.array(ts_types),
    ]
    if include_headers:
        arrays.append(headers)
    batch = pa.RecordBatch.from_arrays(arrays, schema=arrow_schema(include_headers))
    return Converted(batch, selection.next_offset, rows, int(offsets[-1]))


# offsets, timestamps (ms), timestamp types, keys, values, headers (None unless asked).
_Columns = tuple[np.ndarray, np.ndarray, np.ndarray, pa.Array, pa.Array, pa.Array | None]
# No row in range: what the scan says for batches that hold none of the wanted offsets.
_NO_ROWS: _Columns = (
    np.empty(0, np.int64),
    np.empty(0, np.int64),
    np.empty(0, np.int32),
    pa.array([], pa.binary()),
    pa.array([], pa.binary()),
    None,
)


def _capacity(rows: int) -> int:
    """`rows` rounded up to a power of two, so a few cached columns serve every batch."""
    return 1 << max(rows - 1, 0).bit_length()


@lru_cache(maxsize=CONSTANT_COLUMNS_CACHED)
def _constant_columns(topic: str, partition: int, capacity: int) -> tuple[pa.Array, pa.Array]:
    """The `topic` and `partition` columns of `capacity` rows, built once and sliced."""
    return (
        pa.repeat(pa.scalar(topic, pa.string()), capacity),
        pa.array(np.full(capacity, partition, dtype=np.int32)),
    )


def _scanned_columns(
    buf: bytes | memoryview, selection: Selection, include_headers: bool
) -> _Columns | None:
    """The columns by `uniform_scan` or `record_scan` (`_NO_ROWS` if none is in range),
    or None where neither applies."""
    start, end = selection.start, selection.end
    located = _payloads(buf, selection.batches)
    if located is None:
        return None
    scan_buf, payloads, headers = located
    uniform = scan_uniform(scan_buf, payloads)
    if uniform is not None:
        return _uniform_columns(uniform, headers, start, end, include_headers)
    fields = scan_records(scan_buf, payloads, empty_headers=include_headers)
    if fields is None:
        return None
    batch_of = fields.batch_index
    offsets = _header_values(headers, "base_offset").take(batch_of) + fields.offset_deltas
    lo, hi = _cut(offsets, start, end)
    if lo >= hi:
        return _NO_ROWS
    if lo > 0 or hi < len(offsets):
        fields, offsets, batch_of = fields.take(lo, hi), offsets[lo:hi], batch_of[lo:hi]
    timestamps_ms, ts_types = _timestamps(headers, batch_of, fields.timestamp_deltas)
    buffer = pa.py_buffer(scan_buf)
    return (
        offsets,
        timestamps_ms,
        ts_types,
        binary_column(buffer, fields.key_start, fields.key_length, fields.key_null),
        binary_column(buffer, fields.value_start, fields.value_length, fields.value_null),
        pa.nulls(hi - lo, HEADER_ARROW_TYPE) if include_headers else None,
    )


def _kafka_columns(
    buf: bytes | memoryview, selection: Selection, include_headers: bool
) -> _Columns | None:
    """The columns of Kafka v2 batches by `kafka_scan` (`_NO_ROWS` if none is in range)."""
    scanned = scan_kafka(buf, selection.batches)
    if scanned is None:
        return None
    fields, headers = scanned
    batch_of = fields.batch_index
    offsets = _header_values(headers, "base_offset").take(batch_of) + fields.offset_deltas
    lo, hi = _cut(offsets, selection.start, selection.end)
    if lo >= hi:
        return _NO_ROWS
    timestamps_ms, ts_types = _timestamps(headers, batch_of[lo:hi], fields.timestamp_deltas[lo:hi])
    return (
        offsets[lo:hi],
        timestamps_ms,
        ts_types,
        fields.keys(lo, hi),
        fields.values(lo, hi),
        headers_column(fields.headers[lo:hi]) if include_headers else None,
    )


def _uniform_columns(
    uniform: UniformFields, headers: list[BatchHeader], start: int, end: int, include_headers: bool
) -> _Columns:
    """The rows in [start, end) of a fixed-layout chunk (dense: deltas are indexes)."""
    per_batch = uniform.records_per_batch
    base_offsets = _header_values(headers, "base_offset")
    offsets = (base_offsets[:, None] + np.arange(per_batch)).ravel()
    lo, hi = _cut(offsets, start, end)
    if lo >= hi:
        return _NO_ROWS
    batch_of = np.repeat(np.arange(uniform.batches), per_batch)[lo:hi]
    deltas = uniform.timestamp_deltas.ravel()[lo:hi]
    timestamps_ms, ts_types = _timestamps(headers, batch_of, deltas)
    return (
        offsets[lo:hi],
        timestamps_ms,
        ts_types,
        uniform.keys.slice(lo, hi - lo),
        uniform.values.slice(lo, hi - lo),
        pa.nulls(hi - lo, HEADER_ARROW_TYPE) if include_headers else None,
    )


def _header_values(headers: list[BatchHeader], name: str) -> np.ndarray:
    """One int64 per batch: the header field `name`."""
    return np.fromiter((getattr(h, name) for h in headers), np.int64, len(headers))


def _cut(offsets: np.ndarray, start: int, end: int) -> tuple[int, int]:
    """Row range [lo, hi) of the increasing `offsets` that lies in [start, end)."""
    lo = int(np.searchsorted(offsets, start, side="left"))
    hi = int(np.searchsorted(offsets, end, side="left"))
    return lo, hi


def _timestamps(
    headers: list[BatchHeader], batch_of: np.ndarray, deltas: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Each row's timestamp (ms) and timestamp type, from its batch header and delta."""
    timestamps_ms = _header_values(headers, "base_timestamp").take(batch_of) + deltas
    ts_type = _header_values(headers, "timestamp_type").astype(np.int32)
    if ts_type.any():
        # Kafka: every record of a LogAppendTime batch carries the broker's append time.
        max_ts = _header_values(headers, "max_timestamp")
        log_append = ts_type.take(batch_of) == TimestampType.LOG_APPEND_TIME
        timestamps_ms = np.where(log_append, max_ts.take(batch_of), timestamps_ms)
    return timestamps_ms, ts_type.take(batch_of)


def _payloads(
    buf: bytes | memoryview, selected: tuple[tuple[int, BatchHeader], ...]
) -> tuple[bytes | memoryview, list[Payload], list[BatchHeader]] | None:
    """The buffer to scan (the fetch itself, or its payloads decompressed and joined),
    where each non-empty batch's records lie in it, and those batches' headers."""
    compressed = any(header.compression for _, header in selected)
    parts: list[bytes | memoryview] = []
    joined_bytes = 0
    payloads: list[Payload] = []
    headers: list[BatchHeader] = []
    view = memoryview(buf)
    for pos, header in selected:
        if header.record_count == 0:
            continue
        payload = view[pos + HEADER_SIZE : pos + header.size]
        if compressed:
            if header.compression:
                payload = memoryview(
                    decompress(header.compression, payload, DEFAULT_MAX_DECOMPRESSED_BYTES)
                )
            parts.append(payload)
            array_pos, joined_bytes = joined_bytes, joined_bytes + len(payload)
        else:
            array_pos = pos + HEADER_SIZE
        if not payload:
            return None
        shape = array_header(payload, 0)
        if shape is None or shape[0] != header.record_count:
            return None
        payloads.append(
            Payload(
                array_pos=array_pos,
                start=array_pos + shape[1],
                end=array_pos + len(payload),
                count=header.record_count,
                dense=header.record_count == header.last_offset_delta + 1,
            )
        )
        headers.append(header)
    if not payloads:
        return None
    # A fetch answer is scanned where it lies (a view of the receive buffer: no copy).
    scan_buf = b"".join(parts) if compressed else buf
    return scan_buf, payloads, headers


def _decoded_columns(
    buf: bytes | memoryview, selection: Selection, include_headers: bool
) -> _Columns | None:
    """The columns by decoding each batch into Python tuples (any records at all)."""
    start, end = selection.start, selection.end
    offsets_parts: list[np.ndarray] = []
    ts_parts: list[np.ndarray] = []
    type_parts: list[np.ndarray] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[RecordHeaders] = []
    for pos, header in selection.batches:
        cols = _columns_of_batch(buf, pos, header, start, end)
        if cols is None:
            continue
        offs, tss, ks, vs, hs, ts_type, n = cols
        offsets_parts.append(offs)
        ts_parts.append(tss)
        type_parts.append(np.full(n, ts_type, dtype=np.int32))
        keys.extend(ks)
        values.extend(vs)
        if include_headers:
            headers.extend(hs)
    if not keys:
        return None
    return (
        np.concatenate(offsets_parts),
        np.concatenate(ts_parts),
        np.concatenate(type_parts),
        pa.array(keys, type=pa.binary()),
        pa.array(values, type=pa.binary()),
        headers_column(headers) if include_headers else None,
    )


def headers_column(headers: list[RecordHeaders]) -> pa.Array:
    """`array<struct<key,value>>`, null for a record without headers (Kafka's converter)."""
    return pa.array(
        [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
        type=HEADER_ARROW_TYPE,
    )


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    """A zero-row batch with the exact schema (Spark needs one to learn nothing is there)."""
    schema = arrow_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
