"""Kafka v2 batches of a fetch answer -> the Arrow columns of their records, column-wise.

A Kafka-produced topic is stored as the producer's v2 batches (docs/kafka.md) and a
task reads them as they are (a local read, or a fetch asking for them). Their records
are varints, not msgpack, so `record_scan` does not apply; instead every batch's
records (decompressed where compressed) are joined into one buffer, which is one
valid stream of length-prefixed records, and walked once by Kafka's column-wise
scanner (`protocol.kafka.columns.scan_columns`, numpy over all records at once).
Arrow then copies keys and values straight out of that buffer (`binary_column`), and
offsets and timestamps are numpy arithmetic over the batch headers, as for Tidelog's
batches. The one per-record Python step is the scanner's walk over the length
prefixes; headers are parsed only for records that carry any.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from protocol.batch import BatchHeader
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka import stored
from protocol.kafka.columns import RecordColumns, scan_columns
from protocol.kafka.errors import KafkaCodecError
from spark_connector.record_scan import binary_column

__all__ = ["KafkaFields", "scan_kafka"]


class KafkaFields:
    """Every record of the scanned batches: positions into `buffer`, as arrays."""

    __slots__ = (
        "batch_index",
        "buffer",
        "headers",
        "key_lengths",
        "key_starts",
        "offset_deltas",
        "timestamp_deltas",
        "value_lengths",
        "value_starts",
    )

    def __init__(self, buffer: bytes, batch_index: np.ndarray, columns: RecordColumns) -> None:
        self.buffer = buffer
        self.batch_index = batch_index
        self.offset_deltas = columns.offset_deltas
        self.timestamp_deltas = columns.timestamp_deltas
        self.key_starts, self.key_lengths = columns.key_starts, columns.key_lengths
        self.value_starts, self.value_lengths = columns.value_starts, columns.value_lengths
        self.headers = list(columns.headers)

    def keys(self, lo: int, hi: int) -> pa.Array:
        return _binary(self.buffer, self.key_starts[lo:hi], self.key_lengths[lo:hi])

    def values(self, lo: int, hi: int) -> pa.Array:
        return _binary(self.buffer, self.value_starts[lo:hi], self.value_lengths[lo:hi])


def scan_kafka(
    buf: bytes | memoryview, batches: Sequence[tuple[int, BatchHeader]]
) -> tuple[KafkaFields, list[BatchHeader]] | None:
    """The records of the Kafka batches `batches` (position, header) of `buf`, and the
    headers of those holding records; None when none holds any. Damage anywhere is
    CorruptMessage."""
    parts: list[bytes] = []
    headers: list[BatchHeader] = []
    for pos, header in batches:
        if header.record_count:
            parts.append(stored.stored_payload(buf, pos, header))
            headers.append(header)
    if not headers:
        return None
    counts = np.fromiter((h.record_count for h in headers), np.int64, len(headers))
    joined = b"".join(parts)
    total = int(counts.sum())
    if total * kafka.MIN_RECORD_BYTES > len(joined):
        raise CorruptMessage(f"Kafka batches claim {total} records in {len(joined)} bytes")
    try:
        columns = scan_columns(joined, total, kafka.decode_headers)
    except KafkaCodecError as exc:
        raise CorruptMessage(f"Kafka batch records do not decode: {exc.message}") from exc
    batch_index = np.repeat(np.arange(len(headers)), counts)
    # Each record must lie inside its own batch's payload (a header's count could
    # otherwise shift records between batches).
    part_starts = np.zeros(len(parts), dtype=np.int64)
    np.cumsum([len(p) for p in parts[:-1]], out=part_starts[1:])
    if not np.array_equal(
        np.searchsorted(part_starts, columns.key_starts, "right") - 1, batch_index
    ):
        raise CorruptMessage("a Kafka batch's record count does not match its records")
    return KafkaFields(joined, batch_index, columns), headers


def _binary(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    null = lengths < 0
    return binary_column(pa.py_buffer(buffer), starts, np.maximum(lengths, 0), null)
