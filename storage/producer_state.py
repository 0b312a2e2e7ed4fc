"""Per-partition producer state for idempotent appends (Kafka's ProducerStateManager).

For each producer id the partition remembers its epoch and the metadata of its
last `BATCHES_RETAINED` appended batches. An append is checked against it in
two phases, so a failed write leaves the state unchanged:

    pending = state.begin_append()
    for each batch, in order:   outcome = pending.check(...)   (may raise)
    ... write the batches ...
    state.commit(pending, next_offset)      only once the write succeeded

`check` answers `NOT_IDEMPOTENT` (producer id -1: nothing to do), a `Duplicate`
(a retry of one of the last 64 batches: answer with its original offsets and
append nothing) or an `Accepted` pending entry, or raises
OutOfOrderSequenceNumber / InvalidProducerEpoch / UnknownProducerId /
InvalidRecord. The rules are
Kafka 4's `ProducerAppendInfo` for client appends (docs/idempotence.md):

* a batch whose epoch equals the producer's and whose sequence range equals a
  retained batch's is a duplicate;
* an epoch older than the producer's is INVALID_PRODUCER_EPOCH (Produce never
  answers PRODUCER_FENCED: Kafka 2.7+ uses INVALID_PRODUCER_EPOCH there);
* a newer epoch must start at sequence 0;
* the same epoch must continue at last sequence + 1, wrapping after 2**31 - 1;
* an unknown producer must start at sequence 0, else UNKNOWN_PRODUCER_ID (issue 21;
  Kafka 2.5+ accepts any sequence there instead, KIP-360): its state was lost to
  retention or expiry, and the producer is told so, resets its sequence and
  resends, as kafka-python's and Kafka's producers do on that error.

Several batches of one producer in one request are checked in order against
the pending state. Replaying the log (`replay`) applies batches without checks,
as Kafka's recovery does (origin REPLICATION): they were checked when written.

Transactions (issue 36, Kafka's ProducerAppendInfo / ProducerStateEntry): a
transactional batch (attribute bit 4) starts the producer's ongoing transaction in
this partition at its base offset (`ProducerEntry.txn_first_offset`, -1 when none)
or continues it; a non-transactional batch while one is ongoing is
INVALID_TXN_STATE. A COMMIT or ABORT marker (`check_marker` then `end_transaction`)
ends it: its epoch may not be older than the producer's (INVALID_PRODUCER_EPOCH) nor
its coordinator epoch older than the last marker's (TRANSACTION_COORDINATOR_FENCED);
the marker's epoch becomes the producer's (a bump forgets the retained batches, as
Kafka's `update`), and a `CompletedTxn` says what the log must index. The last stable
offset is the smallest ongoing transaction's first offset (`first_unstable_offset`).

Not thread-safe: the owning log calls it under its lock. Entries are immutable
named tuples (the cheapest Python objects to build on the produce path), so
`entries()` hands out a consistent view cheaply.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Final, NamedTuple, Protocol

from protocol.errors import (
    InvalidProducerEpoch,
    InvalidRecord,
    InvalidTxnState,
    OutOfOrderSequenceNumber,
    TransactionCoordinatorFenced,
    UnknownProducerId,
)

__all__ = [
    "BATCHES_RETAINED",
    "DEFAULT_PRODUCER_ID_EXPIRATION_MS",
    "NOT_IDEMPOTENT",
    "Accepted",
    "BatchFacts",
    "BatchMetadata",
    "CompletedTxn",
    "Duplicate",
    "PendingAppend",
    "ProducerEntry",
    "ProducerState",
    "last_sequence",
]

# Attribute bits of a batch (protocol.batch's; repeated to keep this module pure).
_TRANSACTIONAL: Final = 0x10
_CONTROL: Final = 0x20
# A marker's record: (commit, coordinator epoch).
Marker = tuple[bool, int]

NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1
NO_SEQUENCE: Final = -1
# A retry is answered as a duplicate if it is one of the producer's last 64 batches in
# the partition. Kafka keeps 5 (NUM_BATCHES_TO_RETAIN: 5 requests in flight, one batch
# per partition each); Tidelog's Producer packs several batches of a partition into one
# request and keeps up to 64 unanswered per partition: with fewer, acks=-1 producers
# wait on fsyncs (16: half the throughput of a producer without idempotence; 64: the
# same; docs/idempotence.md "Cost"). Kafka clients need 5 and get more.
# Memory: ~120 bytes per retained batch, at most ~8 KB per producer and partition.
BATCHES_RETAINED: Final = 64
# Sequences are int32 and wrap to 0 after the largest one (DefaultRecordBatch).
SEQUENCE_MODULUS: Final = 2**31
# producer.id.expiration.ms's default: one day without a batch forgets a producer.
DEFAULT_PRODUCER_ID_EXPIRATION_MS: Final = 86_400_000


def last_sequence(base_sequence: int, last_offset_delta: int) -> int:
    """The sequence of a batch's last record, wrapping at int32 as Kafka's do."""
    return (base_sequence + last_offset_delta) % SEQUENCE_MODULUS


class BatchMetadata(NamedTuple):
    """What is remembered of one appended batch: enough to answer its retry."""

    first_sequence: int
    last_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int


class ProducerEntry(NamedTuple):
    """One producer's state: invariant `len(batches) <= BATCHES_RETAINED`, oldest first,
    all of `epoch`; `last_timestamp` is the max timestamp of its newest batch (or
    marker). `coordinator_epoch`: the last marker's (-1: none yet);
    `txn_first_offset`: the first offset of its ongoing transaction here (-1: none)."""

    epoch: int
    batches: tuple[BatchMetadata, ...]
    last_timestamp: int
    coordinator_epoch: int = -1
    txn_first_offset: int = -1

    @property
    def last_sequence(self) -> int:
        return self.batches[-1].last_sequence if self.batches else NO_SEQUENCE

    @property
    def last_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def with_batch(
        self, epoch: int, batch: BatchMetadata, transactional: bool = False
    ) -> ProducerEntry:
        """This entry after appending `batch`; a new epoch forgets the older batches; a
        transactional batch starts a transaction at its first offset if none is ongoing."""
        kept = self.batches if epoch == self.epoch else ()
        if len(kept) >= BATCHES_RETAINED:
            kept = kept[len(kept) - BATCHES_RETAINED + 1 :]
        txn = self.txn_first_offset
        if transactional and txn < 0:
            txn = batch.first_offset
        return ProducerEntry(
            epoch, (*kept, batch), batch.max_timestamp, self.coordinator_epoch, txn
        )

    def after_marker(self, epoch: int, coordinator_epoch: int, timestamp: int) -> ProducerEntry:
        """This entry after a COMMIT/ABORT marker (Kafka's ProducerStateEntry.update)."""
        kept = self.batches if epoch == self.epoch else ()
        return ProducerEntry(epoch, kept, timestamp, coordinator_epoch, -1)

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.epoch:
            return None
        for batch in self.batches:
            if batch.first_sequence == first_seq and batch.last_sequence == last_seq:
                return batch
        return None


_EMPTY_ENTRY: Final = ProducerEntry(NO_PRODUCER_EPOCH, (), -1)


class CompletedTxn(NamedTuple):
    """A transaction a marker ended: [first_offset, last_offset] (the marker's offset)."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool


class BatchFacts(Protocol):
    """The header fields producer state needs (protocol.batch.BatchHeader has them)."""

    @property
    def base_offset(self) -> int: ...
    @property
    def last_offset_delta(self) -> int: ...
    @property
    def max_timestamp(self) -> int: ...
    @property
    def producer_id(self) -> int: ...
    @property
    def producer_epoch(self) -> int: ...
    @property
    def base_sequence(self) -> int: ...
    @property
    def attributes(self) -> int: ...


class _NotIdempotent:
    """The outcome for a batch without a producer id: append as before."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NOT_IDEMPOTENT"


NOT_IDEMPOTENT: Final = _NotIdempotent()


class Duplicate(NamedTuple):
    """A retry of an appended batch: answer success with `batch`'s offsets, append nothing.

    Kafka answers the whole produce request of the partition with this batch's
    offsets and log append time (`UnifiedLog.append`).
    """

    producer_id: int
    batch: BatchMetadata


class Accepted(NamedTuple):
    """The batch may be appended; `entry` is the producer's state once it is."""

    producer_id: int
    entry: ProducerEntry


class PendingAppend:
    """The updates of one append, checked in order and applied only by `commit`."""

    __slots__ = ("_state", "started", "updates")

    def __init__(self, state: ProducerState) -> None:
        self._state = state
        self.updates: dict[int, ProducerEntry] = {}
        # Transactions this append opens: first offset -> producer id.
        self.started: dict[int, int] = {}

    def _where(self, offset: int) -> str:
        return f"{self._state.name} at offset {offset}"

    def check(
        self,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        last_offset_delta: int,
        max_timestamp: int,
        base_offset: int,
        transactional: bool = False,
    ) -> _NotIdempotent | Duplicate | Accepted:
        """Check one batch that would be written at `base_offset`; raises on a violation."""
        if producer_id < 0:
            if transactional:
                raise InvalidRecord(
                    f"{self._where(base_offset)}: a transactional batch needs a producer id"
                )
            return NOT_IDEMPOTENT
        if producer_epoch < 0 or base_sequence < 0:
            raise InvalidRecord(
                f"producer {producer_id} sent epoch {producer_epoch} and base sequence "
                f"{base_sequence}; an idempotent batch needs both >= 0"
            )
        last_seq = last_sequence(base_sequence, last_offset_delta)
        committed = self._state._producers.get(producer_id)
        if committed is not None and not (
            # The expected next batch, the usual case, cannot be a duplicate: no scan.
            producer_epoch == committed.epoch
            and base_sequence == (committed.last_sequence + 1) % SEQUENCE_MODULUS
        ):
            duplicate = committed.find_duplicate(producer_epoch, base_sequence, last_seq)
            if duplicate is not None:
                return Duplicate(producer_id, duplicate)
        current = self.updates.get(producer_id) or committed or _EMPTY_ENTRY
        if producer_epoch < current.epoch:
            raise InvalidProducerEpoch(
                f"{self._where(base_offset)}: producer {producer_id} has epoch {producer_epoch}, "
                f"older than its last epoch {current.epoch}"
            )
        if producer_epoch != current.epoch:
            if base_sequence != 0 and current.epoch == NO_PRODUCER_EPOCH:
                raise UnknownProducerId(
                    f"{self._where(base_offset)}: producer {producer_id} is unknown here "
                    f"(new, expired or its batches deleted) and sent sequence "
                    f"{base_sequence}, not 0"
                )
            if base_sequence != 0:
                raise OutOfOrderSequenceNumber(
                    f"{self._where(base_offset)}: producer {producer_id} starts epoch "
                    f"{producer_epoch} at sequence {base_sequence}, not 0"
                )
        else:
            expected = (current.last_sequence + 1) % SEQUENCE_MODULUS
            if base_sequence != expected:
                raise OutOfOrderSequenceNumber(
                    f"{self._where(base_offset)}: producer {producer_id} sent sequence "
                    f"{base_sequence}, expected {expected}"
                )
        if current.txn_first_offset >= 0 and not transactional:
            raise InvalidTxnState(
                f"{self._where(base_offset)}: expected a transactional write from producer "
                f"{producer_id}: its transaction from offset {current.txn_first_offset} is open"
            )
        batch = BatchMetadata(
            base_sequence, last_seq, base_offset, base_offset + last_offset_delta, max_timestamp
        )
        entry = current.with_batch(producer_epoch, batch, transactional)
        if transactional and current.txn_first_offset < 0:
            self.started[base_offset] = producer_id
        self.updates[producer_id] = entry
        return Accepted(producer_id, entry)


class ProducerState:
    """The producers of one partition and the log offset up to which they are known.

    `map_end_offset` is the offset after the last batch applied (Kafka's
    lastMapOffset): a snapshot taken now is named after it, and a rebuild
    replays the log from it.
    """

    def __init__(
        self,
        name: str = "",
        *,
        expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
        map_end_offset: int = 0,
    ) -> None:
        if expiration_ms < 1:
            raise ValueError(f"producer.id.expiration.ms must be >= 1, not {expiration_ms}")
        self.name = name
        self.expiration_ms = expiration_ms
        self.map_end_offset = map_end_offset
        self._producers: dict[int, ProducerEntry] = {}
        # The ongoing transactions: first offset -> producer id (Kafka's ongoingTxns).
        self._ongoing: dict[int, int] = {}
        # min(_ongoing) or -1, kept current: a reader without the lock reads one int.
        self.first_unstable = -1

    def __len__(self) -> int:
        return len(self._producers)

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def entries(self) -> dict[int, ProducerEntry]:
        """A copy of the producer map (entries are immutable)."""
        return dict(self._producers)

    # ---- append -------------------------------------------------------------

    def begin_append(self) -> PendingAppend:
        return PendingAppend(self)

    def commit(self, pending: PendingAppend, next_offset: int) -> None:
        """Apply a checked append once its write succeeded; `next_offset` is the new log end."""
        if pending.updates:
            self._producers.update(pending.updates)
            if pending.started:
                self._ongoing.update(pending.started)
                self._ongoing_changed()
        if next_offset > self.map_end_offset:
            self.map_end_offset = next_offset

    # ---- rebuild ------------------------------------------------------------

    def load(self, entries: Mapping[int, ProducerEntry], map_end_offset: int) -> None:
        """Replace the state with a snapshot's entries taken at `map_end_offset`."""
        self._producers = dict(entries)
        self.map_end_offset = map_end_offset
        self._reindex_ongoing()

    def replay(
        self,
        headers: Iterable[BatchFacts],
        read_marker: Callable[[BatchFacts], Marker | None] | None = None,
        on_completed: Callable[[CompletedTxn, int], None] | None = None,
    ) -> int:
        """Apply logged batches without checks (they were checked when written).

        Control batches end their producer's transaction: `read_marker(header)` reads
        a marker's record (None: its type is unknown, treated as a COMMIT with
        coordinator epoch -1: the transaction ends either way), `on_completed(txn,
        lso)` hears of each completed one with the LSO right after it (the
        `.txnindex` rebuild's entries). Returns how many idempotent batches were
        applied; `map_end_offset` moves past every batch, idempotent or not.
        """
        applied = 0
        producers = self._producers
        for header in headers:
            last_offset = header.base_offset + header.last_offset_delta
            if header.attributes & _CONTROL and header.producer_id >= 0:
                marker = read_marker(header) if read_marker is not None else None
                self._replay_marker(header, marker, on_completed)
                applied += 1
            elif header.producer_id >= 0:
                batch = BatchMetadata(
                    header.base_sequence,
                    last_sequence(header.base_sequence, header.last_offset_delta),
                    header.base_offset,
                    last_offset,
                    header.max_timestamp,
                )
                current = producers.get(header.producer_id, _EMPTY_ENTRY)
                entry = current.with_batch(
                    header.producer_epoch, batch, bool(header.attributes & _TRANSACTIONAL)
                )
                producers[header.producer_id] = entry
                if entry.txn_first_offset >= 0 and current.txn_first_offset < 0:
                    self._ongoing[entry.txn_first_offset] = header.producer_id
                    self._ongoing_changed()
                applied += 1
            if last_offset + 1 > self.map_end_offset:
                self.map_end_offset = last_offset + 1
        self._reindex_ongoing()
        return applied

    def _reindex_ongoing(self) -> None:
        self._ongoing = {
            e.txn_first_offset: pid for pid, e in self._producers.items() if e.txn_first_offset >= 0
        }
        self._ongoing_changed()

    def _ongoing_changed(self) -> None:
        self.first_unstable = min(self._ongoing) if self._ongoing else -1

    def _replay_marker(
        self,
        header: BatchFacts,
        marker: Marker | None,
        on_completed: Callable[[CompletedTxn, int], None] | None,
    ) -> None:
        commit, coordinator_epoch = marker if marker is not None else (True, -1)
        completed = self.end_transaction(
            header.producer_id,
            header.producer_epoch,
            coordinator_epoch,
            header.base_offset,
            header.max_timestamp,
            commit=commit,
        )
        if completed is not None and on_completed is not None:
            on_completed(completed, self.last_stable_offset(header.base_offset + 1))

    # ---- transactions -----------------------------------------------------

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> None:
        """Kafka's checks of an end-transaction marker before it is written."""
        entry = self._producers.get(producer_id, _EMPTY_ENTRY)
        if producer_epoch < entry.epoch:
            raise InvalidProducerEpoch(
                f"{self.name}: marker for producer {producer_id} has epoch {producer_epoch}, "
                f"older than its last epoch {entry.epoch}"
            )
        if coordinator_epoch < entry.coordinator_epoch:
            raise TransactionCoordinatorFenced(
                f"{self.name}: marker for producer {producer_id} has coordinator epoch "
                f"{coordinator_epoch} (zombie), older than {entry.coordinator_epoch}"
            )

    def end_transaction(
        self,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        offset: int,
        timestamp: int,
        *,
        commit: bool,
    ) -> CompletedTxn | None:
        """Apply a marker written at `offset` (checked by `check_marker`); the
        transaction it ended, None if the producer had none open here."""
        entry = self._producers.get(producer_id, _EMPTY_ENTRY)
        first = entry.txn_first_offset
        self._producers[producer_id] = entry.after_marker(
            producer_epoch, coordinator_epoch, timestamp
        )
        if offset + 1 > self.map_end_offset:
            self.map_end_offset = offset + 1
        if first < 0:
            return None
        self._ongoing.pop(first, None)
        self._ongoing_changed()
        return CompletedTxn(producer_id, first, offset, not commit)

    def first_unstable_offset(self) -> int:
        """The smallest first offset of an ongoing transaction, -1 if none."""
        return self.first_unstable

    def last_stable_offset(self, high_watermark: int) -> int:
        """Kafka's LSO: min(first offset of the ongoing transactions, high watermark)."""
        first = self.first_unstable_offset()
        return high_watermark if first < 0 else min(first, high_watermark)

    def ongoing(self) -> dict[int, int]:
        """producer id -> first offset of its ongoing transaction here."""
        return {pid: first for first, pid in self._ongoing.items()}

    # ---- forgetting ---------------------------------------------------------

    def is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        """Kafka's rule: idle for producer.id.expiration.ms by its last batch's timestamp,
        and no transaction open (an open one waits for its marker)."""
        return entry.txn_first_offset < 0 and now_ms - entry.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for `expiration_ms`; returns how many."""
        expired = [pid for pid, entry in self._producers.items() if self.is_expired(entry, now_ms)]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    def truncate_head(self, log_start_offset: int) -> int:
        """Forget what lies below a new log start (retention, DeleteRecords).

        Producers whose every retained batch ends below it are dropped; the
        others lose those batches. The state is then what a rebuild from the
        log start would find, so a restart changes nothing. Returns how many
        producers were dropped.
        """
        dropped = 0
        for pid, entry in list(self._producers.items()):
            if entry.txn_first_offset >= 0:
                # Kafka keeps an open transaction whose start was deleted: its marker
                # still comes, and the LSO is then max(first offset, log start).
                if entry.batches and entry.batches[0].last_offset < log_start_offset:
                    kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
                    self._producers[pid] = entry._replace(batches=kept)
            elif not entry.batches:
                pass  # only a marker's epochs (a bump forgot the batches): expiry decides
            elif entry.last_offset < log_start_offset:
                del self._producers[pid]
                dropped += 1
            elif entry.batches[0].last_offset < log_start_offset:
                kept = tuple(b for b in entry.batches if b.last_offset >= log_start_offset)
                self._producers[pid] = entry._replace(batches=kept)
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        return dropped

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Forget everything: the log was emptied and restarts at `offset`."""
        self._producers.clear()
        self._ongoing.clear()
        self.first_unstable = -1
        self.map_end_offset = offset
