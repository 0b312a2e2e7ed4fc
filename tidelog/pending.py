"""Records waiting in a `Producer`: one batch's columns, and the futures that report it.

A `PendingBatch` holds the records of one partition as columns (keys, values,
headers, timestamps) until the sender thread ships it; `encode` turns it into
one record batch (docs/protocol.md §3) with a single msgpack call. When the broker
answers, `resolve` fills in the offsets once and runs the callbacks; every
`RecordFuture` of the batch is a (batch, index) pair, so a future costs two
slots, not a lock of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from itertools import repeat
from operator import sub
from typing import Any, NamedTuple

import crc32c

from protocol.batch import (
    COMPRESSION_MASK,
    CRC_OFFSET,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    encode_payload,
    encode_payload_into,
)
from protocol.compression import Compression, compress


class RecordMetadata(NamedTuple):
    """Where one record landed (`offset` is -1 with acks=0)."""

    topic: str
    partition: int
    offset: int
    timestamp: int
    log_start_offset: int


class BatchMetadata(NamedTuple):
    """Where a `send_batch` landed: offsets `base_offset .. base_offset + count - 1`."""

    topic: str
    partition: int
    base_offset: int
    count: int  # type: ignore[assignment]  # public name, as Kafka's; shadows tuple.count
    log_start_offset: int


class PendingBatch:
    """Records of one partition waiting to be sent, as columns; resolved once."""

    __slots__ = (
        "base_offset",
        "callbacks",
        "created",
        "done",
        "encoded",
        "error",
        "headers",
        "keys",
        "log_append_time",
        "log_start_offset",
        "partition",
        "retry_at",
        "sealed",
        "send_index",
        "sequence",
        "size_bytes",
        "stamped",
        "timestamps",
        "topic",
        "values",
    )

    def __init__(self, topic: str, partition: int, created: float) -> None:
        self.topic = topic
        self.partition = partition
        self.created = created
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.headers: list[Sequence[tuple[str, bytes | None]]] = []
        self.timestamps: list[int] = []
        self.size_bytes = 0
        self.sealed = False
        self.encoded: bytearray | None = None  # set when encoded before the sender takes it
        self.done = threading.Event()
        self.error: BaseException | None = None
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        self.callbacks: list[Callable[[], None]] = []
        # Idempotence (tidelog.idempotence): the order of the first send (-1: not sent),
        # the first sequence and the (id, epoch) stamped on `encoded`, the earliest
        # monotonic time of the next attempt.
        self.send_index = -1
        self.sequence = -1
        self.stamped: tuple[int, int] | None = None
        self.retry_at = 0.0

    def encode(self, compression: Compression) -> bytearray:
        """One batch (docs/protocol.md §3) with a single msgpack call over the columns."""
        timestamps = self.timestamps
        count = len(timestamps)
        base_timestamp = timestamps[0]
        rows = list(
            zip(
                range(count),
                map(sub, timestamps, repeat(base_timestamp)),
                self.keys,
                self.values,
                self.headers,
                strict=True,
            )
        )
        if compression:
            payload = compress(compression, encode_payload(rows))
            out = bytearray(HEADER_SIZE) + payload
        else:  # encode straight behind the header: no copy of the payload
            # Sized up front from the buffered-bytes estimate (which exceeds the
            # encoding): one allocation, instead of the encoder regrowing the buffer
            # and copying it several times on the way to ~100 KB.
            out = bytearray(HEADER_SIZE + self.size_bytes)
            encode_payload_into(rows, out, HEADER_SIZE)
        HEADER.pack_into(
            out,
            0,
            0,
            len(out) - LOG_OVERHEAD,
            MAGIC,
            0,
            int(compression) & COMPRESSION_MASK,
            count - 1,
            base_timestamp,
            max(timestamps),
            -1,
            -1,
            -1,
            count,
        )
        crc = crc32c.crc32c(memoryview(out)[CRC_START:])
        out[CRC_OFFSET : CRC_OFFSET + 4] = crc.to_bytes(4, "big")
        return out

    def resolve(
        self,
        base_offset: int,
        log_append_time: int,
        log_start_offset: int,
        error: BaseException | None,
    ) -> None:
        self.base_offset, self.log_append_time = base_offset, log_append_time
        self.log_start_offset, self.error = log_start_offset, error
        self.done.set()
        for callback in self.callbacks:
            callback()
        self.callbacks.clear()


class _FutureBase:
    __slots__ = ("_batch",)

    def __init__(self, batch: PendingBatch) -> None:
        self._batch = batch

    def done(self) -> bool:
        return self._batch.done.is_set()

    def _wait(self, timeout: float | None) -> PendingBatch:
        if not self._batch.done.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        if self._batch.error is not None:
            raise self._batch.error
        return self._batch

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The error the send failed with, or None once it succeeded."""
        if not self._batch.done.wait(timeout):
            raise TimeoutError(f"record not acknowledged within {timeout} s")
        return self._batch.error

    def add_done_callback(self, fn: Callable[[Any], None]) -> Any:
        """Call `fn(future)` when resolved (in the sender thread), or now if already done."""
        batch = self._batch
        if batch.done.is_set():
            fn(self)
        else:
            batch.callbacks.append(lambda: fn(self))
        return self

    def add_callback(self, fn: Callable[[Any], None]) -> Any:
        """kafka-python style: `fn(metadata)` on success only."""
        return self.add_done_callback(lambda f: None if f.exception() else fn(f.result()))

    def add_errback(self, fn: Callable[[BaseException], None]) -> Any:
        """kafka-python style: `fn(exception)` on failure only."""

        def call(future: Any) -> None:
            error = future.exception()
            if error is not None:
                fn(error)

        return self.add_done_callback(call)

    def result(self, timeout: float | None = None) -> Any:
        raise NotImplementedError

    def get(self, timeout: float | None = None) -> Any:
        """kafka-python's name for `result`."""
        return self.result(timeout)


class RecordFuture(_FutureBase):
    """The outcome of one `send`: `result()`/`get()` -> RecordMetadata."""

    __slots__ = ("_index",)

    def __init__(self, batch: PendingBatch, index: int) -> None:
        super().__init__(batch)
        self._index = index

    def result(self, timeout: float | None = None) -> RecordMetadata:
        batch = self._wait(timeout)
        offset = batch.base_offset + self._index if batch.base_offset >= 0 else -1
        timestamp = (
            batch.log_append_time if batch.log_append_time >= 0 else batch.timestamps[self._index]
        )
        return RecordMetadata(
            batch.topic, batch.partition, offset, timestamp, batch.log_start_offset
        )


class BatchFuture(_FutureBase):
    """The outcome of one `send_batch`: `result()`/`get()` -> BatchMetadata."""

    __slots__ = ()

    def result(self, timeout: float | None = None) -> BatchMetadata:
        batch = self._wait(timeout)
        return BatchMetadata(
            batch.topic,
            batch.partition,
            batch.base_offset,
            len(batch.timestamps),
            batch.log_start_offset,
        )
