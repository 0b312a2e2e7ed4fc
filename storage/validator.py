"""Kafka's LogValidator for Tidelog: what a produced chunk must be before a log takes it.

Every batch of the chunk is walked once (`protocol.batch.BatchWalk`) and checked in
full before anything is written: header, CRC, records, the producer rules, the
topic's size limit and timestamp bounds, LogAppendTime only where the topic stamps
it, and a key on every record of a compacted topic. Bad input raises the error the
produce answer carries (CorruptMessage, InvalidRecord, InvalidTimestamp,
MessageTooLarge); nothing is stored.

A Kafka Produce's chunk holds Kafka v2 batches, stored as sent (docs/kafka.md
"Storage decision"): walked with `protocol.batch.ANY_LAYOUT` and checked by
`protocol.kafka.produce_check.check_produced` (Kafka's LogValidator: CRC, counts and
deltas, keys, timestamps, decompression cap; no record is built), with the same size
limit, LogAppendTime rule and errors as a Tidelog chunk.

Stateless apart from the partition's name: the config is passed per call, as a
topic's config may change between appends. Thread-safe.
"""

from __future__ import annotations

from operator import itemgetter
from typing import NamedTuple

from protocol.batch import (
    ANY_LAYOUT,
    F_BATCH_LENGTH,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    KAFKA_LAYOUT,
    KAFKA_MAGIC,
    LAYOUT,
    LOG_OVERHEAD,
    MAGIC,
    TRANSACTIONAL_MASK,
    BatchLayout,
    BatchWalk,
    TimestampType,
    decode_payload,
    max_decompressed_bytes,
    read_any_header,
    read_header,
    validate_batch,
)
from protocol.errors import CorruptMessage, InvalidRecord, InvalidTimestamp, MessageTooLarge
from protocol.kafka.produce_check import check_produced
from storage.config import LogConfig

__all__ = ["LogValidator", "ValidBatch"]

_KEY = itemgetter(2)


class ValidBatch(NamedTuple):
    """One checked batch of a chunk: where it starts, how many offsets it takes, its
    largest timestamp (what the log needs to assign offsets and index it) and its
    producer fields (what the producer state check needs; -1: not idempotent)."""

    position: int
    offset_count: int
    max_timestamp: int
    producer_id: int = -1
    producer_epoch: int = -1
    base_sequence: int = -1
    magic: int = MAGIC  # its layout: Tidelog's (1) or Kafka's v2 (2)
    # A Kafka batch whose header's max_timestamp is not its records' largest: the log
    # writes `max_timestamp` into it (and a fresh CRC), as Kafka does.
    restamp: bool = False
    # A Kafka batch with attribute bit 4: part of its producer's transaction.
    transactional: bool = False


class LogValidator:
    """Checks produced chunks for one partition (`topic-partition` names it in errors)."""

    __slots__ = ("_where",)

    def __init__(self, topic: str, partition: int) -> None:
        self._where = f"{topic}-{partition}"

    def validate(
        self, buf: bytearray, config: LogConfig, now_ms: int, *, layout: BatchLayout = LAYOUT
    ) -> list[ValidBatch]:
        """Check every batch of `buf` (Tidelog batches, or Kafka v2 ones with
        `layout=KAFKA_LAYOUT`); returns one ValidBatch per batch, in order."""
        cap = max_decompressed_bytes(config.max_message_bytes)
        # Kafka's LogValidator: every CreateTime record within the bounds (a
        # LogAppendTime topic overwrites the timestamps, so checks none).
        bounds = None
        if not config.log_append_time:
            bounds = (
                now_ms - config.message_timestamp_before_max_ms,
                now_ms + config.message_timestamp_after_max_ms,
            )
        if layout is KAFKA_LAYOUT:
            return self._validate_kafka(buf, config, cap, bounds)
        batches: list[ValidBatch] = []
        walk = BatchWalk(buf)
        for pos, fields in walk:
            self._check_size(fields, config)
            header = validate_batch(
                buf, pos, max_decompressed=cap, producer=True, timestamp_bounds=bounds
            )
            if (
                header.timestamp_type == TimestampType.LOG_APPEND_TIME
                and not config.log_append_time
            ):
                raise InvalidTimestamp("producers may not send LogAppendTime batches")
            if config.compacted:
                _, records = decode_payload(buf, pos, header=header, max_decompressed=cap)
                if None in tuple(map(_KEY, records)):
                    raise InvalidRecord("Compacted topic cannot accept message without key")
            batches.append(
                ValidBatch(
                    pos,
                    header.last_offset_delta + 1,
                    header.max_timestamp,
                    header.producer_id,
                    header.producer_epoch,
                    header.base_sequence,
                )
            )
        if walk.problem is not None:
            self._refuse_stop(buf, walk.position)
        return batches

    def _validate_kafka(
        self, buf: bytearray, config: LogConfig, cap: int, bounds: tuple[int, int] | None
    ) -> list[ValidBatch]:
        """A Kafka Produce's chunk: v2 batches only, each checked as Kafka checks it."""
        batches: list[ValidBatch] = []
        walk = BatchWalk(buf, layout=ANY_LAYOUT)
        for pos, fields in walk:
            if fields[F_MAGIC] != KAFKA_MAGIC:
                raise CorruptMessage(
                    f"{self._where}: batch at byte {pos} has magic {fields[F_MAGIC]}; "
                    f"a Kafka produce carries record batches v2 (magic {KAFKA_MAGIC})"
                )
            self._check_size(fields, config)
            checked = check_produced(
                buf,
                pos,
                fields,
                max_decompressed=cap,
                timestamp_bounds=bounds,
                compacted=config.compacted,
            )
            if (
                checked.timestamp_type == TimestampType.LOG_APPEND_TIME
                and not config.log_append_time
            ):
                raise InvalidTimestamp("producers may not send LogAppendTime batches")
            batches.append(
                ValidBatch(
                    pos,
                    checked.last_offset_delta + 1,
                    checked.max_timestamp,
                    checked.producer_id,
                    checked.producer_epoch,
                    checked.base_sequence,
                    KAFKA_MAGIC,
                    checked.max_timestamp != fields[F_MAX_TIMESTAMP],
                    bool(checked.attributes & TRANSACTIONAL_MASK),
                )
            )
        if walk.problem is not None:
            self._refuse_stop(buf, walk.position, layout=KAFKA_LAYOUT)
        return batches

    def _check_size(self, fields: tuple[int, ...], config: LogConfig) -> None:
        """MessageTooLarge for a batch over max.message.bytes, as sent."""
        size = fields[F_BATCH_LENGTH] + LOG_OVERHEAD
        if size > config.max_message_bytes:
            raise MessageTooLarge(
                f"{self._where}: batch of {size} bytes exceeds "
                f"max.message.bytes {config.max_message_bytes}"
            )

    def _refuse_stop(self, buf: bytearray, pos: int, *, layout: BatchLayout = LAYOUT) -> None:
        """Raise CorruptMessage saying why the walk could not go on at byte `pos`."""
        # Raises for a short, wrong or too small header.
        size = (read_any_header if layout is KAFKA_LAYOUT else read_header)(buf, pos).size
        # A length past the bytes sent: corrupt, not large.
        raise CorruptMessage(
            f"{self._where}: batch at byte {pos} is truncated: "
            f"{len(buf) - pos} of {size} bytes present"
        )
