"""Record batches at the Kafka edge: stored as the producer sent them, sent as stored.

The storage decision (docs/kafka.md, "Storage decision"): the layout follows the
producer. A Kafka producer's v2 batches are appended as they are (storage checks
them as Kafka's LogValidator does and stamps offsets, the leader epoch and
LogAppendTime the way Kafka does); nothing is converted on the way in. This module
first checks each batch's size as sent against the topic's `max.message.bytes`
(Kafka's check, on the compressed batch), so an over-size batch costs no inflating.

A fetch answer that holds Kafka batches only goes out untouched: a span of the
segment file is sent with `sendfile` by the connection (broker/fetch_send.py), bytes
as they are. Only Tidelog (§3) batches in the answer, from msgpack producers, are
converted (protocol.layouts; ~1 µs a record column-wise, priced through
broker/offload.py); the Kafka batches around them are copied as they are.
"""

from __future__ import annotations

from broker import offload
from protocol.batch import (
    ANY_LAYOUT,
    F_BATCH_LENGTH,
    KAFKA_BATCHES,
    KAFKA_MAGIC,
    LOG_OVERHEAD,
    BatchWalk,
)
from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.layouts import conversion_cost, layouts_of, to_layout
from storage.record_source import RecordSource


def check_batch_sizes(records: bytes, max_message_bytes: int) -> None:
    """MESSAGE_TOO_LARGE if a batch, as sent, is over `max_message_bytes` (one header
    read a batch; bytes that are no batch are the validator's to refuse)."""
    for pos, fields in BatchWalk(records, layout=ANY_LAYOUT, whole=False):
        size = fields[F_BATCH_LENGTH] + LOG_OVERHEAD
        if size > max_message_bytes:
            raise KafkaCodecError(
                KafkaError.MESSAGE_TOO_LARGE,
                f"batch at byte {pos} of {size} bytes exceeds max.message.bytes "
                f"{max_message_bytes}",
            )


def _read_and_convert(span: RecordSource) -> bytes:
    try:
        return to_layout(span.read(), KAFKA_MAGIC)
    finally:
        span.close()


async def to_kafka(records: bytes | RecordSource) -> bytes | RecordSource:
    """Fetched batches as a Kafka consumer reads them: as stored when all are Kafka
    batches (a span stays a span, sent with sendfile), else with every Tidelog batch
    converted (CorruptMessage if damaged).

    A span to convert is read from its file first, which may wait for the disk:
    always in a worker. Bytes (reads under `storage.read_plan.SENDFILE_MIN_BYTES`)
    are walked for their layouts, and converted priced as any conversion."""
    if isinstance(records, RecordSource):
        if records.layouts == KAFKA_BATCHES:
            return records
        return await offload.to_worker(_read_and_convert, records)
    if not records or layouts_of(records) == KAFKA_BATCHES:
        return records
    return await offload.run(conversion_cost(records), to_layout, records, KAFKA_MAGIC)
