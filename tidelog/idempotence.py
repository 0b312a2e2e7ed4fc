"""The idempotent `Producer`'s bookkeeping: its id and epoch, per-partition sequence
numbers, and what to do with a failed batch (docs/idempotence.md "Clients").

Kafka's producer rules (TransactionManager, Sender), for a producer without
transactions:

* every batch gets its partition's next sequence when it is first sent, and keeps
  it on every retry, so the broker answers a retry of an appended batch with its
  original offsets; at most 64 batches of a partition are unanswered at a time, the
  number the broker remembers (Kafka: 5 requests of one batch per partition);
* a request may carry several new batches of a partition, but a retried batch
  goes alone (the broker answers a duplicate with its offsets only then);
* a retriable error (lost connection, REQUEST_TIMED_OUT, STORAGE_ERROR, ...) is
  retried until `delivery_timeout_ms`, in the original order (`send_index`);
  UNKNOWN_TOPIC_OR_PARTITION is not (Kafka's producer waits for the topic in its
  metadata; this one does not refresh metadata, so the batch fails at once);
* OUT_OF_ORDER_SEQUENCE_NUMBER for a batch sent after one of its partition's
  batches that is being retried is only a consequence of that gap: retried too;
  otherwise the broker lost the partition's sequence (a bug, or its log was
  truncated): the batch fails and the producer takes its next epoch, which starts
  every partition again at sequence 0;
* UNKNOWN_PRODUCER_ID: the partition forgot this producer (retention or
  `producer.id.expiration.ms`); nothing was appended, so the producer takes its
  next epoch and retries the batch from sequence 0.

An epoch change waits until no request is in flight; batches waiting for a retry
are then numbered again. A batch whose earlier attempt was appended although its
answer was lost may then be stored twice: the one case where an epoch change
costs exactly-once, as in Kafka.

Not thread-safe: the producer's sender thread owns it.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable, Iterable
from typing import Any, Final, NamedTuple

from protocol.batch import set_producer_fields
from protocol.errors import (
    OutOfOrderSequenceNumber,
    TidelogError,
    UnknownProducerId,
    UnknownTopicOrPartition,
)
from tidelog.pending import PendingBatch

__all__ = [
    "MAX_BATCHES_IN_FLIGHT_PER_PARTITION",
    "MAX_IN_FLIGHT_IDEMPOTENT",
    "Idempotence",
    "ProducerIdentity",
    "Sequencer",
    "Verdict",
    "verdict",
]

# Requests in flight per connection with idempotence (Kafka's limit, kept).
MAX_IN_FLIGHT_IDEMPOTENT: Final = 5
# Batches of one partition sent and not yet answered: the broker answers a retry as a
# duplicate only if it is one of the producer's last 64 batches in the partition
# (storage.producer_state BATCHES_RETAINED; the client cannot import storage).
MAX_BATCHES_IN_FLIGHT_PER_PARTITION: Final = 64
_SEQUENCE_MODULUS: Final = 2**31


class ProducerIdentity(NamedTuple):
    producer_id: int
    epoch: int


class Verdict:
    """What to do with a failed batch."""

    FAIL: Final = "fail"
    RETRY: Final = "retry"
    RETRY_IF_BEHIND: Final = "retry_if_behind"  # retried only behind a retrying batch
    NEW_EPOCH_AND_RETRY: Final = "new_epoch_and_retry"


def verdict(error: BaseException) -> str:
    """The rule of the module doc for one error (the caller checks the delivery timeout)."""
    if isinstance(error, UnknownProducerId):
        return Verdict.NEW_EPOCH_AND_RETRY
    if isinstance(error, OutOfOrderSequenceNumber):
        return Verdict.RETRY_IF_BEHIND
    if isinstance(error, UnknownTopicOrPartition):
        return Verdict.FAIL
    if isinstance(error, TidelogError):
        return Verdict.RETRY if error.retriable else Verdict.FAIL
    if isinstance(error, OSError):  # the connection broke or timed out
        return Verdict.RETRY
    return Verdict.FAIL


class Sequencer:
    """The producer's identity and the next sequence of each partition."""

    def __init__(self) -> None:
        self.identity: ProducerIdentity | None = None
        self.new_epoch_needed = False
        self._next: dict[tuple[str, int], int] = {}

    @property
    def needs_identity(self) -> bool:
        return self.identity is None or self.new_epoch_needed

    def grant(self, identity: ProducerIdentity) -> None:
        """A new id or epoch: every partition starts again at sequence 0."""
        self.identity = identity
        self.new_epoch_needed = False
        self._next.clear()

    def take(self, topic: str, partition: int, count: int) -> int:
        """The first sequence of a batch of `count` records; sequences wrap at int32."""
        key = (topic, partition)
        first = self._next.get(key, 0)
        self._next[key] = (first + count) % _SEQUENCE_MODULUS
        return first


class Idempotence:
    """The idempotent producer's state and rules (Kafka's TransactionManager, without
    transactions): its id and epoch, each batch's sequence and first-send order, which
    batches may share a request, and whether a failed batch is tried again.

    Kept apart from the sender so the sender reads the same with idempotence off; the
    sender thread owns it (the caller holds the accumulator's lock where said).
    """

    def __init__(
        self,
        request: Callable[[str, dict[str, Any]], dict[str, Any]],
        *,
        delivery_timeout_s: float,
    ) -> None:
        """`request` asks the broker (for `init_producer_id`) off the produce connection."""
        self.delivery_timeout_s = delivery_timeout_s
        self.sequencer = Sequencer()
        self._request = request
        self._sends = 0  # batches sent for the first time (their send_index)

    def renew_identity(self) -> BaseException | None:
        """Get an id (or the next epoch) before a send; the error if that failed."""
        sequencer = self.sequencer
        previous = sequencer.identity
        body = {"producer_id": -1, "producer_epoch": -1}
        if previous is not None:
            body = {"producer_id": previous.producer_id, "producer_epoch": previous.epoch}
        try:
            answer = self._request("init_producer_id", body)
        except Exception as exc:
            return exc
        sequencer.grant(ProducerIdentity(answer["producer_id"], answer["producer_epoch"]))
        return None

    def take_request(
        self,
        ready: deque[PendingBatch],
        in_flight: Iterable[list[PendingBatch]],
        max_request_size: int,
    ) -> list[PendingBatch]:
        """The next request, taken out of `ready` (under the lock): new batches of a
        partition may share a request, a retried one goes alone, and a partition never
        has more than MAX_BATCHES_IN_FLIGHT_PER_PARTITION batches unanswered. Per-partition
        order is kept: a partition whose batch was left behind takes no later one here."""
        unanswered = Counter((b.topic, b.partition) for r in in_flight for b in r)
        taken: list[PendingBatch] = []
        left: list[PendingBatch] = []
        closed: set[tuple[str, int]] = set()
        here: Counter[tuple[str, int]] = Counter()
        size = 0
        for batch in ready:
            where = (batch.topic, batch.partition)
            retry = batch.send_index >= 0
            if (
                where in closed
                or (taken and size + batch.size_bytes > max_request_size)
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
        ready.clear()
        ready.extend(left)
        return taken

    def stamp(self, batch: PendingBatch, encoded: bytearray) -> None:
        """Number a batch at its first send, and again after an epoch change (its bytes
        then get the new id, epoch and sequence, and a new CRC)."""
        identity = self.sequencer.identity
        assert identity is not None  # renew_identity ran before the send
        if batch.send_index < 0:
            batch.send_index = self._sends
            self._sends += 1
        if batch.stamped == identity:
            return
        batch.sequence = self.sequencer.take(batch.topic, batch.partition, len(batch.timestamps))
        set_producer_fields(encoded, 0, identity.producer_id, identity.epoch, batch.sequence)
        batch.stamped = identity

    def should_retry(
        self,
        batch: PendingBatch,
        error: BaseException,
        waiting: Callable[[], list[PendingBatch]],
    ) -> bool:
        """Whether `batch` is tried again; `waiting()` lists the batches queued or in
        flight (an earlier batch of the partition among them makes a gap harmless)."""
        if time.monotonic() - batch.created >= self.delivery_timeout_s:
            return False
        rule = verdict(error)
        if rule == Verdict.RETRY_IF_BEHIND:
            behind = any(
                b.topic == batch.topic
                and b.partition == batch.partition
                and 0 <= b.send_index < batch.send_index
                for b in waiting()
            )
            if not behind:
                self.sequencer.new_epoch_needed = True  # the broker lost our sequence
            return behind
        if rule == Verdict.NEW_EPOCH_AND_RETRY:
            self.sequencer.new_epoch_needed = True
        return rule != Verdict.FAIL
