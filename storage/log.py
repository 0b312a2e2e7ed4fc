"""One partition's log: the locked front door (Kafka's UnifiedLog).

Three parts, as in Kafka: `storage.local_log.LocalLog` holds the segments and every
change to their files (append's write, roll, flush, reads, truncation, deletion,
replacement); `storage.producer_state_manager.ProducerStateManager` holds the
idempotent producers' state and orders its snapshot files; `Log` holds the offsets
(log start, high watermark), the lock, and the order in which the other two act.

Invariants: segment base offsets strictly increase and each segment's offsets
lie below the next base; `log_start_offset <= high_watermark == log_end_offset`
(single broker: every appended batch is committed); `recovery_point <=
log_end_offset` and everything below it has been fsynced; the producer state
describes exactly the batches in [log_start_offset, log_end_offset) (`map_end_offset
== log_end_offset`), and a `<base>.snapshot` of the state at the newest roll is
written off the append path (the next flush, the broker's `producer-snapshots` task
within a second, a deletion of segments) and one at a clean close
(docs/idempotence.md).

Thread safety: every method may be called from any thread. Appends, rolls,
truncation and deletions hold `_lock`; `flush` holds it only to capture what to
fsync and to advance the recovery point, never during the fsync itself.
Readers take `_lock` just long enough to snapshot the segment list and the
active size, then read with `pread` outside it. Append listeners run after the
lock is released.

After a crash: see storage.recovery; a log is opened through `open_log`.

Transactions (issue 36; Kafka's UnifiedLog), the seam the coordinator and the
readers use:

- `append(..., layout=KAFKA_LAYOUT)` of a transactional v2 batch (attribute bit 4,
  producer id and epoch required) opens or continues its producer's transaction
  here; the idempotence checks apply, an older epoch is INVALID_PRODUCER_EPOCH, a
  non-transactional batch of a producer with an open transaction INVALID_TXN_STATE.
- `append_txn_marker(producer_id, producer_epoch, *, commit, coordinator_epoch,
  append_time_ms, sync=True) -> int`: one v2 control batch (Kafka's
  EndTransactionMarker, protocol.kafka.control) ends the producer's transaction;
  an ABORT adds an entry to the active segment's `.txnindex` (storage.txn_index);
  returns the marker's offset, fsynced when `sync` (acks=all), else left to the
  flush policy.
- `last_stable_offset`: min(first offset of the open transactions (at least the log
  start), high watermark), Kafka's LSO.
- `read(..., committed=True)` / `locate(..., committed=True)`: whole batches below
  the LSO only, `FetchData.aborted_transactions` the (producer id, first offset) of
  the aborted transactions meeting the fetched range (Kafka's
  collectAbortedTransactions, per segment, no per-record work).
- `producer_states()`: DescribeProducers' view of each producer.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from protocol.batch import (
    BOTH_LAYOUTS,
    KAFKA_BATCHES,
    KAFKA_LAYOUT,
    KAFKA_MAGIC,
    LAYOUT,
    TIDELOG_BATCHES,
    BatchLayout,
    set_base_offset,
    set_leader_epoch,
    set_log_append_time,
    set_max_timestamp,
)
from protocol.errors import (
    DuplicateSequenceNumber,
    MessageTooLarge,
    OffsetOutOfRange,
    PolicyViolation,
    StorageError,
    UnknownTopicOrPartition,
)
from protocol.kafka.control import marker_batch
from storage import failpoints
from storage.config import LogConfig
from storage.fdbudget import FdBudget
from storage.fileio import FileIO
from storage.files import DeletionQueue
from storage.local_log import Found, LocalLog, SegmentFiles, SegmentView
from storage.producer_state import (
    CompletedTxn,
    Duplicate,
    PendingAppend,
    ProducerEntry,
    ProducerState,
)
from storage.producer_state_manager import ProducerStateManager
from storage.record_source import RecordSource
from storage.remote.remote_reader import RemoteLog
from storage.segment import Segment, SegmentInfo
from storage.segment_walk import find_batch
from storage.txn_index import AbortedTxn
from storage.validator import LogValidator, ValidBatch

log = structlog.get_logger("tidelog.storage")

AppendListener = Callable[["Log"], None]


@dataclass(frozen=True, slots=True)
class AppendInfo:
    """Result of one append. `flush_needed`: flush.messages/flush.ms say fsync now."""

    base_offset: int
    last_offset: int
    log_append_time: int  # -1 unless the topic uses LogAppendTime
    log_start_offset: int
    flush_needed: bool = False
    # A retried idempotent batch: the offsets are the original append's, nothing was written.
    duplicate: bool = False


@dataclass(frozen=True, slots=True)
class FetchData:
    """`Log.read`'s answer. `layouts`: which batch layouts `records` holds, a bitmask
    of `protocol.batch.TIDELOG_BATCHES` and `KAFKA_BATCHES` (a bit may be set for a
    layout that is not there, never missing for one that is; 0 when empty)."""

    records: bytes
    high_watermark: int
    log_start_offset: int
    layouts: int = BOTH_LAYOUTS
    # A read_committed read (`committed=True`) only: its LSO and aborted transactions.
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class Location:
    """`Log.locate`'s answer: `Log.read`'s, with a large read's records as a
    `RecordSource` (a span of the segment file) rather than bytes."""

    records: bytes | RecordSource
    high_watermark: int
    log_start_offset: int
    layouts: int = BOTH_LAYOUTS
    last_stable_offset: int = -1
    aborted_transactions: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class ProducerView:
    """One producer as DescribeProducers shows it."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_txn_start_offset: int  # -1: no open transaction


@dataclass(frozen=True, slots=True)
class LogStatistics:
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    size_bytes: int
    segment_count: int
    poisoned: bool


# What `_assign_offsets` found: the next offset, the max timestamp and its offset, and
# the producer updates to commit (None: no idempotent batch).
_Stamped = tuple[int, int, int, PendingAppend | None]


def _assign_offsets(
    buf: bytearray,
    batches: list[ValidBatch],
    producers: ProducerState,
    offset: int,
    log_append_time: int,
) -> _Stamped | Duplicate:
    """Give each validated batch of `buf` its base offset (and the append time, on a
    LogAppendTime topic), checking idempotent producers' sequences before anything is
    written; a retried batch's Duplicate instead (it must come alone).

    A Kafka v2 batch is stamped as Kafka stamps it: base offset and partition leader
    epoch (0) outside its CRC; LogAppendTime, or a max_timestamp its records
    contradict, rewritten with a fresh CRC."""
    max_ts, offset_of_max_ts = -1, -1
    pending = None
    for pos, count, batch_max_ts, producer_id, epoch, sequence, magic, restamp, txn in batches:
        if log_append_time >= 0:
            batch_max_ts = log_append_time
        if producer_id >= 0:  # idempotent: checked before anything is written
            if pending is None:
                pending = producers.begin_append()
            outcome = pending.check(
                producer_id, epoch, sequence, count - 1, batch_max_ts, offset, txn
            )
            if type(outcome) is Duplicate:
                if len(batches) > 1:
                    raise DuplicateSequenceNumber(
                        f"{producers.name}: producer {producer_id} resent sequence "
                        f"{sequence} with other batches; a retried batch must be sent "
                        "alone to be answered with its offsets"
                    )
                return outcome
        set_base_offset(buf, pos, offset)
        if magic == KAFKA_MAGIC:
            _stamp_kafka(buf, pos, log_append_time, batch_max_ts if restamp else None)
        elif log_append_time >= 0:
            set_log_append_time(buf, pos, log_append_time)
        offset += count
        if batch_max_ts > max_ts:
            max_ts, offset_of_max_ts = batch_max_ts, offset - 1
    return offset, max_ts, offset_of_max_ts, pending


def _stamp_kafka(buf: bytearray, pos: int, log_append_time: int, max_timestamp: int | None) -> None:
    """The rest of a Kafka batch's stamp: leader epoch 0, then the append time (a
    LogAppendTime topic) or the records' own max timestamp (the header's was wrong)."""
    set_leader_epoch(buf, pos, 0)
    if log_append_time >= 0:
        set_log_append_time(buf, pos, log_append_time, layout=KAFKA_LAYOUT)
    elif max_timestamp is not None:
        set_max_timestamp(buf, pos, max_timestamp, layout=KAFKA_LAYOUT)


def _duplicate(
    duplicate: Duplicate, log_append_time: int, log_start_offset: int, logger: Any
) -> AppendInfo:
    """Kafka's answer to a retried batch: its original offsets (and the time stamped
    then, on a LogAppendTime topic), nothing appended."""
    batch = duplicate.batch
    logger.info(
        "produce_duplicate",
        producer_id=duplicate.producer_id,
        first_sequence=batch.first_sequence,
        base_offset=batch.first_offset,
    )
    return AppendInfo(
        batch.first_offset,
        batch.last_offset,
        batch.max_timestamp if log_append_time >= 0 else -1,
        log_start_offset,
        duplicate=True,
    )


class Log:
    """A partition log. Build it with `storage.recovery.open_log`."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[Segment],
        *,
        log_start_offset: int,
        recovery_point: int,
        io: FileIO,
        clock_ms: Callable[[], int],
        deletion_queue: DeletionQueue,
        fd_budget: FdBudget | None = None,
        producer_state: ProducerState | None = None,
        dir_dirty: bool = False,
    ) -> None:
        """`producer_state`: what `storage.producer_log.rebuild_producer_state` found
        (None: a new log, or one without idempotent batches since `log_start_offset`).
        `dir_dirty`: the directory has entries not yet fsynced (a segment created while
        opening), so the first flush makes them durable before anything is acknowledged."""
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self._local = LocalLog(
            directory,
            topic,
            partition,
            config,
            segments,
            recovery_point=recovery_point,
            io=io,
            clock_ms=clock_ms,
            deletion_queue=deletion_queue,
            fd_budget=fd_budget,
            dir_dirty=dir_dirty,
            fence_listener=self._segment_fenced,
        )
        if producer_state is None:
            producer_state = ProducerState(
                f"{topic}-{partition}",
                expiration_ms=config.producer_id_expiration_ms,
                map_end_offset=segments[-1].next_offset,
            )
        self._producers = ProducerStateManager(
            directory, io, producer_state, topic=topic, partition=partition
        )
        self._validator = LogValidator(topic, partition)
        self._clock_ms = clock_ms
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._log_start_offset = log_start_offset
        # The remote tier (docs/tiered-reads.md): reads below the local log start go
        # there. Set by `attach_remote` (the broker, when the partition has one).
        self.remote: RemoteLog | None = None
        self._deleted = False
        # Set by recovery when the log was opened: what the last start had to repair.
        self.recovery_truncated_bytes = 0
        self.quarantined_segments = 0
        self._listeners: list[AppendListener] = []
        self._log = log.bind(topic=topic, partition=partition)
        # (lso, segment, byte position of the batch at the LSO): where a
        # read_committed read stops, found once per LSO.
        self._lso_stop: tuple[int, Segment, int] | None = None

    # ---- state -----------------------------------------------------------

    @property
    def config(self) -> LogConfig:
        return self._local.config

    @config.setter
    def config(self, config: LogConfig) -> None:
        self._local.config = config

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def local_log_start_offset(self) -> int:
        """The first offset a local segment serves (KIP-405's local log start offset):
        equal to the log start unless tiered storage deleted local copies of uploaded
        segments, whose records below it are in the object store only."""
        return max(self._log_start_offset, self._local.segments[0].base_offset)

    @property
    def highest_remote_offset(self) -> int:
        """The last offset the object store holds readable, or -1 (Kafka's
        `highestOffsetInRemoteStorage`, answered for ListOffsets' latest-tiered spec)."""
        refs = self.remote.segments() if self.remote is not None else ()
        return refs[-1].end_offset if refs else -1

    def needs_remote(self, offset: int) -> bool:
        """Whether a read of `offset` goes to the remote tier (blocking on the network:
        the broker calls it in a remote-read thread, never on the event loop)."""
        remote = self.remote
        return (
            remote is not None
            and self._log_start_offset <= offset < self.local_log_start_offset
            and remote.covers(offset)
        )

    def attach_remote(self, remote: RemoteLog) -> None:
        """Serve reads below the local segments from `remote`. The log start offset is
        not touched: tiered storage's start-up restores it from the manifest
        (`restore_log_start_offset`), never below what delete-records decided."""
        self.remote = remote

    def remote_time_lookup(self, timestamp: int | None) -> bool:
        """Whether a time lookup (None: the max timestamp) may read the remote tier."""
        remote = self.remote
        if remote is None:
            return False
        top = remote.max_timestamp_ms(self._log_start_offset, self.local_log_start_offset)
        return top >= 0 and (timestamp is None or top >= timestamp)

    @property
    def log_end_offset(self) -> int:
        return self._local.segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Single broker: every appended batch is committed, so HW = LEO."""
        return self._local.segments[-1].next_offset

    @property
    def recovery_point(self) -> int:
        return self._local.recovery_point

    @property
    def size_bytes(self) -> int:
        return self._local.size_bytes

    @property
    def segment_count(self) -> int:
        return len(self._local.segments)

    @property
    def active_segment(self) -> Segment:
        return self._local.active

    @property
    def fenced_segments(self) -> int:
        """Segments with a fenced (damaged) range: found by recovery or by a read."""
        return self._local.fenced_segments

    @property
    def poisoned(self) -> bool:
        return self._local.poisoned is not None

    def statistics(self) -> LogStatistics:
        with self._lock:
            return LogStatistics(
                self._log_start_offset,
                self.log_end_offset,
                self._local.recovery_point,
                self._local.size_bytes,
                len(self._local.segments),
                self.poisoned,
            )

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call `listener(log)` after every successful append, outside the lock."""
        self._listeners.append(listener)

    # ---- append ----------------------------------------------------------

    def append(
        self, records: bytes | bytearray | memoryview, *, layout: BatchLayout = LAYOUT
    ) -> AppendInfo:
        """Validate, assign offsets and write all batches with one write (all or nothing).
        `layout`: Tidelog batches (docs/protocol.md §3), or Kafka v2 batches stored as
        the producer sent them (`KAFKA_LAYOUT`, a Kafka Produce's).
        CorruptMessage / InvalidRecord / InvalidTimestamp / MessageTooLarge for bad input
        (nothing written), StorageError when the disk fails."""
        self._check_writable()
        buf = bytearray(records)
        now_ms = self._clock_ms()
        config = self._local.config
        batches = self._validator.validate(buf, config, now_ms, layout=layout)
        if len(buf) > config.segment_bytes:
            raise MessageTooLarge(
                f"{self.topic}-{self.partition}: {len(buf)} bytes in one append exceed "
                f"segment.bytes {config.segment_bytes}"
            )
        log_append_time = now_ms if config.log_append_time else -1
        with self._lock:
            self._check_writable()
            if not batches:
                leo = self.log_end_offset
                return AppendInfo(leo, leo - 1, log_append_time, self._log_start_offset)
            producers = self._producers.state
            first = self.log_end_offset
            stamped = _assign_offsets(buf, batches, producers, first, log_append_time)
            if isinstance(stamped, Duplicate):
                return _duplicate(stamped, log_append_time, self._log_start_offset, self._log)
            offset, max_ts, offset_of_max_ts, pending = stamped
            if self._local.roll_if_due(len(buf), max_ts, offset - 1, now_ms):
                self._producers.snapshot_at_roll()  # Kafka's roll snapshots here too
            self._local.append(
                buf,
                last_offset=offset - 1,
                max_timestamp=max_ts,
                offset_of_max=offset_of_max_ts,
                layouts=KAFKA_BATCHES if layout is KAFKA_LAYOUT else TIDELOG_BATCHES,
            )
            if pending is None:
                producers.map_end_offset = offset
            else:
                producers.commit(pending, offset)
            failpoints.hit("log.append.after_index")
            self._assert_invariants()
            flush_needed = self._local.flush_due(now_ms)
            info = AppendInfo(
                first, offset - 1, log_append_time, self._log_start_offset, flush_needed
            )
        for listener in list(self._listeners):
            listener(self)
        return info

    def _assert_invariants(self) -> None:
        """The module doc's invariants where append, roll and flush can break them (under
        `_lock`, O(1)). A failure is a bug, never the environment's doing: disk errors
        raise StorageError."""
        self._local.check_order()
        end = self.log_end_offset
        assert self._log_start_offset <= end, (
            f"{self.topic}-{self.partition}: log start {self._log_start_offset} > end {end}"
        )
        assert self._producers.state.map_end_offset == end, (
            f"{self.topic}-{self.partition}: producer state ends at "
            f"{self._producers.state.map_end_offset}, the log at {end}"
        )

    def _check_writable(self) -> None:
        if self._deleted:
            raise UnknownTopicOrPartition(f"{self.topic}-{self.partition} was deleted")
        if self._local.poisoned is not None:
            raise StorageError(
                f"{self.topic}-{self.partition} takes no writes until restart: "
                f"{self._local.poisoned}"
            )

    def flush_needed(self, now_ms: int | None = None) -> bool:
        """Whether flush.messages or flush.ms ask for an fsync now (the broker's flush task)."""
        with self._lock:
            return self._local.flush_due(self._clock_ms() if now_ms is None else now_ms)

    # ---- roll and producer snapshots ------------------------------------------

    def roll(self) -> None:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        self._check_writable()
        with self._lock:
            self._roll_locked("requested")

    def _roll_locked(self, reason: str) -> None:
        if self._local.roll(reason):
            self._producers.snapshot_at_roll()  # Kafka's takes it here; the file waits
            self._assert_invariants()

    def _segment_fenced(self, segment: Segment) -> None:
        """A read fenced `segment` to its end: if it is the active one, roll, so what is
        appended from now on lands outside the fenced range and stays readable."""
        with self._lock:
            if segment is not self._local.active or self._deleted or self.poisoned:
                return
            try:
                self._roll_locked("fenced")
            except StorageError:
                pass  # logged by the roll; the next fenced read tries again

    def write_pending_snapshot(self) -> bool:
        """Write the snapshot of the newest roll if it waits (without fsync: the next
        flush makes it durable); the broker's `producer-snapshots` task calls this every
        second, off the event loop. Returns whether one was written."""
        with self._lock:
            if self._deleted:
                return False
            return self._producers.write_pending()

    # ---- transactions --------------------------------------------------------

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: the first offset of the oldest open transaction (at least the
        log start), or the high watermark when none is open."""
        with self._lock:
            return self._lso_locked()

    def last_stable_offset_now(self) -> int:
        """`last_stable_offset` without the lock (two int reads: a fetch's answer)."""
        first = self._producers.state.first_unstable
        hw = self.high_watermark
        if first < 0:
            return hw
        return min(max(first, self._log_start_offset), hw)

    def _lso_locked(self) -> int:
        hw = self.high_watermark
        first = self._producers.state.first_unstable_offset()
        if first < 0:
            return hw
        return min(max(first, self._log_start_offset), hw)

    def ongoing_transactions(self) -> dict[int, int]:
        """producer id -> first offset of its open transaction in this partition."""
        with self._lock:
            return self._producers.state.ongoing()

    def producer_states(self) -> list[ProducerView]:
        """Every producer this partition knows, for DescribeProducers."""
        with self._lock:
            entries = self._producers.state.entries()
        return [
            ProducerView(
                pid,
                e.epoch,
                e.last_sequence,
                e.last_timestamp,
                e.coordinator_epoch,
                e.txn_first_offset,
            )
            for pid, e in sorted(entries.items())
        ]

    def append_txn_marker(
        self,
        producer_id: int,
        producer_epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        append_time_ms: int,
        sync: bool = True,
    ) -> int:
        """Write one COMMIT or ABORT marker for `producer_id` (a Kafka v2 control batch)
        and end its transaction here; returns the marker's offset.

        Kafka's checks first: an epoch older than the producer's is
        INVALID_PRODUCER_EPOCH, a coordinator epoch older than the last marker's
        TRANSACTION_COORDINATOR_FENCED (nothing written). A marker for a producer
        without an open transaction is written too (Kafka does: the coordinator may
        resend one), and changes no LSO. An ABORT of an open transaction appends its
        AbortedTxn to the active segment's `.txnindex`. `sync`: fsync up to the marker
        before returning (the coordinator counts it written only then).
        """
        self._check_writable()
        buf = bytearray(
            marker_batch(
                producer_id,
                producer_epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                timestamp=append_time_ms,
            )
        )
        now_ms = self._clock_ms()
        with self._lock:
            self._check_writable()
            state = self._producers.state
            state.check_marker(producer_id, producer_epoch, coordinator_epoch)
            offset = self.log_end_offset
            set_base_offset(buf, 0, offset)
            if self._local.roll_if_due(len(buf), append_time_ms, offset, now_ms):
                self._producers.snapshot_at_roll()
            self._local.append(
                buf,
                last_offset=offset,
                max_timestamp=append_time_ms,
                offset_of_max=offset,
                layouts=KAFKA_BATCHES,
            )
            completed = state.end_transaction(
                producer_id,
                producer_epoch,
                coordinator_epoch,
                offset,
                append_time_ms,
                commit=commit,
            )
            if completed is not None and completed.aborted:
                self._index_aborted(completed)
            self._assert_invariants()
            self._log.info(
                "txn_marker_written",
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                commit=commit,
                offset=offset,
                first_offset=-1 if completed is None else completed.first_offset,
            )
        if sync:
            self.flush(offset + 1)
        for listener in list(self._listeners):
            listener(self)
        return offset

    def aborted_transactions_of(self, bases: list[int]) -> list[AbortedTxn]:
        """The `.txnindex` entries of the segments at `bases` (the cleaner's view)."""
        with self._lock:
            wanted = set(bases)
            segments = [s for s in self._local.segments if s.base_offset in wanted]
        return [e for s in segments for e in s.txn_index.entries]

    def _index_aborted(self, txn: CompletedTxn) -> None:
        """The AbortedTxn of a transaction that just ended, in the active segment
        (under `_lock`, after `end_transaction`: the LSO is the one after it)."""
        lso = self._lso_locked()
        try:
            self._local.active.txn_index.append(
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
            )
        except OSError as exc:
            # The marker is written, its entry is not: no more writes until a restart,
            # whose recovery rebuilds the entry from the marker.
            self._local.poisoned = f"txn index append failed: {exc}"
            self._local.write_error("txn_index_append", self._local.active.txn_index.path, exc)

    # ---- producer state ----------------------------------------------------

    def producer_entry(self, producer_id: int) -> ProducerEntry | None:
        """What this partition remembers of an idempotent producer (None: unknown)."""
        with self._lock:
            return self._producers.state.entry(producer_id)

    def producer_batch_ends(self) -> frozenset[int]:
        """The last offset of each known producer's newest batch: the batches the cleaner
        keeps whole so a rebuilt producer state still finds them."""
        with self._lock:
            return self._producers.batch_ends()

    def producer_marker_epochs(self) -> dict[int, int]:
        """Producer id -> epoch for the producers a marker alone describes: the cleaner
        keeps such a producer's markers of that epoch, so a rebuilt state still fences
        its older epochs (Kafka's LogCleaner, `isBatchLastRecordOfProducer`)."""
        with self._lock:
            return self._producers.marker_epochs()

    def producer_count(self) -> int:
        with self._lock:
            return len(self._producers.state)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        with self._lock:
            now = self._clock_ms() if now_ms is None else now_ms
            return self._producers.remove_expired(now, self.config.producer_id_expiration_ms)

    # ---- flush -----------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below `up_to` (default: the log end), advance the recovery
        point. The fsync runs outside the append lock; an fsync error poisons the log."""
        local, producers = self._local, self._producers
        with self._flush_lock:
            with self._lock:
                target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
                dirty = local.dir_dirty or producers.has_unsynced
                if target <= local.recovery_point and not dirty:
                    return
                segments = local.unflushed(target)
                producers.write_pending()
                snapshot = producers.take_unsynced()
                dir_dirty, local.dir_dirty = dirty or snapshot is not None, False
            local.fsync(segments, dir_dirty=dir_dirty, also=lambda: producers.sync_file(snapshot))
            with self._lock:
                local.recovery_point = max(local.recovery_point, target)
                local.last_flush_ms = self._clock_ms()
                self._assert_invariants()

    # ---- read ------------------------------------------------------------

    def _snapshot(self) -> tuple[SegmentView, int, int]:
        with self._lock:
            view = self._local.view()
            return view, self._log_start_offset, view.segments[-1].next_offset

    def read(
        self, offset: int, max_bytes: int, *, min_one: bool = True, committed: bool = False
    ) -> FetchData:
        """Whole batches of one segment from the one holding `offset`, up to `max_bytes`
        (at least one batch with `min_one`). OffsetOutOfRange outside [log start, high
        watermark]; empty at the high watermark; CorruptMessage for a fenced range.
        `committed` (read_committed): batches below the LSO only, with the LSO and the
        aborted transactions of the range in the answer. Below the local log start the
        remote tier answers (uploaded segments lie below the LSO)."""
        remote = self._read_remote(offset, max_bytes, min_one, committed)
        if remote is not None:
            return FetchData(*remote)
        if committed:
            return self._read_committed(offset, max_bytes, min_one, None, located=False)  # type: ignore[return-value]
        found, hw, start = self._find(offset, max_bytes, min_one)
        if found is None:
            return FetchData(b"", hw, start, 0)
        records, layouts = self._local.read_bytes(found)
        return FetchData(records, hw, start, layouts)

    def locate(
        self,
        offset: int,
        max_bytes: int,
        *,
        min_one: bool = True,
        max_batches: int | None = None,
        committed: bool = False,
    ) -> Location:
        """`read`, with a large answer as a `RecordSource` the broker sends from the file
        (sendfile, local reads); same batches and errors. With `max_batches`, a span
        whose header walk would pass more batches raises ReadWouldWait first (the event
        loop's budget; see `broker.handlers.fetch`)."""
        remote = self._read_remote(offset, max_bytes, min_one, committed)
        if remote is not None:
            return Location(*remote)
        if committed:
            return self._read_committed(offset, max_bytes, min_one, max_batches, located=True)  # type: ignore[return-value]
        found, hw, start = self._find(offset, max_bytes, min_one)
        if found is None:
            return Location(b"", hw, start, 0)
        records, layouts = self._local.read_records(found, max_batches)
        return Location(records, hw, start, layouts)

    def _read_committed(
        self, offset: int, max_bytes: int, min_one: bool, max_batches: int | None, *, located: bool
    ) -> FetchData | Location:
        """A read_committed read: Kafka's read with `maxOffsetMetadata` = the LSO's, then
        `addAbortedTransactions` over the segments the read touched."""
        with self._lock:
            view = self._local.view()
            start, hw = self._log_start_offset, view.segments[-1].next_offset
            lso = self._lso_locked()
        if offset < start or offset > hw:
            raise OffsetOutOfRange(
                f"{self.topic}-{self.partition}: offset {offset} is outside [{start}, {hw}]"
            )
        found = None
        if offset < lso:
            stop = None if lso >= hw else self._lso_position(view.segments, lso)
            found = self._local.find(view, offset, max_bytes, min_one=min_one, hw=lso, stop=stop)
        if found is None:
            if located:
                return Location(b"", hw, start, 0, lso)
            return FetchData(b"", hw, start, 0, lso)
        aborted = self._aborted_in(view.segments, found[0], offset, lso)
        if located:
            records, layouts = self._local.read_records(found, max_batches)
            return Location(records, hw, start, layouts, lso, aborted)
        data, layouts = self._local.read_bytes(found)
        return FetchData(data, hw, start, layouts, lso, aborted)

    def _lso_position(self, segments: list[Segment], lso: int) -> tuple[Segment, int]:
        """The segment and byte position of the batch holding `lso` (where a committed
        read stops), found once per LSO (an index lookup and a short header walk)."""
        cached = self._lso_stop
        if cached is not None and cached[0] == lso and cached[1] in segments:
            return cached[1], cached[2]
        bases = [s.base_offset for s in segments]
        segment = segments[max(bisect.bisect_right(bases, lso) - 1, 0)]
        found = find_batch(segment, lso)
        position = segment.size if found is None else found.position
        self._lso_stop = (lso, segment, position)
        return segment, position

    @staticmethod
    def _aborted_in(
        segments: list[Segment], read: Segment, offset: int, lso: int
    ) -> tuple[tuple[int, int], ...]:
        """Kafka's collectAbortedTransactions for a read of segment `read` from `offset`:
        the upper bound is the end of that segment's offsets (at most the LSO), the
        search runs from it over the later segments until an entry's LSO passes the
        bound. A superset of Kafka's answer at most (its bound is the next index entry
        past the read), which a consumer ignores."""
        i = segments.index(read)
        upper = segments[i + 1].base_offset if i + 1 < len(segments) else lso
        return Log._aborted_from(segments[i:], offset, min(upper, lso))

    @staticmethod
    def _aborted_from(
        segments: list[Segment], offset: int, upper: int
    ) -> tuple[tuple[int, int], ...]:
        """The aborted transactions meeting [offset, upper) in `segments`' txn indexes,
        searched in order until an entry's LSO reaches `upper`."""
        found: list[tuple[int, int]] = []
        for segment in segments:
            txn_index = segment.txn_index
            if not txn_index.entries:
                continue
            entries, complete = txn_index.collect(offset, upper)
            found.extend((e.producer_id, e.first_offset) for e in entries)
            if complete:
                break
        return tuple(found)

    def aborted_transactions_between(self, low: int, high: int) -> tuple[tuple[int, int], ...]:
        """(producer id, first offset) of the aborted transactions meeting [low, high),
        over the remote tier's `.txnindex` objects then the local ones (blocks on the
        store: a worker thread's call). For readers of the bucket (`remote_segments`)."""
        with self._lock:
            local_start = self.local_log_start_offset
            segments = self._local.view().segments
        found: tuple[tuple[int, int], ...] = ()
        remote = self.remote
        if remote is not None and low < local_start:
            found, complete = remote.aborted_between(low, high, local_start)
            if complete:
                return found
        return (*found, *self._aborted_from(segments, low, high))

    def _read_remote(
        self, offset: int, max_bytes: int, min_one: bool, committed: bool = False
    ) -> tuple[bytes, int, int, int, int, tuple[tuple[int, int], ...]] | None:
        """(records, high watermark, log start, layouts, LSO, aborted transactions) of a
        read below the local log start, from the remote tier; None: the local log serves
        it. A read_committed one carries the LSO and Kafka's aborted list, searched over
        the remote segments' `.txnindex` objects from the one read, then the local ones."""
        remote = self.remote
        if remote is None:
            return None
        with self._lock:
            start, hw = self._log_start_offset, self.high_watermark
            local_start = self.local_log_start_offset
            lso = self._lso_locked() if committed else -1
            segments = self._local.view().segments if committed else []
        if not start <= offset < local_start:
            return None
        found = remote.read(offset, max_bytes, min_one=min_one, local_start=local_start)
        if found is None:
            return None
        records, layouts = found
        if not committed:
            return records, hw, start, layouts, -1, ()
        aborted, complete, upper = remote.aborted_transactions(offset, lso, local_start)
        if not complete:
            aborted = (*aborted, *self._aborted_from(segments, offset, upper))
        return records, hw, start, layouts, lso, aborted

    def _find(self, offset: int, max_bytes: int, min_one: bool) -> tuple[Found | None, int, int]:
        """Where a read lies (None: nothing at the offset yet), the high watermark and
        the log start."""
        view, start, hw = self._snapshot()
        if offset < start or offset > hw:
            raise OffsetOutOfRange(
                f"{self.topic}-{self.partition}: offset {offset} is outside [{start}, {hw}]"
            )
        if offset < view.bases[0]:
            # In the object store only (tiered storage deleted the local copy): never
            # answer with a later local batch, which would skip records. (Remote reads
            # are wired in by issue 39's read side.)
            raise StorageError(
                f"{self.topic}-{self.partition}: offset {offset} is below the local log "
                f"start {view.bases[0]}; it is in the object store only"
            )
        return self._local.find(view, offset, max_bytes, min_one=min_one, hw=hw), hw, start

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start with a
        timestamp >= `timestamp`, or None. Out-of-order timestamps are handled as
        Kafka does: the time index only narrows where the scan starts."""
        view, start, hw = self._snapshot()
        remote = self.remote
        if remote is not None:
            local_start = max(start, view.segments[0].base_offset)
            found = remote.offset_for_timestamp(timestamp, start, local_start)
            if found is not None:
                return found
            start = max(start, local_start)
        return self._local.offset_for_timestamp(view.segments, timestamp, start, hw)

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp, or None."""
        view, start, _ = self._snapshot()
        local = self._local.max_timestamp(view.segments, max(start, view.segments[0].base_offset))
        remote = self.remote
        if remote is None:
            return local
        local_start = max(start, view.segments[0].base_offset)
        if remote.max_timestamp_ms(start, local_start) < (-1 if local is None else local[1]):
            return local  # the local tier holds a later timestamp: no remote read
        found = remote.max_timestamp(start, local_start)
        return local if found is None else found

    # ---- moving the start and the end ---------------------------------------

    def delete_records(self, offset: int) -> int:
        """Raise the log start offset to `offset` (-1 = the high watermark); returns it."""
        if "delete" not in self.config.cleanup_policy:
            raise PolicyViolation(
                f"{self.topic}: delete_records needs cleanup.policy to include delete"
            )
        hw = self.high_watermark
        target = hw if offset == -1 else offset
        if target < 0 or target > hw:
            raise OffsetOutOfRange(
                f"{self.topic}-{self.partition}: delete_records offset {offset} "
                f"is outside [0, {hw}]"
            )
        return self.raise_log_start_offset(target, "delete_records")

    def raise_log_start_offset(self, offset: int, reason: str) -> int:
        """Raise the log start offset to `offset` (at most the high watermark; it never
        moves back); returns it. Remote retention calls it before it deletes objects."""
        with self._lock:
            target = min(offset, self.high_watermark)
            if target > self._log_start_offset:
                self._log_start_offset = target
                self._producers.state.truncate_head(target)
                self._log.info("log_start_offset_raised", offset=target, reason=reason)
            return self._log_start_offset

    def restore_log_start_offset(self, offset: int) -> None:
        """At open, tiered storage's manifest may put the log start below the first local
        segment (recovery clamps it there): the remote tier holds [offset, local start).
        The caller checks that readable remote segments cover that range."""
        with self._lock:
            if 0 <= offset < self._log_start_offset:
                self._log_start_offset = offset
                self._log.info("log_start_offset_restored", offset=offset, reason="remote_tier")

    def delete_local_segments(self, count: int, reason: str) -> list[SegmentInfo]:
        """Tiered storage's local retention: remove the oldest `count` local segments
        (never the active one), whose records the object store holds; the log start
        offset stays, the local log start rises. Callers check the upload finished."""
        with self._lock:
            local = self._local
            count = min(count, len(local.segments) - 1)
            if count <= 0:
                return []
            new_local_start = local.segments[count].base_offset
            infos = local.delete_oldest(count, reason, new_local_start)
            self._producers.segments_deleted(self._log_start_offset, new_local_start)
            return infos

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after the one holding `offset` (testing, operators)."""
        with self._lock:
            if offset >= self.log_end_offset:
                return
            removed = self._local.truncate_to(offset)
            end = self.log_end_offset
            self._log_start_offset = min(self._log_start_offset, end)
            self._producers.rebuild_after_truncation(
                self._local.segments,
                self.config,
                log_start_offset=self._log_start_offset,
                log_end_offset=end,
                now_ms=self._clock_ms(),
            )
            self._log.info("log_truncated", offset=offset, bytes=removed, end_offset=end)

    # ---- segments for retention and compaction ----------------------------

    def segments_info(self) -> list[SegmentInfo]:
        with self._lock:
            view = self._local.view()
        return view.infos()

    def delete_oldest_segments(self, count: int, reason: str) -> list[SegmentInfo]:
        """Remove the first `count` segments and raise the log start to the next base
        (if every segment goes, roll first so an empty active segment remains)."""
        with self._lock:
            local = self._local
            count = min(count, len(local.segments))
            if count > 0 and count == len(local.segments):
                if local.active.size == 0:
                    count -= 1
                else:
                    self._roll_locked("delete_all_segments")
            if count <= 0:
                return []
            new_start = local.segments[count].base_offset
            self._log_start_offset = max(self._log_start_offset, new_start)
            infos = local.delete_oldest(count, reason, self._log_start_offset)
            self._producers.segments_deleted(self._log_start_offset, new_start)
            return infos

    # ---- the cleaner's door ----------------------------------------------

    @property
    def segment_files(self) -> SegmentFiles:
        """The segment files by path, for the cleaner."""
        return SegmentFiles(self._local)

    def replace_segments(self, old_bases: list[int], new_bases: list[int]) -> None:
        """Swap cleaned segments in for `old_bases` (see `LocalLog.replace_segments`);
        the producer snapshots of segments merged away go too."""
        with self._lock:
            self._check_writable()
            new = self._local.replace_segments(old_bases, new_bases)
            self._producers.delete_merged(set(old_bases) - set(self._local.bases))
            self._log.info("segments_replaced", old=old_bases, new=new)

    def mark_deleted(self) -> None:
        """Its topic was deleted: later appends fail, readers already inside finish."""
        with self._lock:
            self._deleted = True

    # ---- shutdown --------------------------------------------------------

    def close(self) -> None:
        """Flush, write the final time entry and a producer snapshot, trim the indexes
        and close every file."""
        if not self.poisoned:
            self.flush()
        with self._lock:
            if not self.poisoned and not self._deleted:
                self._producers.snapshot_now("close")
            self._local.close()
