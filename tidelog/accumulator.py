"""The `Producer`'s record accumulator (Kafka's RecordAccumulator): open batches per
partition, the queue of sealed ones, and the buffer memory they hold.

Caller threads (`send`, `send_batch`, `flush`) and the sender thread (tidelog.sender)
meet here, under one lock: this module is the whole of their shared state, so the
locking rules can be read in one place. A batch is open while records may join it,
sealed when it is full, lingered long enough, flushed, or followed by a `send_batch`
of its partition; sealed batches wait in `ready` in send order.
"""

from __future__ import annotations

import threading
import time
from collections import deque

from protocol.batch import RecordHeaders
from tidelog.pending import BatchFuture, PendingBatch, RecordFuture


class BufferFullError(TimeoutError):
    """`send` found no buffer room within `max_block_ms`."""


class RecordAccumulator:
    """Batches waiting to be sent and the memory they hold; every field under `lock`.

    `wake` wakes the sender (a batch was sealed or created, closing); `room` wakes
    callers waiting for buffer memory or for `flush` (batches resolved).
    """

    def __init__(self, *, batch_size: int, buffer_memory: int, max_block_s: float) -> None:
        self.batch_size = batch_size
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_s
        self.lock = threading.Lock()
        self.wake = threading.Condition(self.lock)
        self.room = threading.Condition(self.lock)
        self.open: dict[tuple[str, int], PendingBatch] = {}
        # Mutated in place, never rebound: the sender holds a reference.
        self.ready: deque[PendingBatch] = deque()
        # The sticky partitioner's current partition per topic, rotated when its batch is
        # sealed, and the partition counts it rotates over (filled by the Producer).
        self.sticky: dict[str, int] = {}
        self.partition_counts: dict[str, int] = {}
        self.unresolved = 0  # batches created and not yet resolved
        self.buffered_bytes = 0
        self.flushing = 0
        self.closing = False
        self.closed = False
        self.sender_error: BaseException | None = None

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: RecordHeaders,
        timestamp: int,
        size: int,
    ) -> RecordFuture:
        """Add one record to its partition's open batch (a new one if it would overflow)."""
        with self.lock:
            self.wait_for_room(size)
            batch = self.open.get((topic, partition))
            if batch is not None and batch.size_bytes + size > self.batch_size:
                self.seal(batch)
                batch = None
            if batch is None:
                batch = self._new_batch(topic, partition)
            index = len(batch.timestamps)
            batch.keys.append(key)
            batch.values.append(value)
            batch.headers.append(headers)
            batch.timestamps.append(timestamp)
            batch.size_bytes += size
            self.buffered_bytes += size
            if batch.size_bytes >= self.batch_size:
                self.seal(batch)
            return RecordFuture(batch, index)

    def append_batch(self, batch: PendingBatch) -> BatchFuture:
        """Queue a whole (already encoded) batch after its partition's open one."""
        size = batch.size_bytes
        with self.lock:
            self.wait_for_room(min(size, self.buffer_memory))
            previous = self.open.get((batch.topic, batch.partition))
            if previous is not None:
                self.seal(previous)  # keep send order within the partition
            self.unresolved += 1
            self.buffered_bytes += size
            self.seal(batch)
            return BatchFuture(batch)

    def flush(self, timeout: float | None) -> None:
        """Seal every open batch and wait until every batch is resolved."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self.lock:
            self.flushing += 1
            try:
                self.seal_all()
                while self.unresolved:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"flush did not finish within {timeout} s")
                    self.room.wait(remaining)
            finally:
                self.flushing -= 1

    def close(self) -> None:
        """Take no more records; the sender ships what is left and ends."""
        with self.lock:
            self.closing = True
            self.wake.notify_all()

    def wait_for_room(self, size: int) -> None:
        """Block (under the lock) until `size` more bytes fit, or BufferFullError."""
        if self.closing or self.closed:
            raise RuntimeError("producer is closed")
        if self.sender_error is not None:
            raise RuntimeError("producer's sender thread failed") from self.sender_error
        if self.buffered_bytes + size <= self.buffer_memory:
            return
        self.seal_all()  # full buffer: ship what we have instead of lingering
        deadline = time.monotonic() + self.max_block_s
        while self.buffered_bytes + size > self.buffer_memory and self.buffered_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"no room for {size} bytes in buffer_memory={self.buffer_memory} "
                    f"within max_block_ms={self.max_block_s * 1000:.0f}"
                )
            self.room.wait(remaining)

    def _new_batch(self, topic: str, partition: int) -> PendingBatch:
        batch = PendingBatch(topic, partition, time.monotonic())
        self.open[(topic, partition)] = batch
        self.unresolved += 1
        self.wake.notify()
        return batch

    def seal(self, batch: PendingBatch) -> None:
        """Close `batch` to new records and queue it for the sender (under the lock)."""
        if batch.sealed:
            return
        batch.sealed = True
        if self.open.get((batch.topic, batch.partition)) is batch:
            del self.open[(batch.topic, batch.partition)]
        if self.sticky.get(batch.topic) == batch.partition:
            count = self.partition_counts.get(batch.topic, 1)
            self.sticky[batch.topic] = (batch.partition + 1) % count
        self.ready.append(batch)
        self.wake.notify()

    def seal_all(self) -> None:
        for batch in list(self.open.values()):
            self.seal(batch)

    def abandon(self, error: BaseException) -> list[PendingBatch]:
        """The sender failed: take no more records and hand back every unsent batch."""
        with self.lock:
            self.sender_error = error
            self.seal_all()
            stranded = list(self.ready)
            self.ready.clear()
        return stranded

    def release(
        self,
        batches: list[PendingBatch],
        resolved: int,
        retried: list[PendingBatch],
        retry_at: float,
    ) -> None:
        """Free the memory of the resolved `batches` and queue `retried` ones again,
        before every unsent batch, all sent ones in first-send order."""
        with self.lock:
            if retried:
                for batch in retried:
                    batch.retry_at = retry_at
                ready = self.ready
                sent = [b for b in ready if b.send_index >= 0]
                fresh = [b for b in ready if b.send_index < 0]
                ready.clear()
                ready.extend(sorted([*sent, *retried], key=lambda b: b.send_index) + fresh)
                self.wake.notify()
            self.unresolved -= resolved
            self.buffered_bytes -= sum(b.size_bytes for b in batches if b.done.is_set())
            self.room.notify_all()
