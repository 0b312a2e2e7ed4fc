"""The batching `Producer` (kafka-python's names and defaults where they match).

    with Producer("127.0.0.1:9092") as producer:
        future = producer.send("events", b"hello", key=b"k")
        print(future.get(timeout=10).offset)

`send` appends the record to an open batch of its partition and returns at
once; a sender thread ships a batch when it reaches `batch_size` bytes, when
it is `linger_ms` old, or on `flush()`. Up to `max_in_flight_requests` produce
requests are pipelined on one connection; answers arrive in order, so records
of one partition land in the order they were sent.

Records are kept as columns (keys, values, headers, timestamps) and a batch is
encoded with one msgpack call over them: no per-record Python work at encode
time. `send_batch` adds many records in one call for bulk loads.

Idempotence (on by default, as in Kafka 3+ and kafka-python 3): the producer
gets an id from `init_producer_id`, numbers each partition's batches, and
retries failed batches in order until `delivery_timeout_ms`; the broker answers
a retry of an appended batch with its original offsets, so retries never store
a record twice (tidelog.idempotence has the rules). Like Kafka, idempotence
needs `acks=-1` and at most 5 requests in flight; left unset it is turned off
when `acks` or `max_in_flight_requests` say otherwise. Without it there are no
retries: resending after a timeout could duplicate records, so a failed batch
fails its futures and the application decides. Buffer: at most
`buffer_memory` bytes of unsent records; `send` blocks up to `max_block_ms`
for room, then raises `BufferFullError`.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from protocol.batch import RecordHeaders, set_producer_fields
from protocol.compression import Compression
from protocol.connection import DEFAULT_CLIENT_ID, BrokerProtocolError, Reply
from protocol.errors import error_from_wire
from protocol.framing import TAIL_PLACEHOLDER
from tidelog.client import DEFAULT_BOOTSTRAP_SERVER, DEFAULT_REQUEST_TIMEOUT_MS, Client
from tidelog.idempotence import (
    MAX_BATCHES_IN_FLIGHT_PER_PARTITION,
    MAX_IN_FLIGHT_IDEMPOTENT,
    ProducerIdentity,
    Sequencer,
    Verdict,
    verdict,
)
from tidelog.joiner import ChunkJoiner, Joined
from tidelog.partitioner import murmur2, partition_for_key
from tidelog.pending import (
    BatchFuture,
    BatchMetadata,
    PendingBatch,
    RecordFuture,
    RecordMetadata,
)
from tidelog.security import PLAINTEXT, Security

__all__ = [
    "BatchFuture",
    "BatchMetadata",
    "BufferFullError",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
    "murmur2",
    "partition_for_key",
]

# kafka-python's defaults: batches of up to 16 KiB; Kafka 4's 5 ms linger.
DEFAULT_BATCH_SIZE = 16_384
DEFAULT_LINGER_MS = 5
# Unsent records may hold this much memory before send() blocks (kafka-python: 32 MiB).
DEFAULT_BUFFER_MEMORY = 32 * 1024 * 1024
# How long send() waits for buffer room before giving up (kafka-python: 60 s).
DEFAULT_MAX_BLOCK_MS = 60_000
# Pipelined produce requests per connection (Kafka's default is 5).
DEFAULT_MAX_IN_FLIGHT = 5
# One produce request carries at most this many bytes of batches (Kafka: 1 MiB).
DEFAULT_MAX_REQUEST_SIZE = 1_048_576
# An idempotent producer retries a batch until it is this old (Kafka's delivery.timeout.ms).
DEFAULT_DELIVERY_TIMEOUT_MS = 120_000
# Pause before a retry (Kafka's retry.backoff.ms).
DEFAULT_RETRY_BACKOFF_MS = 100

# Per-record bytes counted against the buffer besides key and value: the
# record's msgpack framing and list slots, roughly.
_RECORD_OVERHEAD_BYTES = 16

_NO_HEADERS: RecordHeaders = ()
_MIN_INT64, _MAX_INT64 = -(2**63), 2**63 - 1


# What a key or value may be: anything else would fail the whole batch on the broker.
_BLOB_TYPES = frozenset({bytes, type(None)})


def _check_headers(
    headers: Sequence[tuple[str, bytes | None]],
) -> RecordHeaders:
    """Headers as a tuple of (str, bytes | None) pairs, or TypeError."""
    pairs = tuple((k, v) for k, v in headers)
    for key, value in pairs:
        if type(key) is not str or type(value) not in _BLOB_TYPES:
            raise TypeError(f"headers must be (str, bytes | None) pairs, got {(key, value)!r}")
    return pairs


def _check_timestamp(timestamp_ms: int | None) -> None:
    """TypeError or ValueError now, rather than a batch that cannot be encoded later."""
    if timestamp_ms is None:
        return
    if type(timestamp_ms) is not int:
        raise TypeError(f"timestamp_ms must be an int, got {type(timestamp_ms).__name__}")
    if not _MIN_INT64 <= timestamp_ms <= _MAX_INT64:
        raise ValueError(f"timestamp_ms {timestamp_ms} does not fit the batch's int64 field")


class BufferFullError(TimeoutError):
    """`send` found no buffer room within `max_block_ms`."""


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class Producer:
    """Batches records per partition and ships them from a sender thread.

    Thread-safe: any thread may `send`. Use it as a context manager (it flushes
    and closes on exit) or call `close()`.
    """

    def __init__(
        self,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVER,
        *,
        acks: int = -1,
        linger_ms: float = DEFAULT_LINGER_MS,
        batch_size: int = DEFAULT_BATCH_SIZE,
        compression_type: str | int | Compression | None = None,
        buffer_memory: int = DEFAULT_BUFFER_MEMORY,
        max_block_ms: int = DEFAULT_MAX_BLOCK_MS,
        max_in_flight_requests: int = DEFAULT_MAX_IN_FLIGHT,
        max_request_size: int = DEFAULT_MAX_REQUEST_SIZE,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        client_id: str | None = DEFAULT_CLIENT_ID,
        enable_idempotence: bool | None = None,
        delivery_timeout_ms: int = DEFAULT_DELIVERY_TIMEOUT_MS,
        retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
        security: Security = PLAINTEXT,
    ) -> None:
        """`enable_idempotence`: None (the default) turns it on unless `acks` is not -1
        or `max_in_flight_requests` exceeds 5 (Kafka's rule); True insists on it."""
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1 ('all'), got {acks!r}")
        if batch_size < 1 or buffer_memory < batch_size:
            raise ValueError("need 1 <= batch_size <= buffer_memory")
        if max_in_flight_requests < 1:
            raise ValueError("max_in_flight_requests must be >= 1")
        compatible = acks == -1 and max_in_flight_requests <= MAX_IN_FLIGHT_IDEMPOTENT
        if enable_idempotence and not compatible:
            raise ValueError(
                "enable_idempotence needs acks=-1 and max_in_flight_requests <= "
                f"{MAX_IN_FLIGHT_IDEMPOTENT}, got acks={acks} and {max_in_flight_requests}"
            )
        self.enable_idempotence = compatible if enable_idempotence is None else enable_idempotence
        self.delivery_timeout_s = delivery_timeout_ms / 1000
        self.retry_backoff_s = retry_backoff_ms / 1000
        self._sequencer = Sequencer()  # the sender thread's alone
        self._sends = 0  # batches sent for the first time (their send_index)
        self.acks = acks
        self.linger_s = linger_ms / 1000
        self.batch_size = batch_size
        self.compression = Compression.parse(compression_type or Compression.NONE)
        self.buffer_memory = buffer_memory
        self.max_block_s = max_block_ms / 1000
        self.max_in_flight = max_in_flight_requests
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self._client = Client(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._meta_client = Client(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._meta_lock = threading.Lock()
        self._partition_counts: dict[str, int] = {}
        self._sticky: dict[str, int] = {}
        self._lock = threading.Lock()
        self._wake = threading.Condition(self._lock)  # the sender waits on it
        self._room = threading.Condition(self._lock)  # send() and flush() wait on it
        self._open: dict[tuple[str, int], PendingBatch] = {}
        self._ready: deque[PendingBatch] = deque()
        self._in_flight: deque[list[PendingBatch]] = deque()
        self._records_buffer = ChunkJoiner()  # the sender thread's alone
        self._unresolved = 0  # batches created and not yet resolved
        self._buffered_bytes = 0
        self._flushing = 0
        self._closing = False
        self._closed = False
        self._sender_error: BaseException | None = None
        self._sender = threading.Thread(
            target=self._run_sender, name="tidelog-producer", daemon=True
        )
        self._sender.start()

    # -- public API -------------------------------------------------------------

    def send(
        self,
        topic: str,
        value: bytes | None = None,
        key: bytes | None = None,
        headers: Sequence[tuple[str, bytes | None]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Queue one record; the future resolves to its RecordMetadata.

        Raises TypeError at once for a key, value or header of the wrong type: a
        bad record must not reach a batch, where it would fail its neighbours.
        """
        if type(value) not in _BLOB_TYPES or type(key) not in _BLOB_TYPES:
            raise TypeError(
                f"key and value must be bytes or None, got {type(key).__name__} and "
                f"{type(value).__name__}"
            )
        _check_timestamp(timestamp_ms)
        if partition is None:
            partition = self._choose_partition(topic, key)
        timestamp = _now_ms() if timestamp_ms is None else timestamp_ms
        size = (
            _RECORD_OVERHEAD_BYTES
            + (len(value) if value is not None else 0)
            + (len(key) if key is not None else 0)
        )
        if headers:
            headers = _check_headers(headers)
            size += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in headers)
        with self._lock:
            self._wait_for_room(size)
            batch = self._open.get((topic, partition))
            if batch is not None and batch.size_bytes + size > self.batch_size:
                self._seal(batch)
                batch = None
            if batch is None:
                batch = self._new_batch(topic, partition)
            index = len(batch.timestamps)
            batch.keys.append(key)
            batch.values.append(value)
            batch.headers.append(headers or _NO_HEADERS)
            batch.timestamps.append(timestamp)
            batch.size_bytes += size
            self._buffered_bytes += size
            if batch.size_bytes >= self.batch_size:
                self._seal(batch)
            return RecordFuture(batch, index)

    def send_batch(
        self,
        topic: str,
        values: Sequence[bytes | None],
        *,
        keys: Sequence[bytes | None] | None = None,
        headers: Sequence[Sequence[tuple[str, bytes | None]]] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> BatchFuture:
        """Queue many records as one batch of one partition (bulk loads).

        All records get `timestamp_ms` (default: now). The batch is sent as is,
        whatever `batch_size` says; offsets are consecutive.
        """
        count = len(values)
        if count == 0:
            raise ValueError("send_batch needs at least one value")
        if not set(map(type, values)) <= _BLOB_TYPES or (
            keys is not None and not set(map(type, keys)) <= _BLOB_TYPES
        ):
            raise TypeError("keys and values must be bytes or None")
        if headers is not None:
            headers = [_check_headers(h) if h else _NO_HEADERS for h in headers]
        if (keys is not None and len(keys) != count) or (
            headers is not None and len(headers) != count
        ):
            raise ValueError("keys and headers must have one entry per value")
        _check_timestamp(timestamp_ms)
        if partition is None:
            partition = self._choose_partition(topic, keys[0] if keys else None)
        timestamp = _now_ms() if timestamp_ms is None else timestamp_ms
        size = count * _RECORD_OVERHEAD_BYTES + sum(map(len, filter(None, values)))
        if keys is not None:
            size += sum(map(len, filter(None, keys)))
        batch = PendingBatch(topic, partition, time.monotonic())
        batch.values = list(values)
        batch.keys = list(keys) if keys is not None else [None] * count
        batch.headers = list(headers) if headers is not None else [_NO_HEADERS] * count
        batch.timestamps = [timestamp] * count
        batch.size_bytes = size
        # Encoded here, in the caller's thread (as Kafka's producer does): the sender
        # thread then only frames and sends, and the two overlap.
        batch.encoded = batch.encode(self.compression)
        # The bytes above are what is sent.
        batch.keys, batch.values, batch.headers = [], [], []
        with self._lock:
            self._wait_for_room(min(size, self.buffer_memory))
            previous = self._open.get((topic, partition))
            if previous is not None:
                self._seal(previous)  # keep send order within the partition
            self._unresolved += 1
            self._buffered_bytes += size
            self._seal(batch)
            return BatchFuture(batch)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged (or failed)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            self._flushing += 1
            try:
                for batch in list(self._open.values()):
                    self._seal(batch)
                while self._unresolved:
                    remaining = None if deadline is None else deadline - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise TimeoutError(f"flush did not finish within {timeout} s")
                    self._room.wait(remaining)
            finally:
                self._flushing -= 1

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread and close the connections. Idempotent."""
        if self._closed:
            return
        try:
            self.flush(timeout)
        finally:
            with self._lock:
                self._closing = True
                self._wake.notify_all()
            self._sender.join(timeout)
            self._client.close()
            self._meta_client.close()
            self._closed = True

    def partitions_for(self, topic: str) -> set[int]:
        """The partition numbers of `topic` (asks the broker once, then cached)."""
        return set(range(self._partition_count(topic)))

    def __enter__(self) -> Producer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- accumulator (caller threads, under the lock) ---------------------------

    def _wait_for_room(self, size: int) -> None:
        if self._closing or self._closed:
            raise RuntimeError("producer is closed")
        if self._sender_error is not None:
            raise RuntimeError("producer's sender thread failed") from self._sender_error
        if self._buffered_bytes + size <= self.buffer_memory:
            return
        for batch in list(self._open.values()):
            self._seal(batch)  # full buffer: ship what we have instead of lingering
        deadline = time.monotonic() + self.max_block_s
        while self._buffered_bytes + size > self.buffer_memory and self._buffered_bytes:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise BufferFullError(
                    f"no room for {size} bytes in buffer_memory={self.buffer_memory} "
                    f"within max_block_ms={self.max_block_s * 1000:.0f}"
                )
            self._room.wait(remaining)

    def _new_batch(self, topic: str, partition: int) -> PendingBatch:
        batch = PendingBatch(topic, partition, time.monotonic())
        self._open[(topic, partition)] = batch
        self._unresolved += 1
        self._wake.notify()
        return batch

    def _seal(self, batch: PendingBatch) -> None:
        if batch.sealed:
            return
        batch.sealed = True
        if self._open.get((batch.topic, batch.partition)) is batch:
            del self._open[(batch.topic, batch.partition)]
        if self._sticky.get(batch.topic) == batch.partition:
            count = self._partition_counts.get(batch.topic, 1)
            self._sticky[batch.topic] = (batch.partition + 1) % count
        self._ready.append(batch)
        self._wake.notify()

    # -- partitioning -----------------------------------------------------------

    def _choose_partition(self, topic: str, key: bytes | None) -> int:
        count = self._partition_count(topic)
        if key is not None:
            return partition_for_key(key, count)
        return self._sticky.setdefault(topic, 0) % count

    def _partition_count(self, topic: str) -> int:
        count = self._partition_counts.get(topic)
        if count is not None:
            return count
        with self._meta_lock:
            [entry] = self._meta_client.metadata([topic])
            if entry["error"] is not None:
                raise error_from_wire(entry["error"], entry.get("message"))
            count = len(entry["partitions"])
            self._partition_counts[topic] = count
            return count

    # -- sender thread ----------------------------------------------------------

    def _run_sender(self) -> None:
        try:
            while True:
                with self._lock:
                    to_send = self._wait_for_work()
                    if to_send is None and not self._in_flight:
                        return  # closing, nothing left
                if to_send:
                    if self.enable_idempotence and not self._ensure_identity(to_send):
                        continue
                    self._send_request(to_send)
                elif self._in_flight:
                    self._receive_reply()
        except BaseException as exc:  # a bug: fail every waiting record rather than hang
            self._crash(exc)
            raise

    def _crash(self, exc: BaseException) -> None:
        with self._lock:
            self._sender_error = exc
            for batch in list(self._open.values()):
                self._seal(batch)
            stranded = list(self._ready)
            self._ready.clear()
        self._fail_all_in_flight(exc)
        self._finish(stranded, error=exc)

    def _wait_for_work(self) -> list[PendingBatch] | None:
        """Batches to send now ([] = go read a reply, None = shut down)."""
        while True:
            now = time.monotonic()
            linger_deadline = None
            for batch in list(self._open.values()):
                if self._flushing or self._closing or now - batch.created >= self.linger_s:
                    self._seal(batch)
                elif linger_deadline is None or batch.created < linger_deadline:
                    linger_deadline = batch.created
            retry_in = self._ready[0].retry_at - now if self._ready else 0.0
            # An epoch change waits for the answers in flight (tidelog.idempotence).
            epoch_wait = self._sequencer.new_epoch_needed and bool(self._in_flight)
            room = len(self._in_flight) < self.max_in_flight
            if self._ready and room and retry_in <= 0 and not epoch_wait:
                return self._take_request()
            if self._in_flight:
                return []
            if self._closing and not self._open and not self._ready:
                return None
            timeout = None if linger_deadline is None else linger_deadline + self.linger_s - now
            if retry_in > 0:
                timeout = retry_in if timeout is None else min(timeout, retry_in)
            self._wake.wait(timeout)

    def _ensure_identity(self, batches: list[PendingBatch]) -> bool:
        """Get an id (or the next epoch) before sending, if needed; on failure the batches
        wait for a retry (or fail past the delivery timeout) and False is returned."""
        sequencer = self._sequencer
        if not sequencer.needs_identity:
            return True
        previous = sequencer.identity
        body = {"producer_id": -1, "producer_epoch": -1}
        if previous is not None:
            body = {"producer_id": previous.producer_id, "producer_epoch": previous.epoch}
        try:
            with self._meta_lock:
                answer = self._meta_client.request("init_producer_id", body)
        except Exception as exc:
            self._finish(batches, error=exc)
            return False
        sequencer.grant(ProducerIdentity(answer["producer_id"], answer["producer_epoch"]))
        return True

    def _take_request(self) -> list[PendingBatch]:
        if self.enable_idempotence:
            return self._take_idempotent()
        taken: list[PendingBatch] = []
        size = 0
        while self._ready:
            batch = self._ready[0]
            if taken and size + batch.size_bytes > self.max_request_size:
                break
            taken.append(self._ready.popleft())
            size += batch.size_bytes
        return taken

    def _take_idempotent(self) -> list[PendingBatch]:
        """The next request of an idempotent producer (tidelog.idempotence): new batches
        of a partition may share a request, a retried one goes alone, and a partition
        never has more than MAX_BATCHES_IN_FLIGHT_PER_PARTITION batches unanswered.
        Per-partition order is kept: a partition whose batch was left behind takes no
        later one in this request."""
        unanswered = Counter((b.topic, b.partition) for r in self._in_flight for b in r)
        taken: list[PendingBatch] = []
        left: deque[PendingBatch] = deque()
        closed: set[tuple[str, int]] = set()
        here: Counter[tuple[str, int]] = Counter()
        size = 0
        for batch in self._ready:
            where = (batch.topic, batch.partition)
            retry = batch.send_index >= 0
            if (
                where in closed
                or (taken and size + batch.size_bytes > self.max_request_size)
                or unanswered[where] >= MAX_BATCHES_IN_FLIGHT_PER_PARTITION
                or (retry and here[where])
            ):
                left.append(batch)
                closed.add(where)
                continue
            taken.append(batch)
            size += batch.size_bytes
            unanswered[where] += 1
            here[where] += 1
            if retry:
                closed.add(where)
        self._ready = left
        return taken

    def _send_request(self, batches: list[PendingBatch]) -> None:
        try:
            topics = self._partition_chunks(batches)
            expect_response = self.acks != 0
            if len(topics) == 1 and len(partitions := next(iter(topics.values()))) == 1:
                # One partition (the sticky partitioner's usual case): its batches go
                # to the kernel as they are, not copied into a frame first.
                [(topic, _)] = topics.items()
                [(partition, chunks)] = partitions.items()
                body = self._produce_body([(topic, [(partition, TAIL_PLACEHOLDER)])])
                self._client.send_with_tail(
                    "produce", body, chunks, expect_response=expect_response
                )
            else:
                with self._records_buffer.join(topics) as records:
                    body = self._produce_body(records)
                    self._client.send("produce", body, expect_response=expect_response)
        except BaseException as exc:
            # Whatever the cause, answers already on their way could no longer be matched
            # to their batches: drop the connection, and with it every request in flight.
            self._client.close()
            self._fail_all_in_flight(exc)
            self._finish(batches, error=exc)
            return
        if self.acks == 0:
            self._finish(batches)
        else:
            with self._lock:
                self._in_flight.append(batches)

    def _produce_body(self, records: Joined) -> dict[str, Any]:
        return {
            "acks": self.acks,
            "timeout_ms": self.request_timeout_ms,
            "topics": [
                {
                    "topic": topic,
                    "partitions": [{"partition": p, "records": data} for p, data in partitions],
                }
                for topic, partitions in records
            ],
        }

    def _partition_chunks(
        self, batches: list[PendingBatch]
    ) -> dict[str, dict[int, list[bytes | bytearray]]]:
        """The encoded batches of one request by topic and partition, in send order."""
        topics: dict[str, dict[int, list[bytes | bytearray]]] = {}
        for batch in batches:
            encoded = batch.encoded if batch.encoded is not None else batch.encode(self.compression)
            if self.enable_idempotence:
                self._stamp(batch, encoded)
                batch.encoded = encoded  # kept for a retry until the batch is resolved
            else:
                batch.encoded = None  # copied into the request: free it now
            topics.setdefault(batch.topic, {}).setdefault(batch.partition, []).append(encoded)
        return topics

    def _stamp(self, batch: PendingBatch, encoded: bytearray) -> None:
        """Number a batch at its first send, and again after an epoch change (its bytes
        then get the new id, epoch and sequence, and a new CRC)."""
        identity = self._sequencer.identity
        assert identity is not None  # _ensure_identity ran before the send
        if batch.send_index < 0:
            batch.send_index = self._sends
            self._sends += 1
        if batch.stamped == identity:
            return
        batch.sequence = self._sequencer.take(batch.topic, batch.partition, len(batch.timestamps))
        set_producer_fields(encoded, 0, identity.producer_id, identity.epoch, batch.sequence)
        batch.stamped = identity

    def _receive_reply(self) -> None:
        try:
            reply: Reply = self._client.receive()
            body = reply.result()
        except BaseException as exc:
            # Broken connection or a request-level error: with a broken
            # connection every pipelined request is lost.
            if self._client.connected:
                with self._lock:
                    batches = self._in_flight.popleft()
                self._finish(batches, error=exc)
            else:
                self._fail_all_in_flight(exc)
            return
        with self._lock:
            batches = self._in_flight.popleft()
        results = {(t["topic"], p["partition"]): p for t in body["topics"] for p in t["partitions"]}
        self._finish(batches, results=results)

    def _fail_all_in_flight(self, exc: BaseException) -> None:
        with self._lock:
            lost = list(self._in_flight)
            self._in_flight.clear()
        for batches in lost:
            self._finish(batches, error=exc)

    def _finish(
        self,
        batches: list[PendingBatch],
        *,
        error: BaseException | None = None,
        results: dict[tuple[str, int], dict[str, Any]] | None = None,
    ) -> None:
        """Resolve batches in send order; several batches of one partition are consecutive.
        An idempotent producer puts the batches it retries back in front of the queue."""
        next_offset: dict[tuple[str, int], int] = {}
        retried: list[PendingBatch] = []
        resolved = 0
        for batch in batches:
            where = (batch.topic, batch.partition)
            batch_error = error
            base = log_append_time = log_start = -1
            if results is not None:
                entry = results.get(where)
                if entry is None:
                    batch_error = BrokerProtocolError(f"produce answer lacks {where[0]}-{where[1]}")
                elif entry["error"] is not None:
                    batch_error = error_from_wire(entry["error"], entry.get("message"))
                else:
                    base = next_offset.get(where, entry["base_offset"])
                    next_offset[where] = base + len(batch.timestamps)
                    log_append_time = _or(entry["log_append_time"], -1)
                    log_start = _or(entry["log_start_offset"], -1)
            if batch_error is not None and self._retry(batch, batch_error, retried):
                retried.append(batch)
                continue
            batch.encoded = None
            batch.resolve(base, log_append_time, log_start, batch_error)
            resolved += 1
        with self._lock:
            if retried:
                self._requeue(retried)
            self._unresolved -= resolved
            self._buffered_bytes -= sum(b.size_bytes for b in batches if b.done.is_set())
            self._room.notify_all()

    def _retry(
        self, batch: PendingBatch, error: BaseException, retried: list[PendingBatch]
    ) -> bool:
        """Whether an idempotent producer tries `batch` again (tidelog.idempotence)."""
        if not self.enable_idempotence or self._sender_error is not None:
            return False
        if time.monotonic() - batch.created >= self.delivery_timeout_s:
            return False
        rule = verdict(error)
        if rule == Verdict.RETRY_IF_BEHIND:
            with self._lock:  # an earlier batch of the partition waits or is sent again
                waiting = [*retried, *self._ready, *(b for r in self._in_flight for b in r)]
            behind = any(
                b.topic == batch.topic
                and b.partition == batch.partition
                and 0 <= b.send_index < batch.send_index
                for b in waiting
            )
            if not behind:
                self._sequencer.new_epoch_needed = True  # the broker lost our sequence
            return behind
        if rule == Verdict.NEW_EPOCH_AND_RETRY:
            self._sequencer.new_epoch_needed = True
        return rule != Verdict.FAIL

    def _requeue(self, retried: list[PendingBatch]) -> None:
        """Put batches to retry before every unsent one, all sent ones in first-send order
        (under the lock)."""
        retry_at = time.monotonic() + self.retry_backoff_s
        for batch in retried:
            batch.retry_at = retry_at
        sent = [b for b in self._ready if b.send_index >= 0]
        fresh = [b for b in self._ready if b.send_index < 0]
        self._ready = deque(sorted([*sent, *retried], key=lambda b: b.send_index) + fresh)
        self._wake.notify()


def _or(value: int | None, default: int) -> int:
    return default if value is None else value
