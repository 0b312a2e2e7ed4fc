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

from typing import Final, NamedTuple

from protocol.errors import (
    OutOfOrderSequenceNumber,
    TidelogError,
    UnknownProducerId,
    UnknownTopicOrPartition,
)

__all__ = [
    "MAX_BATCHES_IN_FLIGHT_PER_PARTITION",
    "MAX_IN_FLIGHT_IDEMPOTENT",
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
