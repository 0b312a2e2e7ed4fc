"""The sink: batch and streaming Arrow writers with the Kafka sink's columns and rules.

Columns are matched by name: `value` (string or binary, required), `key` (string or
binary), `topic` (string; the `topic` option overrides it), `partition` (int; null lets
the partitioner choose), `headers` (array<struct<key:string,value:binary>>) and, beyond
Kafka, `timestamp` (timestamp; the record's CreateTime). Other columns are ignored, as
Kafka does. Every produce is acknowledged before `write()` returns its commit message,
so a task that succeeded has all its rows in the log (at least once: a retried task can
duplicate rows). With `exactlyOnce` each task stamps its batches with a derived producer
(spark_connector.exactly_once) and per-partition sequences, so the broker stores each
row once across task retries and micro-batch replays.
"""

from __future__ import annotations

import itertools
import logging
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
    TimestampType,
)

from protocol.batch import HeaderPairs, encode_batch
from protocol.compression import Compression
from protocol.errors import OutOfOrderSequenceNumber
from spark_connector.exactly_once import (
    DERIVED_PRODUCER_EPOCH,
    SEQUENCE_MODULUS,
    TaskIdentity,
    task_identity,
)
from spark_connector.options import SinkOptions
from spark_connector.worker_gc import freeze_long_lived_objects
from tidelog.client import Client

log = logging.getLogger("spark_connector")

_BYTES_TYPES = (StringType, BinaryType)


class SinkSchemaError(ValueError):
    """The DataFrame does not have the columns the sink needs (raised at save())."""


def _is_headers_type(dtype: DataType) -> bool:
    if not isinstance(dtype, ArrayType) or not isinstance(dtype.elementType, StructType):
        return False
    fields = dtype.elementType.fields
    return (
        len(fields) == 2
        and fields[0].name == "key"
        and isinstance(fields[0].dataType, StringType)
        and fields[1].name == "value"
        and isinstance(fields[1].dataType, _BYTES_TYPES)
    )


def validate_sink_schema(schema: StructType, topic_option: str | None) -> None:
    """Kafka's KafkaWriter.validateQuery, with its messages."""
    types = {f.name: f.dataType for f in schema.fields}
    if "value" not in types:
        raise SinkSchemaError("Required attribute 'value' not found")
    if not isinstance(types["value"], _BYTES_TYPES):
        raise SinkSchemaError(
            f"value attribute type must be a StringType or BinaryType, got {types['value']}"
        )
    if "key" in types and not isinstance(types["key"], _BYTES_TYPES):
        raise SinkSchemaError(
            f"key attribute type must be a StringType or BinaryType, got {types['key']}"
        )
    if topic_option is None:
        if "topic" not in types:
            raise SinkSchemaError(
                "topic option required when no 'topic' attribute is present. Use the topic "
                "option for setting a topic."
            )
        if not isinstance(types["topic"], StringType):
            raise SinkSchemaError(
                f"topic attribute type must be a StringType, got {types['topic']}"
            )
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise SinkSchemaError(
            f"partition attribute type must be an IntegerType, got {types['partition']}"
        )
    if "headers" in types and not _is_headers_type(types["headers"]):
        raise SinkSchemaError(
            "headers attribute type must be an ArrayType(StructType(key: StringType, "
            f"value: BinaryType)), got {types['headers']}"
        )
    if "timestamp" in types and not isinstance(types["timestamp"], TimestampType):
        raise SinkSchemaError(
            f"timestamp attribute type must be a TimestampType, got {types['timestamp']}"
        )


@dataclass
class TidelogCommitMessage(WriterCommitMessage):
    """What one task appended: record counts and (base offset, count) per partition."""

    records: int = 0
    batches: int = 0
    appended: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


# One record to produce: key, value, headers, timestamp (ms; None: the batch's clock).
_Row = tuple[bytes | None, bytes | None, HeaderPairs | None, int | None]


def _binary(column: pa.Array | pa.ChunkedArray) -> list[bytes | None]:
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        column = pc.cast(column, pa.binary())
    blobs: list[bytes | None] = column.to_pylist()
    return blobs


class InjectedTaskFailure(RuntimeError):
    """The tests' failpoint (`tidelog.test.failAfterBatches`, options.TEST_FAIL_*)."""


class _Producer:
    """Encodes rows into batches per (topic, partition) and produces them synchronously."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts
        self.client = Client(
            opts.bootstrap_servers.split(",")[0].strip(),
            client_id=opts.client_id,
            request_timeout_ms=opts.request_timeout_ms,
            security=opts.security,
        )
        self.compression = Compression.parse(opts.compression)
        self.partition_counts: dict[str, int] = {}
        self.round_robin = itertools.count()
        self.message = TidelogCommitMessage()
        self.identity: TaskIdentity | None = (
            task_identity(opts.write_id) if opts.exactly_once else None
        )
        # Exactly once: the next sequence per (topic, partition), and the partitions where
        # the broker has taken or recognised a batch of this attempt (see _send).
        self.sequences: dict[tuple[str, int], int] = {}
        self.caught_up: set[tuple[str, int]] = set()
        self.sent_batches = 0

    def partition_count(self, topic: str) -> int:
        if topic not in self.partition_counts:
            entries = self.client.metadata([topic])
            entry = next((e for e in entries if e["topic"] == topic), None)
            if entry is None or entry.get("error") is not None:
                detail = entry.get("error") if entry else "not in metadata"
                raise SinkSchemaError(f"cannot write to topic '{topic}': {detail}")
            self.partition_counts[topic] = len(entry["partitions"])
        return self.partition_counts[topic]

    def choose(self, topic: str, key: bytes | None) -> int:
        """Keyed records hash to a stable partition; keyless ones rotate per chunk."""
        count = self.partition_count(topic)
        if key is None:
            return next(self.round_robin) % count
        return zlib.crc32(key) % count

    def write_batch(self, batch: pa.RecordBatch) -> None:
        names = batch.schema.names
        n = batch.num_rows
        values = _binary(batch.column(names.index("value")))
        keys = _binary(batch.column(names.index("key"))) if "key" in names else [None] * n
        if self.opts.topic is not None:
            topics: list[str | None] = [self.opts.topic] * n
        else:
            topics = batch.column(names.index("topic")).to_pylist()
        partitions = (
            batch.column(names.index("partition")).to_pylist()
            if "partition" in names
            else [None] * n
        )
        headers = (
            [
                [(h["key"], h["value"]) for h in hs] if hs else []
                for hs in batch.column(names.index("headers")).to_pylist()
            ]
            if "headers" in names
            else [()] * n
        )
        now_ms = int(time.time() * 1000)
        if "timestamp" in names:
            millis = pc.cast(batch.column(names.index("timestamp")), pa.int64()).to_pylist()
            timestamps = [None if t is None else t // 1000 for t in millis]
        else:
            timestamps = [None] * n
        groups: dict[tuple[str, int | None], list[_Row]] = {}
        for row in zip(topics, partitions, keys, values, headers, timestamps, strict=True):
            if row[0] is None:
                raise SinkSchemaError("Null topic present in the data. Use the topic option.")
            groups.setdefault((row[0], row[1]), []).append(row[2:])
        for (topic, partition), rows in groups.items():
            self._produce_rows(topic, partition, rows, now_ms)

    def _produce_rows(
        self, topic: str, partition: int | None, rows: list[_Row], now_ms: int
    ) -> None:
        size = self.opts.batch_records
        for i in range(0, len(rows), size):
            chunk = rows[i : i + size]
            if partition is None:
                by_partition: dict[int, list[_Row]] = {}
                for row in chunk:
                    by_partition.setdefault(self.choose(topic, row[0]), []).append(row)
                targets = list(by_partition.items())
            else:
                targets = [(partition, chunk)]
            for target, part_rows in targets:
                self._send(topic, target, part_rows, now_ms)

    def _send(self, topic: str, partition: int, rows: list[_Row], now_ms: int) -> None:
        """Produce one batch; with exactly once, stamped with the task's next sequence.

        A retried attempt re-sends the first attempt's batches: the broker answers the
        ones it still remembers (its last 64 per producer and partition) as duplicates.
        Older ones get OUT_OF_ORDER_SEQUENCE_NUMBER; before the broker has taken or
        recognised any batch of this partition in this attempt, that can only mean the
        batch precedes its window, i.e. the first attempt wrote it (it wrote them in
        order, one at a time): it is skipped. Afterwards the error is real and raised.
        """
        self._failpoint()
        key, sequence = (topic, partition), -1
        if self.identity is None:
            records = encode_batch(rows, compression=self.compression, now_ms=now_ms)
        else:
            sequence = self.sequences.get(key, 0)
            self.sequences[key] = (sequence + len(rows)) % SEQUENCE_MODULUS
            records = encode_batch(
                rows,
                compression=self.compression,
                now_ms=now_ms,
                producer_id=self.identity.producer_id,
                producer_epoch=DERIVED_PRODUCER_EPOCH,
                base_sequence=sequence,
            )
        try:
            result = self.client.produce(topic, partition, records, acks=self.opts.acks)
        except OutOfOrderSequenceNumber:
            if self.identity is None or key in self.caught_up:
                raise
            log.info("%s-%d: batch at sequence %d written by an earlier attempt", *key, sequence)
            self.message.records += len(rows)
            return
        assert result is not None  # acks is -1 or 1, so there is always an answer
        self.caught_up.add(key)
        self.sent_batches += 1
        self.message.records += len(rows)
        self.message.batches += 1
        self.message.appended.setdefault(f"{topic}-{partition}", []).append(
            (result.base_offset, len(rows))
        )

    def _failpoint(self) -> None:
        limit = self.opts.fail_after_batches
        if limit is None or self.sent_batches < limit:
            return
        from pyspark import TaskContext  # executor side, tests only

        context = TaskContext.get()
        attempt = context.attemptNumber() if context is not None else 0
        if attempt < self.opts.fail_attempts:
            raise InjectedTaskFailure(f"injected failure after {limit} batches (attempt {attempt})")

    def close(self) -> None:
        self.client.close()


def write_batches(opts: SinkOptions, batches: Iterator[pa.RecordBatch]) -> TidelogCommitMessage:
    """Produce every row; return only after the broker acknowledged all of them."""
    freeze_long_lived_objects()  # Spark collects after every task: keep that cheap
    producer = _Producer(opts)
    try:
        for batch in batches:
            if batch.num_rows:
                producer.write_batch(batch)
        return producer.message
    finally:
        producer.close()


def _summarize(messages: list[WriterCommitMessage | None]) -> tuple[int, int]:
    done = [m for m in messages if isinstance(m, TidelogCommitMessage)]
    return sum(m.records for m in done), len(messages) - len(done)


class TidelogArrowWriter(DataSourceArrowWriter):
    """Batch writes (`df.write.format("tidelog").mode("append")`)."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        records, _ = _summarize(messages)
        log.info("tidelog write committed: %d records", records)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        records, failed = _summarize(messages)
        log.warning(
            "tidelog write aborted: %d tasks failed; %d records from successful tasks are "
            "already in the log (not transactional; with exactlyOnce and the same writeId, "
            "a re-run of this save() does not duplicate them)",
            failed,
            records,
        )


class TidelogStreamArrowWriter(DataSourceStreamArrowWriter):
    """Streaming writes; each micro-batch's tasks produce before they report success."""

    def __init__(self, opts: SinkOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> WriterCommitMessage:
        return write_batches(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, _ = _summarize(messages)
        log.info("tidelog stream batch %d committed: %d records", batchId, records)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        records, failed = _summarize(messages)
        log.warning(
            "tidelog stream batch %d aborted: %d tasks failed, %d records already appended",
            batchId,
            failed,
            records,
        )
