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
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from protocol.batch import RecordHeaders
from protocol.compression import Compression
from protocol.connection import DEFAULT_CLIENT_ID
from protocol.errors import error_from_wire
from tidelog.accumulator import BufferFullError, RecordAccumulator
from tidelog.client import DEFAULT_BOOTSTRAP_SERVER, DEFAULT_REQUEST_TIMEOUT_MS, Client
from tidelog.idempotence import MAX_IN_FLIGHT_IDEMPOTENT, Idempotence
from tidelog.partitioner import murmur2, partition_for_key
from tidelog.pending import (
    BatchFuture,
    BatchMetadata,
    PendingBatch,
    RecordFuture,
    RecordMetadata,
)
from tidelog.security import PLAINTEXT, Security
from tidelog.sender import Sender

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


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _setting(component: str, name: str) -> Any:
    """A public setting kept on the component that reads it (so setting it still works)."""

    def get(self: Any) -> Any:
        return getattr(getattr(self, component), name)

    def set_(self: Any, value: Any) -> None:
        setattr(getattr(self, component), name, value)

    return property(get, set_)


class Producer:
    """Batches records per partition and ships them from a sender thread.

    Thread-safe: any thread may `send`. Use it as a context manager (it flushes
    and closes on exit) or call `close()`. This class is the front door: it checks
    records and picks partitions; the batches wait in a `RecordAccumulator`, a
    `Sender` thread ships them, and `Idempotence` numbers them.
    """

    # Settings read by the component that uses them (documented as constructor arguments).
    batch_size: int = _setting("_accumulator", "batch_size")
    buffer_memory: int = _setting("_accumulator", "buffer_memory")
    max_block_s: float = _setting("_accumulator", "max_block_s")
    acks: int = _setting("_sender", "acks")
    linger_s: float = _setting("_sender", "linger_s")
    compression: Compression = _setting("_sender", "compression")
    max_in_flight: int = _setting("_sender", "max_in_flight")
    max_request_size: int = _setting("_sender", "max_request_size")
    request_timeout_ms: int = _setting("_sender", "request_timeout_ms")
    retry_backoff_s: float = _setting("_sender", "retry_backoff_s")

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
        self._client, self._meta_client = (
            Client(
                bootstrap_servers,
                client_id=client_id,
                request_timeout_ms=request_timeout_ms,
                security=security,
            )
            for _ in range(2)
        )
        self._meta_lock = threading.Lock()
        self._accumulator = RecordAccumulator(
            batch_size=batch_size, buffer_memory=buffer_memory, max_block_s=max_block_ms / 1000
        )
        self._partition_counts = self._accumulator.partition_counts
        self._append = self._accumulator.append
        self._append_batch = self._accumulator.append_batch
        idempotence = None
        if self.enable_idempotence:
            idempotence = Idempotence(
                self._meta_request, delivery_timeout_s=self.delivery_timeout_s
            )
        self._sender = Sender(
            self._accumulator,
            self._client,
            idempotence,
            acks=acks,
            linger_s=linger_ms / 1000,
            compression=Compression.parse(compression_type or Compression.NONE),
            max_in_flight=max_in_flight_requests,
            max_request_size=max_request_size,
            request_timeout_ms=request_timeout_ms,
            retry_backoff_s=retry_backoff_ms / 1000,
        )
        self._sender.thread.start()

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
        if timestamp_ms is not None:
            _check_timestamp(timestamp_ms)
        if partition is None:
            partition = self._choose_partition(topic, key)
        timestamp = _now_ms() if timestamp_ms is None else timestamp_ms
        size = (
            _RECORD_OVERHEAD_BYTES
            + (len(value) if value is not None else 0)
            + (len(key) if key is not None else 0)
        )
        checked = _NO_HEADERS
        if headers:
            checked = _check_headers(headers)
            size += sum(len(k) + (len(v) if v is not None else 0) + 4 for k, v in checked)
        return self._append(topic, partition, key, value, checked, timestamp, size)

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
        if timestamp_ms is not None:
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
        batch.encoded = batch.encode(self._sender.compression)
        # The bytes above are what is sent.
        batch.keys, batch.values, batch.headers = [], [], []
        return self._append_batch(batch)

    def flush(self, timeout: float | None = None) -> None:
        """Send everything queued now and wait until it is acknowledged (or failed)."""
        self._accumulator.flush(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Flush, stop the sender thread and close the connections. Idempotent."""
        if self._accumulator.closed:
            return
        try:
            self.flush(timeout)
        finally:
            self._accumulator.close()
            self._sender.thread.join(timeout)
            self._client.close()
            self._meta_client.close()
            self._accumulator.closed = True

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

    # -- partitioning and metadata ------------------------------------------------

    def _choose_partition(self, topic: str, key: bytes | None) -> int:
        count = self._partition_count(topic)
        if key is not None:
            return partition_for_key(key, count)
        return self._accumulator.sticky.setdefault(topic, 0) % count

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

    def _meta_request(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """A request on the metadata connection, which callers and the sender share."""
        with self._meta_lock:
            return self._meta_client.request(api, body)
