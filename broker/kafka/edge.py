"""Record batches at the Kafka edge: Kafka v2 in from producers, Kafka v2 out to consumers.

The storage decision (docs/kafka.md, "Storage decision"): one stored format,
Tidelog's, so the cleaner, the indexes, retention, the Spark Data Source and
`dump-log` read every batch the same way. A Kafka producer's batches are converted
to Tidelog batches before the append, and a Kafka consumer's are converted back
after the read; the 40 header bytes from `attributes` on are copied (producer id,
epoch and base sequence included, so storage's producer checks see them) and the
records re-encoded column-wise (protocol.kafka.columns). Nothing here runs on the
msgpack path, where the stored format already matches the reader.

A conversion costs per record (~0.7 µs in, ~1.3 µs out at 1,000 records a batch),
so a large or compressed one runs in a worker thread, as a large append does.
"""

from __future__ import annotations

import trio

from broker.fetch_send import RecordSpan
from protocol.kafka import records as kafka
from protocol.kafka.convert import kafka_to_tidelog_all, tidelog_to_kafka_all

# Conversions of more bytes than this run in a worker thread: ~600 records of
# 100 B, under a millisecond of event-loop time.
INLINE_CONVERT_MAX_BYTES = 64 * 1024


def _compressed(records: bytes) -> bool:
    """Whether the first Kafka batch is compressed (its decoded size is unknown)."""
    if len(records) < kafka.HEADER_SIZE:
        return False
    attributes = int.from_bytes(
        records[kafka.ATTRIBUTES_OFFSET : kafka.ATTRIBUTES_OFFSET + 2], "big"
    )
    return bool(attributes & kafka.COMPRESSION_MASK)


async def to_tidelog(records: bytes) -> bytes:
    """A produce request's Kafka batches as Tidelog batches (KafkaCodecError if damaged)."""
    if len(records) > INLINE_CONVERT_MAX_BYTES or _compressed(records):
        return await trio.to_thread.run_sync(kafka_to_tidelog_all, records)
    return kafka_to_tidelog_all(records)


def _read_and_convert(span: RecordSpan) -> bytes:
    try:
        return tidelog_to_kafka_all(span.read())
    finally:
        span.close()


async def to_kafka(records: bytes | RecordSpan) -> bytes:
    """Fetched Tidelog batches (bytes, or a span of a segment file) as Kafka batches."""
    if isinstance(records, RecordSpan):
        return await trio.to_thread.run_sync(_read_and_convert, records)
    if len(records) > INLINE_CONVERT_MAX_BYTES:
        return await trio.to_thread.run_sync(tidelog_to_kafka_all, records)
    return tidelog_to_kafka_all(records)
