"""Record batches at the Kafka edge: Kafka v2 in from producers, Kafka v2 out to consumers.

The storage decision (docs/kafka.md, "Storage decision"): one stored format,
Tidelog's, so the cleaner, the indexes, retention, the Spark Data Source and
`dump-log` read every batch the same way. A Kafka producer's batches are converted
to Tidelog batches before the append, and a Kafka consumer's are converted back
after the read; the 40 header bytes from `attributes` on are copied (producer id,
epoch and base sequence included, so storage's producer checks see them) and the
records re-encoded column-wise (protocol.kafka.columns). Nothing here runs on the
msgpack path, where the stored format already matches the reader.

A conversion costs per record (~0.5-1 µs each way, column-wise). One header walk
(`tally_kafka`) prices a produce request's conversion and then drives it, so the
Kafka batches are walked once; a conversion priced over the event-loop budget runs
in a worker thread (broker/offload.py), as a large append does.
"""

from __future__ import annotations

from broker import offload
from protocol.kafka.convert import (
    conversion_cost_ns,
    kafka_to_tidelog_all,
    tally_kafka,
    tally_tidelog,
    tidelog_to_kafka_all,
)
from storage.record_source import RecordSource


async def to_tidelog(records: bytes) -> bytes:
    """A produce request's Kafka batches as Tidelog batches (KafkaCodecError if damaged)."""
    block = tally_kafka(records)
    return await offload.run(conversion_cost_ns(block), kafka_to_tidelog_all, records, block)


def _read_and_convert(span: RecordSource) -> bytes:
    try:
        return tidelog_to_kafka_all(span.read())
    finally:
        span.close()


async def to_kafka(records: bytes | RecordSource) -> bytes:
    """Fetched Tidelog batches (bytes, or a source such as a span of a segment file)
    as Kafka batches.

    A span is read from its file first, which may wait for the disk: always in a
    worker. Bytes are reads under `storage.read_plan.SENDFILE_MIN_BYTES` (64 KiB),
    priced as any conversion (within the budget unless compressed)."""
    if isinstance(records, RecordSource):
        return await offload.to_worker(_read_and_convert, records)
    block = tally_tidelog(records)
    return await offload.run(conversion_cost_ns(block), tidelog_to_kafka_all, records, block)
