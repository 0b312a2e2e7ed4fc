"""The `Producer`'s sender thread (Kafka's Sender): takes sealed batches from the
accumulator, frames them into produce requests, pipelines up to `max_in_flight`
of them on one connection, and resolves each batch from its answer.

Apart from the facade because it is the only code that runs in the sender thread
and touches the produce connection; the accumulator's lock is the only lock it
shares with callers. Answers arrive in request order, so `in_flight` is a queue.
With idempotence (tidelog.idempotence) failed batches are queued again in their
first-send order instead of failing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

from protocol.compression import Compression
from protocol.connection import BrokerProtocolError, Reply
from protocol.errors import error_from_wire
from protocol.framing import TAIL_PLACEHOLDER
from tidelog.accumulator import RecordAccumulator
from tidelog.client import Client
from tidelog.idempotence import Idempotence
from tidelog.joiner import ChunkJoiner, Joined
from tidelog.pending import PendingBatch


class Sender:
    """Ships sealed batches and resolves them; `thread` runs `run` until closed."""

    def __init__(
        self,
        accumulator: RecordAccumulator,
        client: Client,
        idempotence: Idempotence | None,
        *,
        acks: int,
        linger_s: float,
        compression: Compression,
        max_in_flight: int,
        max_request_size: int,
        request_timeout_ms: int,
        retry_backoff_s: float,
    ) -> None:
        self.acks = acks
        self.linger_s = linger_s
        self.compression = compression
        self.max_in_flight = max_in_flight
        self.max_request_size = max_request_size
        self.request_timeout_ms = request_timeout_ms
        self.retry_backoff_s = retry_backoff_s
        self._accumulator = accumulator
        # Direct references, for the per-request path (the accumulator never rebinds them).
        self._lock = accumulator.lock
        self._wake = accumulator.wake
        self._open = accumulator.open
        self._ready = accumulator.ready
        self._seal = accumulator.seal
        self._release = accumulator.release
        self._client = client
        self._idempotence = idempotence
        self._in_flight: deque[list[PendingBatch]] = deque()
        self._records_buffer = ChunkJoiner()
        self.thread = threading.Thread(target=self.run, name="tidelog-producer", daemon=True)

    def run(self) -> None:
        idempotence = self._idempotence
        try:
            while True:
                with self._lock:
                    to_send = self._wait_for_work()
                    if to_send is None and not self._in_flight:
                        return  # closing, nothing left
                if to_send:
                    if idempotence is not None and idempotence.sequencer.needs_identity:
                        error = idempotence.renew_identity()
                        if error is not None:  # the batches wait for a retry, or fail
                            self._finish(to_send, error=error)
                            continue
                    self._send_request(to_send)
                elif self._in_flight:
                    self._receive_reply()
        except BaseException as exc:  # a bug: fail every waiting record rather than hang
            self._crash(exc)
            raise

    def _crash(self, exc: BaseException) -> None:
        stranded = self._accumulator.abandon(exc)
        self._fail_all_in_flight(exc)
        self._finish(stranded, error=exc)

    def _wait_for_work(self) -> list[PendingBatch] | None:
        """Batches to send now ([] = go read a reply, None = shut down); under the lock."""
        accumulator, ready, idempotence = self._accumulator, self._ready, self._idempotence
        while True:
            now = time.monotonic()
            linger_deadline = None
            seal_all = accumulator.flushing or accumulator.closing
            for batch in list(self._open.values()):
                if seal_all or now - batch.created >= self.linger_s:
                    self._seal(batch)
                elif linger_deadline is None or batch.created < linger_deadline:
                    linger_deadline = batch.created
            retry_in = ready[0].retry_at - now if ready else 0.0
            # An epoch change waits for the answers in flight (tidelog.idempotence).
            epoch_wait = (
                idempotence is not None
                and idempotence.sequencer.new_epoch_needed
                and bool(self._in_flight)
            )
            room = len(self._in_flight) < self.max_in_flight
            if ready and room and retry_in <= 0 and not epoch_wait:
                if idempotence is not None:
                    return idempotence.take_request(ready, self._in_flight, self.max_request_size)
                return self._take_request()
            if self._in_flight:
                return []
            if accumulator.closing and not self._open and not ready:
                return None
            timeout = None if linger_deadline is None else linger_deadline + self.linger_s - now
            if retry_in > 0:
                timeout = retry_in if timeout is None else min(timeout, retry_in)
            self._wake.wait(timeout)

    def _take_request(self) -> list[PendingBatch]:
        ready = self._ready
        taken: list[PendingBatch] = []
        size = 0
        while ready:
            batch = ready[0]
            if taken and size + batch.size_bytes > self.max_request_size:
                break
            taken.append(ready.popleft())
            size += batch.size_bytes
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
        idempotence = self._idempotence
        for batch in batches:
            encoded = batch.encoded if batch.encoded is not None else batch.encode(self.compression)
            if idempotence is not None:
                idempotence.stamp(batch, encoded)
                batch.encoded = encoded  # kept for a retry until the batch is resolved
            else:
                batch.encoded = None  # copied into the request: free it now
            topics.setdefault(batch.topic, {}).setdefault(batch.partition, []).append(encoded)
        return topics

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
                    log_append_time = entry["log_append_time"]
                    if log_append_time is None:
                        log_append_time = -1
                    log_start = entry["log_start_offset"]
                    if log_start is None:
                        log_start = -1
            if batch_error is not None and self._retry(batch, batch_error, retried):
                retried.append(batch)
                continue
            batch.encoded = None
            batch.resolve(base, log_append_time, log_start, batch_error)
            resolved += 1
        retry_at = time.monotonic() + self.retry_backoff_s if retried else 0.0
        self._release(batches, resolved, retried, retry_at)

    def _retry(
        self, batch: PendingBatch, error: BaseException, retried: list[PendingBatch]
    ) -> bool:
        """Whether an idempotent producer tries `batch` again (tidelog.idempotence)."""
        idempotence = self._idempotence
        if idempotence is None or self._accumulator.sender_error is not None:
            return False

        def waiting() -> list[PendingBatch]:
            with self._lock:  # an earlier batch of the partition waits or is sent again
                return [*retried, *self._ready, *(b for r in self._in_flight for b in r)]

        return idempotence.should_retry(batch, error, waiting)
