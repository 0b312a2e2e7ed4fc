"""A transactional id's coordinator state: Kafka's `TransactionState` and `TransactionMetadata`.

`TxnState` holds Kafka's eight states with their `__transaction_state` status bytes
(`TransactionState.java`); `VALID_PREVIOUS` is Kafka's transition table: a
transition from a state not listed for the target is a bug, asserted by
`TxnMetadata.transit`.

`TxnMetadata` is immutable: every change is a new value, written to
`__transaction_state` (durably) before it replaces the old one in the
coordinator (broker/transactions/coordinator.py), so what a client was told is
always what a restart reloads.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import Enum

__all__ = [
    "EPOCH_EXHAUSTED",
    "NO_PRODUCER_EPOCH",
    "NO_PRODUCER_ID",
    "VALID_PREVIOUS",
    "TopicPartition",
    "TxnMetadata",
    "TxnState",
]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
# Kafka rotates to a new producer id once the epoch would pass Short.MaxValue - 1
# (the last epoch is kept for the fence of a zombie: `isEpochExhausted`).
EPOCH_EXHAUSTED = 2**15 - 2

TopicPartition = tuple[str, int]


class TxnState(Enum):
    """Kafka's transaction states; the value is the status byte in `__transaction_state`."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def kafka_name(self) -> str:
        """The name Kafka's tools print (DescribeTransactions' `transaction_state`)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def completed(self) -> bool:
        return self in (TxnState.EMPTY, TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)

    @property
    def preparing(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)


S = TxnState
VALID_PREVIOUS: dict[TxnState, frozenset[TxnState]] = {
    S.EMPTY: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.ONGOING: frozenset({S.ONGOING, S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_COMMIT: frozenset({S.ONGOING}),
    S.PREPARE_ABORT: frozenset({S.ONGOING, S.PREPARE_EPOCH_FENCE}),
    S.COMPLETE_COMMIT: frozenset({S.PREPARE_COMMIT}),
    S.COMPLETE_ABORT: frozenset({S.PREPARE_ABORT}),
    S.DEAD: frozenset({S.EMPTY, S.COMPLETE_COMMIT, S.COMPLETE_ABORT}),
    S.PREPARE_EPOCH_FENCE: frozenset({S.ONGOING}),
}


@dataclass(frozen=True, slots=True)
class TxnMetadata:
    """One transactional id's producer, epoch, state and the partitions of its transaction.

    `partitions` is empty unless the state is Ongoing or Prepare*; a group's
    TxnOffsetCommits are there as its `__consumer_offsets` partition, as in Kafka.
    `start_ms` is the time the transaction began (-1 when none is open);
    `last_update_ms` the time of the last change (expiration counts from it)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState
    partitions: frozenset[TopicPartition] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    # The producer id before the last rotation (epoch exhaustion), -1 if none.
    previous_producer_id: int = NO_PRODUCER_ID
    # The epoch before the last bump: a retried InitProducerId with it is answered
    # again rather than fenced (KIP-360).
    last_producer_epoch: int = NO_PRODUCER_EPOCH

    def transit(self, state: TxnState, **changes: object) -> TxnMetadata:
        """The next value, in `state`; a transition Kafka forbids is a bug."""
        assert self.state in VALID_PREVIOUS[state], f"{self.state} -> {state}"
        return replace(self, state=state, **changes)  # type: ignore[arg-type]

    @property
    def open(self) -> bool:
        """True while a transaction is started and not yet completed."""
        return self.state in (
            TxnState.ONGOING,
            TxnState.PREPARE_COMMIT,
            TxnState.PREPARE_ABORT,
            TxnState.PREPARE_EPOCH_FENCE,
        )
