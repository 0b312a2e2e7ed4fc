"""The transaction coordinator's driver: runs the pure `TxnCoordinator` inside the trio broker.

Every request for a transactional id runs under that id's lock: decide
(broker/transactions/coordinator.py), write the new value to `__transaction_state`
and fsync it (a worker thread, one write at a time), apply it, answer. An EndTxn
then writes its markers: a control batch on every data partition of the
transaction (`Log.append_txn_marker`, the storage seam), the pending
TxnOffsetCommits into the group coordinator for `__consumer_offsets`; then the
Complete* value. EndTxn is answered once the Prepare* value is durable, after
the markers were tried: a marker that cannot be written (a storage error) is
retried by the timer, as Kafka's marker channel retries, and the id answers
CONCURRENT_TRANSACTIONS until then.

`serve()` (one task in the broker's nursery) loads the log before the broker
listens, finishes every transaction found in Prepare* (its markers, then
Complete*), then runs the timers: timed-out transactions aborted with the epoch
bumped, expired transactional ids removed. Until loaded, FindCoordinator for a
transaction answers COORDINATOR_NOT_AVAILABLE and the other APIs
COORDINATOR_LOAD_IN_PROGRESS.

Failpoints (storage/failpoints.py, for crash tests): `txn.end.before_markers`
(the Prepare* is durable, no marker written), `txn.markers.after_one` (after each
marker's append), `txn.end.before_complete` (every marker written, no Complete*).

Thread safety: trio thread only; blocking log writes in a worker thread under
`_write_lock`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import trio

from broker import offload
from broker.group_service import GroupService
from broker.groups.messages import OffsetCommitRequest
from broker.logging import get_logger
from broker.transactions import records as rec
from broker.transactions.config import TxnConfig
from broker.transactions.coordinator import Refuse, TxnCoordinator, Write
from broker.transactions.state import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    TopicPartition,
    TxnMetadata,
    TxnState,
)
from broker.transactions.state_log import StateLog
from protocol.clock import ClockMs
from protocol.errors import TidelogError
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.offsets_schema import OFFSETS_TOPIC
from storage import failpoints
from storage.manager import LogManager

__all__ = ["COORDINATOR_EPOCH", "InitAnswer", "TransactionService"]

log = get_logger(component="transactions")

# The coordinator epoch written in every marker: one broker is the coordinator of
# every transactional id for good, so its epoch never changes.
COORDINATOR_EPOCH = 0
# The group's partition of `__consumer_offsets` a transaction's offsets go to.
OFFSETS_PARTITION: TopicPartition = (OFFSETS_TOPIC, 0)
# Longest sleep of the timer loop (the wall clock may jump; see broker/group_service.py).
MAX_TICK_SLEEP_S = 1.0


@dataclass(frozen=True, slots=True)
class InitAnswer:
    error: KafkaError
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH


class TransactionService:
    """One broker's transaction coordinator, its log and its timers."""

    def __init__(
        self,
        config: TxnConfig,
        manager: LogManager,
        groups: GroupService,
        clock_ms: ClockMs,
    ) -> None:
        self.config = config
        self._manager = manager
        self._groups = groups
        self._clock_ms = clock_ms
        self._log = StateLog(manager, config.log_segment_bytes)
        self.coordinator = TxnCoordinator(config, self._new_producer_id)
        # transactional id -> group -> the offsets its open transaction commits.
        self._pending: dict[str, dict[str, rec.PendingOffsets]] = {}
        self._locks: dict[str, trio.Lock] = {}
        self._write_lock = trio.Lock()
        self._load_lock = trio.Lock()
        self.loaded = False
        self.committed = 0  # transactions completed with COMMIT since start
        self.aborted = 0  # ... with ABORT (by the client, a re-init or the timeout)
        self.timed_out = 0  # aborted by the timeout
        self.failed_markers = 0  # marker rounds that failed (retried)
        self.malformed_records = 0
        self._serve_scope = trio.CancelScope()
        # KIP-890 part 1: the Kafka produce asks whether a transactional batch's
        # partition was added to its transaction.
        manager.txn_verifier = self._verify

    def _verify(
        self, tid: str, producer_id: int, epoch: int, topic: str, partition: int
    ) -> str | None:
        error = self.verify_partitions(tid, producer_id, epoch, [(topic, partition)])[
            (topic, partition)
        ]
        return None if error is KafkaError.NONE else error.name

    def _new_producer_id(self) -> int:
        # One fsync per block of ids (storage/producer_ids.py); no transactional id.
        return self._manager.producer_ids.init_producer_id().producer_id

    # --- load ---------------------------------------------------------------

    async def load(self) -> None:
        """Read `__transaction_state`, then finish every Prepare* transaction."""
        async with self._load_lock:
            if self.loaded:
                return
            read = await offload.to_worker(self._log.read_all)
            self.malformed_records = read.undecodable_records
            self._replay(read.records)
            self.loaded = True
            log.info(
                "transactions_loaded",
                ids=len(self.coordinator.txns),
                records=len(read.records),
                malformed=self.malformed_records,
                unreadable_ranges=read.unreadable_ranges,
            )
        await self._finish_all()

    def _replay(self, records: Iterable[tuple[bytes | None, bytes | None]]) -> None:
        metas: list[tuple[str, TxnMetadata | None]] = []
        for key, value in records:
            if key is None:
                self.malformed_records += 1
                continue
            try:
                if rec.key_version(key) == rec.PENDING_KEY_VERSION:
                    tid, group = rec.decode_pending_key(key)
                    groups = self._pending.setdefault(tid, {})
                    if value is None:
                        groups.pop(group, None)
                    else:
                        groups[group] = rec.decode_pending_value(value)[2]
                    continue
                tid = rec.decode_key(key)
                metas.append((tid, None if value is None else rec.decode_value(tid, value)))
            except (rec.RecordError, UnicodeDecodeError) as exc:
                self.malformed_records += 1
                log.error("txn_state_record_malformed", error=str(exc))
        self.coordinator.load(metas)
        for tid in list(self._pending):
            meta = self.coordinator.txns.get(tid)
            if meta is None or not meta.open or not self._pending[tid]:
                self._pending.pop(tid)  # its tombstones were not written: dropped here

    async def _ready(self) -> None:
        if not self.loaded:
            await self.load()

    # --- serve ----------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load, report started, then run the timers until cancelled."""
        await self.load()
        task_status.started()
        with self._serve_scope:
            await self._run_timers()

    def close(self) -> None:
        """Stop the timers (the broker is shutting down: no abort may write while the
        logs close); an open transaction stays open and is reloaded at the next start."""
        self._serve_scope.cancel()

    async def _run_timers(self) -> None:
        now = self._clock_ms()
        next_abort = now + self.config.abort_timed_out_interval_ms
        next_expire = now + self.config.remove_expired_interval_ms
        while True:
            now = self._clock_ms()
            wait_ms = max(0, min(next_abort, next_expire) - now)
            await trio.sleep(min(wait_ms / 1000, MAX_TICK_SLEEP_S))
            now = self._clock_ms()
            if now >= next_abort:
                next_abort = now + self.config.abort_timed_out_interval_ms
                await self.abort_timed_out()
                await self._finish_all()  # markers a storage error left owed
            if now >= next_expire:
                next_expire = now + self.config.remove_expired_interval_ms
                await self.remove_expired()

    async def abort_timed_out(self) -> None:
        for tid in self.coordinator.timed_out(self._clock_ms()):
            async with self._locked(tid):
                meta = self.coordinator.txns.get(tid)
                if meta is None or meta.state is not TxnState.ONGOING:
                    continue  # it ended while we waited for the lock
                log.info(
                    "transaction_timed_out", transactional_id=tid, producer_id=meta.producer_id
                )
                self.timed_out += 1
                await self._execute(self.coordinator.fence_and_abort(tid, self._clock_ms()))

    async def remove_expired(self) -> None:
        for tombstone in self.coordinator.expired(self._clock_ms()):
            tid = tombstone.transactional_id
            async with self._locked(tid):
                meta = self.coordinator.txns.get(tid)
                if meta is None or not meta.state.completed:
                    continue
                log.info("transactional_id_expired", transactional_id=tid)
                await self._execute(tombstone)

    # --- the machinery ----------------------------------------------------------

    @asynccontextmanager
    async def _locked(self, tid: str) -> AsyncIterator[None]:
        lock = self._locks.get(tid)
        if lock is None:
            lock = self._locks[tid] = trio.Lock()
        try:
            async with lock:
                yield
        finally:
            if not lock.locked() and lock.statistics().tasks_waiting == 0:
                self._locks.pop(tid, None)

    async def _write(self, entries: list[tuple[bytes, bytes | None]]) -> None:
        now = self._clock_ms()
        async with self._write_lock:
            await offload.to_worker(lambda: self._log.append(entries, now))

    @staticmethod
    def _entry(write: Write) -> tuple[bytes, bytes | None]:
        value = None if write.meta is None else rec.encode_value(write.meta)
        return rec.encode_key(write.transactional_id), value

    async def _execute(self, decision: Refuse | Write) -> KafkaError:
        """Write, apply and (for a Prepare*) finish `decision`; its answer."""
        if isinstance(decision, Refuse):
            return decision.error
        try:
            await self._write([self._entry(decision)])
        except TidelogError as exc:
            log.error("txn_state_write_failed", error=exc.code, message=str(exc))
            return KafkaError.COORDINATOR_NOT_AVAILABLE  # retriable: the client tries again
        self.coordinator.apply(decision)
        if decision.markers:
            await self._finish(decision.transactional_id)
        return decision.answer

    async def _finish_all(self) -> None:
        for tid in self.coordinator.preparing():
            async with self._locked(tid):
                meta = self.coordinator.txns.get(tid)
                if meta is not None and meta.state.preparing:
                    await self._finish(tid)

    async def _finish(self, tid: str) -> None:
        """The markers of a Prepare* transaction, then its Complete* value (caller holds
        the id's lock). A failure leaves it in Prepare*, retried by the timer."""
        meta = self.coordinator.txns[tid]
        commit = meta.state is TxnState.PREPARE_COMMIT
        try:
            for group, offsets in sorted(self._pending.get(tid, {}).items()):
                if commit and OFFSETS_PARTITION in meta.partitions:
                    await self._commit_offsets(group, offsets)
            failpoints.hit("txn.end.before_markers")
            data = sorted(tp for tp in meta.partitions if tp[0] != OFFSETS_TOPIC)
            now = self._clock_ms()
            await offload.to_worker(lambda: self._write_markers(meta, data, commit, now))
            failpoints.hit("txn.end.before_complete")
            done = self.coordinator.complete(tid, self._clock_ms())
            tombstones = [
                (rec.encode_pending_key(tid, group), None) for group in self._pending.get(tid, {})
            ]
            await self._write([self._entry(done), *tombstones])
        except TidelogError as exc:
            self.failed_markers += 1
            log.error("txn_markers_failed", transactional_id=tid, error=exc.code, message=str(exc))
            return
        self.coordinator.apply(done)
        self._pending.pop(tid, None)
        if commit:
            self.committed += 1
        else:
            self.aborted += 1
        log.info(
            "transaction_completed",
            transactional_id=tid,
            producer_id=meta.producer_id,
            producer_epoch=meta.producer_epoch,
            result="commit" if commit else "abort",
            partitions=len(meta.partitions),
        )

    async def _commit_offsets(self, group: str, offsets: rec.PendingOffsets) -> None:
        request = OffsetCommitRequest(group_id=group, offsets=offsets)
        result = await self._groups.call(lambda c: c.commit_offsets(request, fenced=False))
        if result.error is not None:
            raise TidelogError(f"group {group}: transactional offsets not written ({result.error})")

    def _write_markers(
        self, meta: TxnMetadata, partitions: list[TopicPartition], commit: bool, now_ms: int
    ) -> None:
        """One control batch per partition, then one flush of each (blocking)."""
        topics = self._manager.topics()
        written = []
        for topic, partition in partitions:
            if topic not in topics or partition >= self._manager.partition_count(topic):
                continue  # deleted since it was added: Kafka drops its marker too
            plog = self._manager.get_log(topic, partition)
            offset = plog.append_txn_marker(
                meta.producer_id,
                meta.producer_epoch,
                commit=commit,
                coordinator_epoch=COORDINATOR_EPOCH,
                append_time_ms=now_ms,
                sync=False,
            )
            written.append((plog, offset))
            failpoints.hit("txn.markers.after_one")
        for plog, offset in written:
            plog.flush(offset + 1)

    # --- the client's requests ------------------------------------------------------

    async def init_producer_id(
        self,
        tid: str,
        timeout_ms: int,
        producer_id: int = NO_PRODUCER_ID,
        producer_epoch: int = NO_PRODUCER_EPOCH,
    ) -> InitAnswer:
        if not self.loaded:
            return InitAnswer(KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
        async with self._locked(tid):
            decision = self.coordinator.init_producer_id(
                tid, timeout_ms, self._clock_ms(), producer_id, producer_epoch
            )
            error = await self._execute(decision)
            meta = self.coordinator.txns.get(tid)
            if error is not KafkaError.NONE or meta is None:
                return InitAnswer(error)
            return InitAnswer(error, meta.producer_id, meta.producer_epoch)

    async def add_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> KafkaError:
        if not self.loaded:
            return KafkaError.COORDINATOR_LOAD_IN_PROGRESS
        wanted = list(partitions)
        async with self._locked(tid):
            now = self._clock_ms()
            return await self._execute(
                self.coordinator.add_partitions(tid, producer_id, epoch, wanted, now)
            )

    def verify_partitions(
        self, tid: str, producer_id: int, epoch: int, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, KafkaError]:
        wanted = list(partitions)
        if not self.loaded:
            return dict.fromkeys(wanted, KafkaError.COORDINATOR_LOAD_IN_PROGRESS)
        return self.coordinator.verify_partitions(tid, producer_id, epoch, wanted)

    async def add_offsets(self, tid: str, producer_id: int, epoch: int, group: str) -> KafkaError:
        del group  # one `__consumer_offsets` partition holds every group
        return await self.add_partitions(tid, producer_id, epoch, [OFFSETS_PARTITION])

    async def txn_offset_commit(
        self,
        tid: str,
        producer_id: int,
        epoch: int,
        request: OffsetCommitRequest,
    ) -> KafkaError:
        """Hold `request`'s offsets as pending until the transaction ends (durably)."""
        if not self.loaded:
            return KafkaError.COORDINATOR_LOAD_IN_PROGRESS
        async with self._locked(tid):
            meta = self.coordinator.txns.get(tid)
            if meta is None or meta.producer_id != producer_id:
                return KafkaError.INVALID_PRODUCER_ID_MAPPING
            if meta.producer_epoch != epoch:
                return KafkaError.INVALID_PRODUCER_EPOCH  # the group coordinator's answer
            if meta.state is not TxnState.ONGOING or OFFSETS_PARTITION not in meta.partitions:
                return KafkaError.INVALID_TXN_STATE
            fenced = await self._groups.query(lambda c: c.txn_commit_error(request))
            if fenced is not None:
                return for_tidelog_code(fenced)
            offsets = {
                **self._pending.get(tid, {}).get(request.group_id, {}),
                **request.offsets,
            }
            value = rec.encode_pending_value(producer_id, epoch, offsets)
            try:
                await self._write([(rec.encode_pending_key(tid, request.group_id), value)])
            except TidelogError as exc:
                log.error("txn_state_write_failed", error=exc.code, message=str(exc))
                return KafkaError.COORDINATOR_NOT_AVAILABLE
            self._pending.setdefault(tid, {})[request.group_id] = offsets
            return KafkaError.NONE

    async def end_txn(self, tid: str, producer_id: int, epoch: int, commit: bool) -> KafkaError:
        if not self.loaded:
            return KafkaError.COORDINATOR_LOAD_IN_PROGRESS
        async with self._locked(tid):
            decision = self.coordinator.end_txn(tid, producer_id, epoch, commit, self._clock_ms())
            return await self._execute(decision)

    async def write_markers(
        self,
        producer_id: int,
        epoch: int,
        *,
        commit: bool,
        coordinator_epoch: int,
        partitions: Iterable[TopicPartition],
    ) -> dict[TopicPartition, KafkaError]:
        """WriteTxnMarkers from an admin: a marker on each partition (no coordinator
        state changes: the transaction it ends is one the coordinator lost or never
        had, e.g. a hanging one); durable before the answer."""
        wanted = list(partitions)
        now = self._clock_ms()

        def write() -> dict[TopicPartition, KafkaError]:
            return write_admin_markers(
                self._manager, wanted, producer_id, epoch, commit, coordinator_epoch, now
            )

        async with self._write_lock:
            return await offload.to_worker(write)

    # --- what the tools read ------------------------------------------------------------

    def producer_states(self, topic: str, partition: int) -> list[Any]:
        """The partition's active producers (storage's `producer_states()`)."""
        return list(self._manager.get_log(topic, partition).producer_states())

    def has_pending_offset(self, group: str, tp: TopicPartition) -> bool:
        """True while an open transaction holds an offset of `group` for `tp`
        (OffsetFetch's require_stable answers UNSTABLE_OFFSET_COMMIT)."""
        return any(tp in groups.get(group, {}) for groups in self._pending.values())

    def transactions(self) -> list[TxnMetadata]:
        return sorted(self.coordinator.txns.values(), key=lambda m: m.transactional_id)

    def describe(self, tid: str) -> TxnMetadata | None:
        return self.coordinator.txns.get(tid)

    def open_transactions(self) -> int:
        return sum(1 for meta in self.coordinator.txns.values() if meta.open)


def write_admin_markers(
    manager: LogManager,
    wanted: list[TopicPartition],
    producer_id: int,
    epoch: int,
    commit: bool,
    coordinator_epoch: int,
    now: int,
) -> dict[TopicPartition, KafkaError]:
    """WriteTxnMarkers' work in a worker thread: one marker per partition, each fsynced
    before it returns; a partition's error is its own."""
    errors: dict[TopicPartition, KafkaError] = {}
    topics = manager.topics()
    for topic, partition in wanted:
        if topic not in topics or not 0 <= partition < manager.partition_count(topic):
            errors[(topic, partition)] = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            continue
        plog = manager.get_log(topic, partition)
        try:
            plog.append_txn_marker(
                producer_id,
                epoch,
                commit=commit,
                coordinator_epoch=coordinator_epoch,
                append_time_ms=now,
            )
        except TidelogError as exc:
            errors[(topic, partition)] = for_tidelog_code(exc.code)
        else:
            errors[(topic, partition)] = KafkaError.NONE
    return errors
