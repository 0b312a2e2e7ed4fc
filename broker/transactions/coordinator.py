"""The transaction coordinator's rules, as pure functions of the state (no I/O, no clock).

Each client request becomes a `Decision`: `Refuse(error)` (nothing changes), or
`Write(meta)` (the new value must be written durably to `__transaction_state`,
then `apply`ed, then answered). A `Write` with `markers=True` leaves the id in
PrepareCommit/PrepareAbort: the driver (broker/transactions/service.py) writes the
markers to every partition of the transaction, then asks `complete` for the
CompleteCommit/CompleteAbort value and writes that. Until then every other request
for the id is answered CONCURRENT_TRANSACTIONS, as Kafka answers.

The rules are Kafka's `TransactionCoordinator` (transactions version 1: the
client adds partitions with AddPartitionsToTxn; no epoch bump per transaction):

- InitProducerId: a new id gets a producer id at epoch 0; a known one in a
  completed state gets epoch + 1 (a new producer id at epoch 0 once the epoch is
  exhausted), which fences the older instance; an Ongoing transaction is first
  aborted with the epoch bumped (the client is told CONCURRENT_TRANSACTIONS and
  retries, then gets the next epoch). v3+ clients naming their current id/epoch
  are fenced (PRODUCER_FENCED) unless it matches (or is the epoch just replaced:
  the retry of an answered InitProducerId).
- AddPartitionsToTxn/AddOffsetsToTxn: Ongoing with the partitions added.
- EndTxn: Ongoing -> PrepareCommit/PrepareAbort; the retry of a completed EndTxn
  with the same result is answered NONE; the wrong result INVALID_TXN_STATE.
- A transaction open longer than its timeout is aborted with the epoch bumped
  (`timed_out` then `fence_and_abort`): the producer's next request is fenced.

Thread safety: none; the driver calls it from the trio thread only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from broker.transactions.config import TxnConfig
from broker.transactions.state import (
    EPOCH_EXHAUSTED,
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
)
from protocol.kafka.errors import KafkaError

__all__ = ["Decision", "Refuse", "TxnCoordinator", "Write"]

E = KafkaError
S = TxnState


@dataclass(frozen=True, slots=True)
class Refuse:
    error: KafkaError


@dataclass(frozen=True, slots=True)
class Write:
    """`meta` (None: a tombstone for `transactional_id`) to write, then apply, then
    answer `answer`; `markers`: then write the markers and complete."""

    transactional_id: str
    meta: TxnMetadata | None
    answer: KafkaError = KafkaError.NONE
    markers: bool = False


Decision = Refuse | Write


class TxnCoordinator:
    """Every transactional id's metadata and the rules that change it."""

    def __init__(self, config: TxnConfig, new_producer_id: Callable[[], int]) -> None:
        self.config = config
        self._new_producer_id = new_producer_id
        self.txns: dict[str, TxnMetadata] = {}

    # --- state --------------------------------------------------------------

    def load(self, records: Iterable[tuple[str, TxnMetadata | None]]) -> None:
        """Replay `__transaction_state` in log order: the last value of each id wins."""
        for tid, meta in records:
            if meta is None:
                self.txns.pop(tid, None)
            else:
                self.txns[tid] = meta

    def apply(self, decision: Write) -> None:
        """Make a written decision the state."""
        if decision.meta is None:
            self.txns.pop(decision.transactional_id, None)
        else:
            self.txns[decision.transactional_id] = decision.meta

    def preparing(self) -> list[str]:
        """Ids in PrepareCommit/PrepareAbort (after a load: their markers are owed)."""
        return [tid for tid, meta in self.txns.items() if meta.state.preparing]

    # --- InitProducerId -----------------------------------------------------

    def init_producer_id(
        self,
        tid: str,
        timeout_ms: int,
        now_ms: int,
        expected_producer_id: int = NO_PRODUCER_ID,
        expected_epoch: int = NO_PRODUCER_EPOCH,
    ) -> Decision:
        if not tid:
            return Refuse(E.INVALID_REQUEST)
        if not 0 < timeout_ms <= self.config.max_timeout_ms:
            return Refuse(E.INVALID_TRANSACTION_TIMEOUT)
        meta = self.txns.get(tid)
        if meta is None:
            fresh = TxnMetadata(
                transactional_id=tid,
                producer_id=self._new_producer_id(),
                producer_epoch=0,
                timeout_ms=timeout_ms,
                state=S.EMPTY,
                last_update_ms=now_ms,
            )
            return Write(tid, fresh)
        if expected_producer_id != NO_PRODUCER_ID and not self._is_current(
            meta, expected_producer_id, expected_epoch
        ):
            return Refuse(E.PRODUCER_FENCED)
        if meta.state.preparing:
            return Refuse(E.CONCURRENT_TRANSACTIONS)
        if meta.state in (S.ONGOING, S.PREPARE_EPOCH_FENCE):
            # Abort first with the epoch bumped (fences the old instance); the client
            # retries and then gets the next epoch.
            fenced = self.fence_and_abort(tid, now_ms)
            return replace(fenced, answer=E.CONCURRENT_TRANSACTIONS)
        if meta.state is S.DEAD:
            return Refuse(E.CONCURRENT_TRANSACTIONS)
        return Write(tid, self._bump(meta, timeout_ms, now_ms))

    @staticmethod
    def _is_current(meta: TxnMetadata, producer_id: int, epoch: int) -> bool:
        if producer_id == meta.producer_id:
            return epoch in (meta.producer_epoch, meta.last_producer_epoch)
        return producer_id == meta.previous_producer_id

    def _bump(self, meta: TxnMetadata, timeout_ms: int, now_ms: int) -> TxnMetadata:
        """The next epoch (a new producer id at epoch 0 once exhausted), state Empty."""
        if meta.producer_epoch >= EPOCH_EXHAUSTED:
            producer_id, epoch, previous = self._new_producer_id(), 0, meta.producer_id
        else:
            producer_id, epoch, previous = (
                meta.producer_id,
                meta.producer_epoch + 1,
                meta.previous_producer_id,
            )
        return meta.transit(
            S.EMPTY,
            producer_id=producer_id,
            producer_epoch=epoch,
            last_producer_epoch=meta.producer_epoch if producer_id == meta.producer_id else -1,
            previous_producer_id=previous,
            timeout_ms=timeout_ms,
            partitions=frozenset(),
            start_ms=-1,
            last_update_ms=now_ms,
        )

    # --- the transaction ------------------------------------------------------

    def _check(self, tid: str, producer_id: int, epoch: int) -> TxnMetadata | Refuse:
        if not tid:
            return Refuse(E.INVALID_REQUEST)
        meta = self.txns.get(tid)
        if meta is None or meta.producer_id != producer_id:
            return Refuse(E.INVALID_PRODUCER_ID_MAPPING)
        if meta.producer_epoch != epoch:
            return Refuse(E.PRODUCER_FENCED)
        return meta

    def add_partitions(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        partitions: Iterable[TopicPartition],
        now_ms: int,
    ) -> Decision:
        meta = self._check(tid, producer_id, epoch)
        if isinstance(meta, Refuse):
            return meta
        wanted = frozenset(partitions)
        if meta.state.preparing or meta.state is S.PREPARE_EPOCH_FENCE:
            return Refuse(E.CONCURRENT_TRANSACTIONS)
        if meta.state is S.DEAD:
            return Refuse(E.INVALID_PRODUCER_ID_MAPPING)
        if meta.state is S.ONGOING and wanted <= meta.partitions:
            return Refuse(E.NONE)
        start_ms = meta.start_ms if meta.state is S.ONGOING else now_ms
        return Write(
            tid,
            meta.transit(
                S.ONGOING,
                partitions=meta.partitions | wanted,
                start_ms=start_ms,
                last_update_ms=now_ms,
            ),
        )

    def verify_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaError]:
        """AddPartitionsToTxn v4 verify-only (KIP-890 part 1): nothing changes."""
        wanted = list(partitions)
        meta = self._check(tid, producer_id, epoch)
        if isinstance(meta, Refuse):
            return dict.fromkeys(wanted, meta.error)
        if meta.state.preparing:
            return dict.fromkeys(wanted, E.CONCURRENT_TRANSACTIONS)
        return {
            tp: E.NONE if meta.state is S.ONGOING and tp in meta.partitions else E.INVALID_TXN_STATE
            for tp in wanted
        }

    def end_txn(
        self, tid: str, producer_id: int, epoch: int, commit: bool, now_ms: int
    ) -> Decision:
        meta = self._check(tid, producer_id, epoch)
        if isinstance(meta, Refuse):
            return meta
        state = meta.state
        if state is S.ONGOING:
            target = S.PREPARE_COMMIT if commit else S.PREPARE_ABORT
            return Write(tid, meta.transit(target, last_update_ms=now_ms), markers=True)
        if state is S.COMPLETE_COMMIT:
            return Refuse(E.NONE if commit else E.INVALID_TXN_STATE)
        if state is S.COMPLETE_ABORT:
            return Refuse(E.INVALID_TXN_STATE if commit else E.NONE)
        if state is S.PREPARE_COMMIT:
            return Refuse(E.CONCURRENT_TRANSACTIONS if commit else E.INVALID_TXN_STATE)
        if state is S.PREPARE_ABORT:
            return Refuse(E.INVALID_TXN_STATE if commit else E.CONCURRENT_TRANSACTIONS)
        if state is S.PREPARE_EPOCH_FENCE:
            return Refuse(E.CONCURRENT_TRANSACTIONS)
        return Refuse(E.INVALID_TXN_STATE)  # Empty, Dead

    def complete(self, tid: str, now_ms: int) -> Write:
        """The Complete* value once every marker of a Prepare* transaction is written."""
        meta = self.txns[tid]
        assert meta.state.preparing, meta
        target = S.COMPLETE_COMMIT if meta.state is S.PREPARE_COMMIT else S.COMPLETE_ABORT
        return Write(
            tid,
            meta.transit(target, partitions=frozenset(), start_ms=-1, last_update_ms=now_ms),
        )

    def fence_and_abort(self, tid: str, now_ms: int) -> Write:
        """PrepareAbort of an Ongoing transaction with the epoch bumped (Kafka's
        `prepareFenceProducerEpoch` then abort): the instance that opened it is fenced
        by the markers' higher epoch."""
        meta = self.txns[tid]
        assert meta.state is S.ONGOING, meta
        if meta.producer_epoch >= 2**15 - 1:  # cannot bump: abort at the same epoch
            fenced = meta
        else:
            fenced = replace(
                meta,
                producer_epoch=meta.producer_epoch + 1,
                last_producer_epoch=-1,
            )
        return Write(
            tid,
            fenced.transit(S.PREPARE_ABORT, last_update_ms=now_ms),
            markers=True,
        )

    # --- timers -------------------------------------------------------------

    def timed_out(self, now_ms: int) -> list[str]:
        """Ongoing transactions open longer than their timeout."""
        return [
            tid
            for tid, meta in self.txns.items()
            if meta.state is S.ONGOING and meta.start_ms + meta.timeout_ms < now_ms
        ]

    def expired(self, now_ms: int) -> list[Write]:
        """Tombstones for ids idle past `transactional.id.expiration.ms` (no open txn)."""
        limit = self.config.id_expiration_ms
        return [
            Write(tid, None)
            for tid, meta in self.txns.items()
            if meta.state.completed and meta.last_update_ms + limit <= now_ms
        ]
