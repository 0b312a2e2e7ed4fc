"""One partition's log: an ordered list of segments, the last one active.

Invariants: segment base offsets strictly increase and each segment's offsets
lie below the next base; `log_start_offset <= high_watermark == log_end_offset`
(single broker: every appended batch is committed); `recovery_point <=
log_end_offset` and everything below it has been fsynced; the producer state
(storage.producer_state) describes exactly the batches in [log_start_offset,
log_end_offset) (`map_end_offset == log_end_offset`), and a `<base>.snapshot` of the
state at the newest roll is written off the append path (the next flush, the broker's
`producer-snapshots` task within a second, a deletion of segments) and one at a clean close
(docs/idempotence.md).

Thread safety: every method may be called from any thread. Appends, rolls,
truncation and deletions hold `_lock`; `flush` holds it only to capture what to
fsync and to advance the recovery point, never during the fsync itself.
Readers take `_lock` just long enough to snapshot the segment list and the
active size, then read with `pread` outside it. Append listeners run after the
lock is released.

After a crash: see storage.recovery; a log is opened through `open_log`.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import structlog

from protocol.batch import (
    F_MAX_TIMESTAMP,
    set_base_offset,
    set_log_append_time,
)
from protocol.errors import (
    CorruptMessage,
    DuplicateSequenceNumber,
    MessageTooLarge,
    OffsetOutOfRange,
    PolicyViolation,
    StorageError,
    UnknownTopicOrPartition,
)
from storage import failpoints
from storage.cleaned import CleanedSegmentWriter
from storage.config import INT_MAX, LogConfig
from storage.fdbudget import FDS_PER_ACTIVE_SEGMENT, FdBudget
from storage.fileio import FileIO
from storage.files import DeletionQueue, log_path
from storage.producer_log import rebuild_producer_state
from storage.producer_snapshot import delete_snapshots_below, snapshot_path, write_snapshot
from storage.producer_state import Duplicate, ProducerEntry, ProducerState
from storage.read_plan import read_bytes, read_records
from storage.record_source import RecordSource
from storage.scan import first_batch_fields, iter_batch_fields
from storage.segment import Segment, SegmentInfo, TornAppendError
from storage.swap import promote_swap_files, rename_cleaned_to_swap
from storage.validator import LogValidator

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
    records: bytes
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class Location:
    """`Log.locate`'s answer: `Log.read`'s, with a large read's records as a
    `RecordSource` (a span of the segment file) rather than bytes."""

    records: bytes | RecordSource
    high_watermark: int
    log_start_offset: int


@dataclass(frozen=True, slots=True)
class LogStatistics:
    log_start_offset: int
    log_end_offset: int
    recovery_point: int
    size_bytes: int
    segment_count: int
    poisoned: bool


class Log:
    """A partition log. Build it with `storage.recovery.open_log` (or `Log.create_new`)."""

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
        if not segments:
            raise ValueError("a log needs at least one segment")
        self.directory = directory
        self.topic = topic
        self.partition = partition
        self.config = config
        self._validator = LogValidator(topic, partition)
        self._io = io
        self._clock_ms = clock_ms
        self._deletions = deletion_queue
        self._lock = threading.Lock()
        self._flush_lock = threading.Lock()
        self._segments = list(segments)  # replaced, never mutated: readers may hold it
        for segment in segments:
            segment.fence_listener = self._segment_fenced
        self._bases = [s.base_offset for s in segments]
        self._log_start_offset = log_start_offset
        self._recovery_point = recovery_point
        self._last_flush_ms = clock_ms()
        self._dir_dirty = dir_dirty
        # The producer state at the newest roll, not yet written: creating a file is
        # a roll's dearest step (~0.2 ms, a third of it), so the append path only
        # keeps the state; `write_pending_snapshot` (the broker's `producer-snapshots`
        # task, a flush, a deletion of segments) writes it. Only the newest: an older
        # roll's snapshot only shortens a rebuild that the newer one shortens more.
        self._pending_snapshot: tuple[int, dict[int, ProducerEntry]] | None = None
        # The newest snapshot written without its fsyncs; the next flush (or a
        # deletion of segments) makes it durable. A power cut before that costs a
        # longer rebuild scan, never state.
        self._unsynced_snapshot: Path | None = None
        self._poisoned: str | None = None
        self._deleted = False
        # Set by recovery when the log was opened: what the last start had to repair.
        self.recovery_truncated_bytes = 0
        self.quarantined_segments = 0
        # Rolls skipped because the fd budget was spent (issue 23, finding 1).
        self._fd_budget = fd_budget
        self.rolls_deferred = 0
        self._roll_deferred = False
        self._listeners: list[AppendListener] = []
        self._log = log.bind(topic=topic, partition=partition)
        if producer_state is None:
            producer_state = ProducerState(
                f"{topic}-{partition}",
                expiration_ms=config.producer_id_expiration_ms,
                map_end_offset=segments[-1].next_offset,
            )
        self._producers = producer_state

    # ---- state -----------------------------------------------------------

    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def log_end_offset(self) -> int:
        return self._segments[-1].next_offset

    @property
    def high_watermark(self) -> int:
        """Single broker: every appended batch is committed, so HW = LEO."""
        return self.log_end_offset

    @property
    def recovery_point(self) -> int:
        return self._recovery_point

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def segment_count(self) -> int:
        return len(self._segments)

    @property
    def active_segment(self) -> Segment:
        return self._segments[-1]

    @property
    def fenced_segments(self) -> int:
        """Segments with a fenced (damaged) range: found by recovery or by a read."""
        return sum(1 for s in self._segments if s.fence_position is not None)

    @property
    def poisoned(self) -> bool:
        return self._poisoned is not None

    def statistics(self) -> LogStatistics:
        with self._lock:
            return LogStatistics(
                self._log_start_offset,
                self.log_end_offset,
                self._recovery_point,
                self.size_bytes,
                len(self._segments),
                self.poisoned,
            )

    def add_append_listener(self, listener: AppendListener) -> None:
        """Call `listener(log)` after every successful append, outside the lock."""
        self._listeners.append(listener)

    def remove_append_listener(self, listener: AppendListener) -> None:
        self._listeners.remove(listener)

    # ---- append ----------------------------------------------------------

    def append(self, records: bytes | bytearray | memoryview) -> AppendInfo:
        """Validate, assign offsets and write all batches with one write (all or nothing).

        Raises CorruptMessage / InvalidRecord / InvalidTimestamp / MessageTooLarge for
        bad input (nothing written) and StorageError when the disk fails.
        """
        self._check_writable()
        buf = bytearray(records)
        now_ms = self._clock_ms()
        batches = self._validator.validate(buf, self.config, now_ms)
        if len(buf) > self.config.segment_bytes:
            raise MessageTooLarge(
                f"{self.topic}-{self.partition}: {len(buf)} bytes in one append exceed "
                f"segment.bytes {self.config.segment_bytes}"
            )
        log_append_time = now_ms if self.config.log_append_time else -1
        with self._lock:
            self._check_writable()
            if not batches:
                leo = self.log_end_offset
                return AppendInfo(leo, leo - 1, log_append_time, self._log_start_offset)
            first = offset = self.log_end_offset
            max_ts, offset_of_max_ts = -1, -1
            pending = None
            for pos, count, batch_max_ts, producer_id, epoch, sequence in batches:
                if log_append_time >= 0:
                    batch_max_ts = log_append_time
                if producer_id >= 0:  # idempotent: checked before anything is written
                    if pending is None:
                        pending = self._producers.begin_append()
                    outcome = pending.check(
                        producer_id, epoch, sequence, count - 1, batch_max_ts, offset
                    )
                    if type(outcome) is Duplicate:
                        if len(batches) > 1:
                            raise DuplicateSequenceNumber(
                                f"{self.topic}-{self.partition}: producer {producer_id} "
                                f"resent sequence {sequence} with other batches; a retried "
                                "batch must be sent alone to be answered with its offsets"
                            )
                        return self._duplicate(outcome, log_append_time)
                set_base_offset(buf, pos, offset)
                if log_append_time >= 0:
                    set_log_append_time(buf, pos, log_append_time)
                offset += count
                if batch_max_ts > max_ts:
                    max_ts, offset_of_max_ts = batch_max_ts, offset - 1
            last = offset - 1
            segment = self._maybe_roll(len(buf), max_ts, last, now_ms)
            try:
                segment.append(
                    buf,
                    last_offset=last,
                    max_timestamp=max_ts,
                    offset_of_max_timestamp=offset_of_max_ts,
                    index_interval_bytes=self.config.index_interval_bytes,
                )
            except TornAppendError as exc:
                self._poisoned = f"a failed write could not be cut back: {exc}"
                self._on_write_error("append", segment.log_path, exc)
            except OSError as exc:
                self._on_write_error("append", segment.log_path, exc)
            if pending is None:
                self._producers.map_end_offset = offset
            else:
                self._producers.commit(pending, offset)
            failpoints.hit("log.append.after_index")
            self._assert_invariants()
            info = AppendInfo(
                first,
                last,
                log_append_time,
                self._log_start_offset,
                self._flush_due(now_ms),
            )
        for listener in list(self._listeners):
            listener(self)
        return info

    def _duplicate(self, duplicate: Duplicate, log_append_time: int) -> AppendInfo:
        """Kafka's answer to a retried batch: its original offsets (and the time stamped
        then, on a LogAppendTime topic), nothing appended."""
        batch = duplicate.batch
        self._log.info(
            "produce_duplicate",
            producer_id=duplicate.producer_id,
            first_sequence=batch.first_sequence,
            base_offset=batch.first_offset,
        )
        return AppendInfo(
            batch.first_offset,
            batch.last_offset,
            batch.max_timestamp if log_append_time >= 0 else -1,
            self._log_start_offset,
            duplicate=True,
        )

    def _assert_invariants(self) -> None:
        """The module doc's invariants where append, roll and flush can break them (under
        `_lock`; O(1): only the newest two segments can have changed). A failure is a bug
        in this module, never the environment's doing: disk errors raise StorageError."""
        segments = self._segments
        end = segments[-1].next_offset
        if len(segments) > 1:
            before, last = segments[-2], segments[-1]
            assert before.base_offset < last.base_offset, (
                f"{self.topic}-{self.partition}: base offsets {before.base_offset} then "
                f"{last.base_offset}"
            )
            assert before.next_offset <= last.base_offset, (
                f"{self.topic}-{self.partition}: segment {before.base_offset} ends at "
                f"{before.next_offset}, past the next base {last.base_offset}"
            )
        assert self._log_start_offset <= end, (
            f"{self.topic}-{self.partition}: log start {self._log_start_offset} > end {end}"
        )
        assert self._recovery_point <= end, (
            f"{self.topic}-{self.partition}: recovery point {self._recovery_point} > end {end}"
        )
        assert self._producers.map_end_offset == end, (
            f"{self.topic}-{self.partition}: producer state ends at "
            f"{self._producers.map_end_offset}, the log at {end}"
        )

    def _check_writable(self) -> None:
        if self._deleted:
            raise UnknownTopicOrPartition(f"{self.topic}-{self.partition} was deleted")
        if self._poisoned is not None:
            raise StorageError(
                f"{self.topic}-{self.partition} takes no writes until restart: {self._poisoned}"
            )

    def _on_write_error(self, operation: str, path: Path, exc: OSError) -> NoReturn:
        """Log a failed write and raise StorageError (the caller decides about poisoning)."""
        self._log.error("storage_error", operation=operation, path=str(path), errno=exc.errno)
        raise StorageError(f"{operation} failed on {path}: {exc.strerror or exc}") from exc

    def _flush_due(self, now_ms: int) -> bool:
        unflushed = self.log_end_offset - self._recovery_point
        if unflushed <= 0:
            return False
        if unflushed >= self.config.flush_messages:
            return True
        return now_ms - self._last_flush_ms >= self.config.flush_ms

    def flush_needed(self, now_ms: int | None = None) -> bool:
        """Whether flush.messages or flush.ms ask for an fsync now (the broker's flush task)."""
        with self._lock:
            return self._flush_due(self._clock_ms() if now_ms is None else now_ms)

    # ---- roll ------------------------------------------------------------

    def _maybe_roll(self, chunk_bytes: int, max_ts: int, last_offset: int, now_ms: int) -> Segment:
        active = self._segments[-1]
        reason = active.should_roll(
            self.config,
            chunk_bytes=chunk_bytes,
            chunk_max_timestamp=max_ts,
            chunk_last_offset=last_offset,
            now_ms=now_ms,
        )
        if reason is None:
            return active
        budget = self._fd_budget
        if budget is not None and not budget.allows(FDS_PER_ACTIVE_SEGMENT):
            return self._defer_roll(reason, active, chunk_bytes, budget)
        return self._roll_locked(reason, now_ms)

    def _defer_roll(
        self, reason: str, active: Segment, chunk_bytes: int, budget: FdBudget
    ) -> Segment:
        """No descriptors for a new segment: the active one takes the chunk while its
        positions and relative offsets still fit an int32 (a full index only stops
        taking entries: lookups scan further), else the append fails retriably."""
        if reason == "relative_offset_overflow" or active.size + chunk_bytes > INT_MAX:
            raise StorageError(
                f"{self.topic}-{self.partition}: a new segment is needed ({reason}) but the "
                f"file descriptor budget is spent: {budget.describe()}"
            )
        self.rolls_deferred += 1
        if not self._roll_deferred:
            self._roll_deferred = True
            self._log.warning(
                "segment_roll_deferred",
                reason=reason,
                base_offset=active.base_offset,
                budget=budget.describe(),
            )
        return active

    def _roll_locked(self, reason: str, now_ms: int) -> Segment:
        active = self._segments[-1]
        new_base = self.log_end_offset
        if active.size == 0:
            return active  # an empty active segment is already a fresh one
        failpoints.hit("log.roll.before_new_segment")
        try:
            # The new segment first: if the disk is full the old one stays active and
            # untouched, and a later append retries the roll once space is freed.
            segment = Segment.create(self.directory, new_base, self._io, self.config, now_ms=now_ms)
        except OSError as exc:
            self._on_write_error("roll", active.log_path, exc)
        failpoints.hit("log.roll.after_new_log")
        try:
            active.become_inactive()
        except OSError as exc:  # untrimmed indexes are harmless: the next open trims them
            self._log.warning("index_trim_failed", path=str(active.log_path), errno=exc.errno)
        failpoints.hit("log.roll.after_old_trimmed")
        segment.fence_listener = self._segment_fenced
        self._segments = [*self._segments, segment]
        self._bases = [*self._bases, new_base]
        self._dir_dirty = True
        self._roll_deferred = False
        self._assert_invariants()
        # Kafka's roll takes the snapshot here (without fsync); the file waits too.
        self._pending_snapshot = (self._producers.map_end_offset, self._producers.entries())
        self._log.info(
            "segment_rolled",
            reason=reason,
            base_offset=new_base,
            previous_base_offset=active.base_offset,
            previous_bytes=active.size,
            path=str(segment.log_path),
        )
        return segment

    def _snapshot_producers(self, when: str) -> None:
        """Write `<log end>.snapshot` with its fsyncs (under `_lock`: a clean close)."""
        self._write_snapshot(
            when, self._producers.map_end_offset, self._producers.entries(), sync=True
        )

    def _write_snapshot(
        self, when: str, offset: int, entries: dict[int, ProducerEntry], *, sync: bool
    ) -> None:
        """A failure is logged, not raised: the state is still in memory, and a restart
        rebuilds it from an older snapshot and the log, only with a longer scan.
        `sync=False` leaves its fsyncs to the next flush (Kafka's `takeSnapshot(sync =
        false)`)."""
        try:
            path = write_snapshot(self._io, self.directory, offset, entries, sync=sync)
            if not sync:
                self._unsynced_snapshot = path
                self._dir_dirty = True
        except OSError as exc:
            self._log.warning("producer_snapshot_failed", when=when, offset=offset, errno=exc.errno)

    def _write_pending_snapshot_locked(self) -> None:
        pending, self._pending_snapshot = self._pending_snapshot, None
        if pending is not None:
            self._write_snapshot("roll", *pending, sync=False)

    def write_pending_snapshot(self) -> bool:
        """Write the snapshot of the newest roll if it waits (without fsync: the next
        flush makes it durable); the broker's `producer-snapshots` task calls this every
        second, off the event loop. Returns whether one was written."""
        with self._lock:
            if self._pending_snapshot is None or self._deleted:
                return False
            self._write_pending_snapshot_locked()
            return True

    # ---- producer state ----------------------------------------------------

    def producer_entry(self, producer_id: int) -> ProducerEntry | None:
        """What this partition remembers of an idempotent producer (None: unknown)."""
        with self._lock:
            return self._producers.entry(producer_id)

    def producer_batch_ends(self) -> frozenset[int]:
        """The last offset of each known producer's newest batch: the batches the cleaner
        keeps whole so a rebuilt producer state still finds them."""
        with self._lock:
            return frozenset(e.last_offset for e in self._producers.entries().values())

    def producer_count(self) -> int:
        with self._lock:
            return len(self._producers)

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for producer.id.expiration.ms; returns how many."""
        with self._lock:
            now = self._clock_ms() if now_ms is None else now_ms
            self._producers.expiration_ms = self.config.producer_id_expiration_ms
            removed = self._producers.remove_expired(now)
        if removed:
            self._log.info("producers_expired", count=removed)
        return removed

    def roll(self) -> None:
        """Start a new active segment at the log end offset (no-op when the active one is empty)."""
        self._check_writable()
        with self._lock:
            self._roll_locked("requested", self._clock_ms())

    # ---- flush -----------------------------------------------------------

    def flush(self, up_to: int | None = None) -> None:
        """fsync everything below `up_to` (default: the log end) and advance the recovery point.

        The append lock is held only to pick the segments; the fsync runs without
        it, so appends continue meanwhile. An fsync error poisons the log.
        """
        with self._flush_lock:
            with self._lock:
                target = self.log_end_offset if up_to is None else min(up_to, self.log_end_offset)
                if target <= self._recovery_point and not self._dir_dirty:
                    return
                segments = [
                    s
                    for s in self._segments
                    if s.next_offset > self._recovery_point and s.base_offset < target
                ]
                self._write_pending_snapshot_locked()
                dir_dirty, self._dir_dirty = self._dir_dirty, False
                snapshot, self._unsynced_snapshot = self._unsynced_snapshot, None
            try:
                failpoints.hit("log.flush.before_fsync")
                for segment in segments:
                    segment.flush()
                self._sync_snapshot(snapshot)
                if dir_dirty:
                    self._io.fsync_dir(self.directory)
                failpoints.hit("log.flush.after_fsync")
            except OSError as exc:
                self._poisoned = f"fsync failed: {exc}"
                self._log.error("storage_error", operation="fsync", errno=exc.errno)
                raise StorageError(
                    f"{self.topic}-{self.partition}: fsync failed ({exc.strerror or exc}); "
                    "the partition takes no writes until restart"
                ) from exc
            with self._lock:
                self._recovery_point = max(self._recovery_point, target)
                self._last_flush_ms = self._clock_ms()
                self._assert_invariants()

    # ---- read ------------------------------------------------------------

    def _snapshot(self) -> tuple[list[Segment], list[int], int, int, int]:
        with self._lock:
            segments = self._segments
            return (
                segments,
                self._bases,
                segments[-1].size,
                self._log_start_offset,
                segments[-1].next_offset,
            )

    def read(self, offset: int, max_bytes: int, *, min_one: bool = True) -> FetchData:
        """Whole batches from the one holding `offset`, up to `max_bytes` (at least one batch).

        Reads come from one segment. OffsetOutOfRange below the log start or
        above the high watermark; empty at the high watermark. CorruptMessage
        for a fenced (damaged) range.
        """
        found, hw, start = self._extent(offset, max_bytes, min_one)
        if found is None:
            return FetchData(b"", hw, start)
        try:
            return FetchData(read_bytes(*found), hw, start)
        except OSError as exc:
            raise self._read_error(exc) from exc

    def locate(
        self, offset: int, max_bytes: int, *, min_one: bool = True, max_batches: int | None = None
    ) -> Location:
        """`read`, with a large answer as a `RecordSource` the broker sends from the file
        (sendfile, local reads); same batches and errors. With `max_batches`, a span
        whose header walk would pass more batches raises ReadWouldWait first (the event
        loop's budget; see `broker.handlers.fetch`)."""
        found, hw, start = self._extent(offset, max_bytes, min_one)
        if found is None:
            return Location(b"", hw, start)
        try:
            return Location(read_records(*found, max_batches=max_batches), hw, start)
        except OSError as exc:
            raise self._read_error(exc) from exc

    def _extent(
        self, offset: int, max_bytes: int, min_one: bool
    ) -> tuple[tuple[Segment, int, int, bool] | None, int, int]:
        """((segment, position, stop, whole) of the read, or None: nothing at the
        offset yet), the high watermark and the log start."""
        segments, bases, active_size, start, hw = self._snapshot()
        if offset < start or offset > hw:
            raise OffsetOutOfRange(
                f"{self.topic}-{self.partition}: offset {offset} is outside [{start}, {hw}]"
            )
        index = max(bisect.bisect_right(bases, offset) - 1, 0)
        last = len(segments) - 1
        try:
            for i in range(index, len(segments)):
                segment = segments[i]
                end = active_size if i == last else segment.size
                found = segment.extent(offset, max_bytes, end, min_one=min_one)
                if found is not None:
                    return (segment, *found), hw, start
        except OSError as exc:
            raise self._read_error(exc) from exc
        if offset < hw and "compact" not in self.config.cleanup_policy:
            # Only compaction leaves offsets no batch holds: an empty answer here would
            # stall a consumer below the high watermark for good.
            raise CorruptMessage(
                f"{self.topic}-{self.partition}: no batch holds offset {offset} or a later "
                f"one although the high watermark is {hw}: the log has a hole"
            )
        return None, hw, start

    def _segment_fenced(self, segment: Segment) -> None:
        """A read fenced `segment` to its end: if it is the active one, roll, so what is
        appended from now on lands outside the fenced range and stays readable."""
        with self._lock:
            if segment is not self._segments[-1] or self._deleted or self._poisoned:
                return
            try:
                self._roll_locked("fenced", self._clock_ms())
            except StorageError:
                pass  # logged by the roll; the next fenced read tries again

    def _read_error(self, exc: OSError) -> StorageError:
        self._log.error("storage_error", operation="read", errno=exc.errno)
        return StorageError(f"{self.topic}-{self.partition}: read failed ({exc.strerror or exc})")

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after the log start with a
        timestamp >= `timestamp`, or None. Out-of-order timestamps are handled as
        Kafka does: the time index only narrows where the scan starts."""
        segments, _, _, start, hw = self._snapshot()
        for segment in segments:
            if segment.max_timestamp < timestamp or segment.next_offset <= start:
                continue
            try:
                found = segment.find_offset_by_timestamp(timestamp, start, hw)
            except OSError as exc:
                raise self._read_error(exc) from exc
            if found is not None:
                return found
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp, or None."""
        segments, _, _, start, _ = self._snapshot()
        best: Segment | None = None
        for segment in segments:
            if segment.next_offset > start and (
                best is None or segment.max_timestamp > best.max_timestamp
            ):
                best = segment
        if best is None or best.max_timestamp < 0 or best.offset_of_max_timestamp < 0:
            return None
        try:
            offset = best.first_offset_with_timestamp(
                best.offset_of_max_timestamp, best.max_timestamp
            )
        except OSError as exc:
            raise self._read_error(exc) from exc
        if offset is None:
            return None
        return max(offset, start), best.max_timestamp

    # ---- moving the start and the end ---------------------------------------

    def delete_records(self, offset: int) -> int:
        """Raise the log start offset to `offset` (-1 = the high watermark); returns it."""
        if "delete" not in self.config.cleanup_policy:
            raise PolicyViolation(
                f"{self.topic}: delete_records needs cleanup.policy to include delete"
            )
        with self._lock:
            hw = self.high_watermark
            target = hw if offset == -1 else offset
            if target < 0 or target > hw:
                raise OffsetOutOfRange(
                    f"{self.topic}-{self.partition}: delete_records offset {offset} "
                    f"is outside [0, {hw}]"
                )
            if target > self._log_start_offset:
                self._log_start_offset = target
                self._producers.truncate_head(target)
                self._log.info("log_start_offset_raised", offset=target, reason="delete_records")
            return self._log_start_offset

    def truncate_to(self, offset: int) -> None:
        """Remove every batch at or after the one holding `offset` (testing, operators)."""
        with self._lock:
            if offset >= self.log_end_offset:
                return
            keep = [s for s in self._segments if s.base_offset < offset] or [self._segments[0]]
            drop = self._segments[len(keep) :]
            try:
                removed = keep[-1].truncate_to(offset)
                keep[-1].resize_indexes(self.config.segment_index_bytes)
            except OSError as exc:
                self._poisoned = f"truncate failed: {exc}"
                self._on_write_error("truncate", keep[-1].log_path, exc)
            self._segments = keep
            self._bases = [s.base_offset for s in keep]
            self._schedule_deletion(drop)
            self._recovery_point = min(self._recovery_point, self.log_end_offset)
            self._log_start_offset = min(self._log_start_offset, self.log_end_offset)
            if self._pending_snapshot and self._pending_snapshot[0] > self.log_end_offset:
                self._pending_snapshot = None  # a state the truncation took back
            self._write_pending_snapshot_locked()  # the rebuild below starts from it
            self._producers = rebuild_producer_state(
                self._io,
                self.directory,
                keep,
                self.config,
                name=self._producers.name,
                log_start_offset=self._log_start_offset,
                now_ms=self._clock_ms(),
            )
            self._log.info(
                "log_truncated", offset=offset, bytes=removed, end_offset=self.log_end_offset
            )

    # ---- segments for retention and compaction ----------------------------

    def segments_info(self) -> list[SegmentInfo]:
        with self._lock:
            segments = self._segments
        last = len(segments) - 1
        return [s.info(is_active=i == last) for i, s in enumerate(segments)]

    def delete_oldest_segments(self, count: int, reason: str) -> list[SegmentInfo]:
        """Remove the first `count` segments: raise the log start to the next base, rename
        their files `.deleted` and queue them for unlinking after file.delete.delay.ms.

        If every segment goes, roll first so an (empty) active segment remains.
        """
        with self._lock:
            count = min(count, len(self._segments))
            if count <= 0:
                return []
            if count == len(self._segments):
                if self._segments[-1].size == 0:
                    count -= 1
                else:
                    self._roll_locked("delete_all_segments", self._clock_ms())
            if count <= 0:
                return []
            victims = self._segments[:count]
            self._segments = self._segments[count:]
            self._bases = self._bases[count:]
            new_start = self._segments[0].base_offset
            if new_start > self._log_start_offset:
                self._log_start_offset = new_start
            self._recovery_point = max(self._recovery_point, self._log_start_offset)
            infos = [s.info(is_active=False) for s in victims]
            self._schedule_deletion(victims)
            self._producers.truncate_head(self._log_start_offset)
            self._sync_snapshot_before_deletion()
            self._delete_snapshots_below(new_start)
            for info in infos:
                self._log.info(
                    "segment_deleted",
                    reason=reason,
                    base_offset=info.base_offset,
                    next_offset=info.next_offset,
                    bytes=info.size_bytes,
                    log_start_offset=self._log_start_offset,
                )
            return infos

    def _sync_snapshot(self, path: Path | None) -> None:
        """fsync a snapshot written at a roll (its directory entry: the caller's directory
        fsync). A failure is logged: a torn snapshot costs a longer scan."""
        if path is None:
            return
        try:
            self._io.fsync_file(path)
        except FileNotFoundError:
            pass  # deleted since (retention, a newer snapshot at the same offset)
        except OSError as exc:
            self._log.warning("producer_snapshot_fsync_failed", path=str(path), errno=exc.errno)

    def _sync_snapshot_before_deletion(self) -> None:
        """Under `_lock`, before segments go: the newest snapshot must survive a power
        cut, for the older ones are deleted with the segments and a restart would
        otherwise forget producers whose batches lived only there."""
        self._write_pending_snapshot_locked()
        snapshot, self._unsynced_snapshot = self._unsynced_snapshot, None
        if snapshot is None:
            return
        self._sync_snapshot(snapshot)
        try:
            self._io.fsync_dir(self.directory)
        except OSError as exc:
            self._unsynced_snapshot = self._unsynced_snapshot or snapshot
            self._log.warning(
                "producer_snapshot_fsync_failed", path=str(self.directory), errno=exc.errno
            )

    def _delete_snapshots_below(self, offset: int) -> None:
        """The producer snapshots of deleted segments go with them (Kafka's
        deleteProducerSnapshots); a failure leaves strays the next open removes."""
        try:
            delete_snapshots_below(self._io, self.directory, offset)
        except OSError as exc:
            self._log.warning("producer_snapshot_delete_failed", offset=offset, errno=exc.errno)

    def _schedule_deletion(self, segments: list[Segment]) -> None:
        paths: list[Path] = []
        try:
            for segment in segments:
                paths += segment.rename_to_deleted()
                segment.release_writers()
        except OSError as exc:
            self._log.error("storage_error", operation="rename_deleted", errno=exc.errno)
            raise StorageError(f"renaming deleted segments failed: {exc}") from exc
        failpoints.hit("log.delete_segments.after_rename")
        self._deletions.add(paths, self._clock_ms() + self.config.file_delete_delay_ms)

    # ---- the cleaner's door ----------------------------------------------

    def segment_batches(
        self, base_offset: int, *, chunk_bytes: int, on_read: Callable[[int], None] | None = None
    ) -> Iterator[tuple[memoryview, tuple[int, ...]]]:
        """(bytes, raw header fields; `protocol.batch.F_*` index them) of each batch of the
        closed segment at `base_offset`, CRC-checked (CorruptMessage on damage), read in
        chunks of `chunk_bytes`; FileNotFoundError if the segment was replaced meanwhile."""
        return iter_batch_fields(
            self._io,
            log_path(self.directory, base_offset),
            chunk_bytes=chunk_bytes,
            on_read=on_read,
        )

    def first_batch_timestamp_ms(self, base_offset: int) -> int:
        """Max timestamp of a segment's first batch (Kafka's getFirstBatchTimestamp), or -1."""
        fields = first_batch_fields(self._io, log_path(self.directory, base_offset))
        return -1 if fields is None else fields[F_MAX_TIMESTAMP]

    def cleaned_segment_writer(
        self, base_offset: int, *, buffer_bytes: int, on_write: Callable[[int], None] | None = None
    ) -> CleanedSegmentWriter:
        """A writer of the `.cleaned` segment at `base_offset`, in this log's formats and
        index settings, for `replace_segments` to swap in."""
        return CleanedSegmentWriter(
            self.directory,
            base_offset,
            self._io,
            index_interval_bytes=self.config.index_interval_bytes,
            index_bytes=self.config.segment_index_bytes,
            buffer_bytes=buffer_bytes,
            on_write=on_write,
        )

    def replace_segments(self, old_bases: list[int], new_bases: list[int]) -> None:
        """Swap cleaned segments in for `old_bases` crash-safely (KAFKA_SEMANTICS §7.4).

        The cleaner has written and fsynced `<base>.log.cleaned` files (indexes
        optional: they are rebuilt if missing) for each of `new_bases`, covering
        exactly the offsets of the old run. Steps: `.cleaned` -> `.swap`
        (descending), old files -> `.deleted`, `.swap` -> final, fsync the
        directory. Recovery finishes or rolls back a crash at any step.
        """
        with self._lock:
            self._check_writable()
            positions = [self._bases.index(b) for b in old_bases]
            if (
                not positions
                or positions != list(range(positions[0], positions[0] + len(positions)))
                or positions[-1] == len(self._segments) - 1
            ):
                raise ValueError(f"segments {old_bases} are not a run of inactive segments")
            old = [self._segments[i] for i in positions]
            try:
                rename_cleaned_to_swap(self._io, self.directory, sorted(new_bases, reverse=True))
                failpoints.hit("replace_segments.after_swap_rename")
                self._schedule_deletion(old)
                failpoints.hit("replace_segments.after_old_deleted")
                new = promote_swap_files(self._io, self.directory, self.config, self._clock_ms())
            except OSError as exc:
                self._poisoned = f"segment swap failed: {exc}"
                self._on_write_error("replace_segments", self.directory, exc)
            first = positions[0]
            for segment in new:
                segment.fence_listener = self._segment_fenced
            segments = self._segments[:first] + new + self._segments[first + len(old) :]
            self._segments = segments
            self._bases = [s.base_offset for s in segments]
            self._delete_merged_snapshots(set(old_bases) - set(self._bases))
            self._log.info("segments_replaced", old=old_bases, new=[s.base_offset for s in new])

    def _delete_merged_snapshots(self, bases: set[int]) -> None:
        """Kafka's deleteProducerSnapshots for segments the cleaner merged away: their
        snapshots match no segment any more (an open removes such strays too), and a
        compacted topic rolling often would otherwise gather one file per roll."""
        for base in sorted(bases):
            try:
                self._io.unlink(snapshot_path(self.directory, base))
            except FileNotFoundError:
                pass  # none was written at that roll (or a restart removed it)
            except OSError as exc:  # a stray the next open removes
                self._log.warning("producer_snapshot_delete_failed", offset=base, errno=exc.errno)

    def mark_deleted(self) -> None:
        """Its topic was deleted: later appends fail, readers already inside finish."""
        with self._lock:
            self._deleted = True

    # ---- shutdown --------------------------------------------------------

    def close(self) -> None:
        """Flush, write the final time entry, trim the indexes and close every file."""
        if self._poisoned is None:
            self.flush()
        with self._lock:
            if self._poisoned is None and not self._deleted:
                self._snapshot_producers("close")
            self._segments[-1].become_inactive()
            for segment in self._segments:
                segment.close()
