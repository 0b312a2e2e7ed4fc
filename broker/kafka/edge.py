"""Record batches at the Kafka edge: Kafka v2 in from producers, Kafka v2 out to consumers.

The storage decision (docs/kafka.md, "Storage decision"): one stored format,
Tidelog's, so the cleaner, the indexes, retention, the Spark Data Source and
`dump-log` read every batch the same way. A Kafka producer's batches are converted
to Tidelog batches before the append, and a Kafka consumer's are converted back
after the read; the 40 header bytes from `attributes` on are copied (producer id,
epoch and base sequence included, so storage's producer checks see them) and the
records re-encoded column-wise (protocol.kafka.columns). Nothing here runs on the
msgpack path, where the stored format already matches the reader.

A conversion costs per record (~0.5-1 µs each way, column-wise), so a large or
compressed one runs in a worker thread, as a large append does.
"""

from __future__ import annotations

import trio

from protocol.kafka import records as kafka
from protocol.kafka.convert import kafka_to_tidelog_all, tidelog_to_kafka_all
from storage.record_source import RecordSource

# A produce request's batches are converted on the event loop when they promise to be
# cheap (as `broker.handlers.produce.append_inline` decides for appends): uncompressed,
# at most this many bytes and records in all (~0.5-1 µs a record column-wise: a few ms),
# at most this many batches; anything else goes to a worker thread, as does every
# fetched span (its bytes are read from the segment file first). Measured: converting
# a 1 MiB request in a thread halved Kafka produce throughput on a loaded machine.
INLINE_CONVERT_MAX_BYTES = 1024 * 1024
INLINE_CONVERT_MAX_RECORDS = 8192
INLINE_CONVERT_MAX_BATCHES = 16


def convert_inline(records: bytes) -> bool:
    """True if converting these Kafka batches fits the event-loop budget, judged
    from their headers alone (nothing decoded; a bad header is refused at once)."""
    if len(records) > INLINE_CONVERT_MAX_BYTES:
        return False
    pos = batches = count = 0
    while pos + kafka.HEADER_SIZE <= len(records):
        header = kafka.KafkaBatchHeader(*kafka.HEADER.unpack_from(records, pos))
        if header.batch_length < kafka.MIN_BATCH_LENGTH or header.record_count < 0:
            return True  # refused by the conversion before any decoding
        batches += 1
        count += header.record_count
        if header.compression or batches > INLINE_CONVERT_MAX_BATCHES:
            return False
        if count > INLINE_CONVERT_MAX_RECORDS:
            return False
        pos += header.size
    return True


async def to_tidelog(records: bytes) -> bytes:
    """A produce request's Kafka batches as Tidelog batches (KafkaCodecError if damaged)."""
    if convert_inline(records):
        return kafka_to_tidelog_all(records)
    return await trio.to_thread.run_sync(kafka_to_tidelog_all, records)


def _read_and_convert(span: RecordSource) -> bytes:
    try:
        return tidelog_to_kafka_all(span.read())
    finally:
        span.close()


async def to_kafka(records: bytes | RecordSource) -> bytes:
    """Fetched Tidelog batches (bytes, or a source such as a span of a segment file)
    as Kafka batches. Bytes are reads under `storage.read_plan.SENDFILE_MIN_BYTES`
    (64 KiB): inline."""
    if isinstance(records, RecordSource):
        return await trio.to_thread.run_sync(_read_and_convert, records)
    return tidelog_to_kafka_all(records)
