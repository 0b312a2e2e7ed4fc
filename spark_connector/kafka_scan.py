"""Kafka v2 batches of a fetch answer -> the Arrow columns of their records, column-wise.

A Kafka-produced topic is stored as the producer's v2 batches (docs/kafka.md) and a
task reads them as they are (a local read, or a fetch asking for them). Their records
are varints, not msgpack, so `record_scan` does not apply; instead every batch's
records (decompressed where compressed) are joined into one buffer, which is one
valid stream of length-prefixed records, and walked once by Kafka's column-wise
scanner (`protocol.kafka.stored.scan_run`).
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
from protocol.kafka import stored
from protocol.kafka.columns import RecordColumns
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
    CorruptMessage (`protocol.kafka.stored.scan_run`)."""
    run = stored.scan_run(buf, batches)
    if run is None:
        return None
    batch_index = np.repeat(np.arange(len(run.headers)), run.counts)
    return KafkaFields(run.buffer, batch_index, run.columns), run.headers


def _binary(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> pa.Array:
    null = lengths < 0
    return binary_column(pa.py_buffer(buffer), starts, np.maximum(lengths, 0), null)
