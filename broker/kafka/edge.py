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
in a worker thread (broker/offload.py), as a large append does. The same walk first
checks each batch's size as sent against the topic's `max.message.bytes` (Kafka's
check, on the compressed batch), so an over-size batch costs no inflating and no
conversion; the storage validator checks again after.
"""

from __future__ import annotations

import functools

from broker import offload
from protocol.batch import BlockTally, max_decompressed_bytes
from protocol.kafka.convert import (
    conversion_cost_ns,
    kafka_to_tidelog_all,
    tally_kafka,
    tally_tidelog,
    tidelog_to_kafka_all,
)
from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.kafka.records import LAYOUT, LOG_OVERHEAD
from storage.record_source import RecordSource

_BATCH_LENGTH = LAYOUT.index["batch_length"]


def check_batch_sizes(block: BlockTally, max_message_bytes: int) -> None:
    """MESSAGE_TOO_LARGE if a tallied batch, as sent, is over `max_message_bytes`."""
    for pos, fields in block.headers:
        size = fields[_BATCH_LENGTH] + LOG_OVERHEAD
        if size > max_message_bytes:
            raise KafkaCodecError(
                KafkaError.MESSAGE_TOO_LARGE,
                f"batch at byte {pos} of {size} bytes exceeds max.message.bytes "
                f"{max_message_bytes}",
            )


async def to_tidelog(records: bytes, max_message_bytes: int | None = None) -> bytes:
    """A produce request's Kafka batches as Tidelog batches (KafkaCodecError if damaged),
    for a topic whose `max.message.bytes` is `max_message_bytes`: each batch's size is
    checked before anything is inflated, and the cap derived from it bounds inflating
    (None: no size check, the default cap)."""
    block = tally_kafka(records)
    convert = kafka_to_tidelog_all
    if max_message_bytes is not None:
        check_batch_sizes(block, max_message_bytes)
        cap = max_decompressed_bytes(max_message_bytes)
        convert = functools.partial(kafka_to_tidelog_all, max_decompressed=cap)
    return await offload.run(conversion_cost_ns(block), convert, records, block)


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
