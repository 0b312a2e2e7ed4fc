"""Fetched record batches -> one Arrow RecordBatch, by column transposition.

Each stored batch is decoded with one C-level msgpack call and transposed with
`zip(*records)`; offsets and timestamps are computed with numpy, and the exact offset
range is cut with `searchsorted` over the (possibly gapped, after compaction) offsets.
There is no per-record Python loop, except building the `headers` column when it is
asked for (a record without headers must be null, not an empty list, as in Kafka).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from protocol.batch import BatchHeader, TimestampType, decode_payload, iter_headers
from spark_connector.schema import HEADER_ARROW_TYPE, arrow_schema

_TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")
_US_PER_MS = 1000


@dataclass(slots=True)
class Converted:
    """The rows of one fetch response that fall in [start, end), and where to go next."""

    batch: pa.RecordBatch | None
    next_offset: int
    rows: int
    last_row_offset: int | None


def _columns_of_batch(
    buf: bytes | memoryview, pos: int, header: BatchHeader, start: int, end: int
) -> tuple[np.ndarray, np.ndarray, tuple, tuple, tuple, int, int] | None:
    """Offsets, timestamps (ms), keys, values, headers of one batch cut to [start, end)."""
    _, records = decode_payload(buf, pos, header=header)
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


def records_to_arrow(
    buf: bytes | memoryview,
    *,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> Converted:
    """Convert back-to-back batches (a fetch answer) to Arrow rows in [start, end).

    `next_offset` is where the next fetch should start: past the last whole batch seen,
    or `end` once a batch reaching `end` was seen. Batches entirely below `start` (the
    fetch returns the batch containing `start`) and past `end` contribute nothing.
    """
    with collector_paused():
        return _records_to_arrow(buf, topic, partition, start, end, include_headers)


def _records_to_arrow(
    buf: bytes | memoryview,
    topic: str,
    partition: int,
    start: int,
    end: int,
    include_headers: bool,
) -> Converted:
    offsets_parts: list[np.ndarray] = []
    ts_parts: list[np.ndarray] = []
    type_parts: list[np.ndarray] = []
    keys: list[bytes | None] = []
    values: list[bytes | None] = []
    headers: list[tuple] = []
    next_offset = start
    for pos, header in iter_headers(buf, allow_partial=True):
        if header.base_offset >= end:
            next_offset = max(next_offset, end)
            break
        next_offset = max(next_offset, header.next_offset)
        if header.next_offset <= start:
            continue
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
        if header.next_offset >= end:
            next_offset = max(next_offset, end)
            break
    rows = len(keys)
    if rows == 0:
        return Converted(None, min(next_offset, end), 0, None)
    offsets = np.concatenate(offsets_parts)
    timestamps_us = np.concatenate(ts_parts) * _US_PER_MS
    columns = [
        pa.array(keys, type=pa.binary()),
        pa.array(values, type=pa.binary()),
        pa.repeat(pa.scalar(topic, pa.string()), rows),
        pa.array(np.full(rows, partition, dtype=np.int32)),
        pa.array(offsets),
        pa.array(timestamps_us, type=_TIMESTAMP_TYPE),
        pa.array(np.concatenate(type_parts)),
    ]
    if include_headers:
        columns.append(headers_column(headers))
    batch = pa.RecordBatch.from_arrays(columns, schema=arrow_schema(include_headers))
    return Converted(batch, min(next_offset, end), rows, int(offsets[-1]))


def headers_column(headers: list[tuple]) -> pa.Array:
    """`array<struct<key,value>>`, null for a record without headers (Kafka's converter)."""
    return pa.array(
        [[{"key": k, "value": v} for k, v in h] if h else None for h in headers],
        type=HEADER_ARROW_TYPE,
    )


def empty_batch(include_headers: bool) -> pa.RecordBatch:
    """A zero-row batch with the exact schema (Spark needs one to learn nothing is there)."""
    schema = arrow_schema(include_headers)
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
