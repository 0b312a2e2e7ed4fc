"""One partition's segments on local disk: Kafka's LocalLog.

The segment list (base offsets strictly increase, each segment's offsets lie below
the next base, the last segment is the active one), the recovery point (everything
below it is fsynced), and every change to the files: an append's write, a roll
(which asks the descriptor budget first), the fsyncs, truncation, deletion and the
cleaner's replacement; and the reads that find where an offset lies. Offsets, the
log start, the producer state and the lock belong to `storage.log.Log`.

A failure that leaves the files in an unknown state (an append that could not be cut
back, a failed fsync, truncation or segment swap) poisons the log: `poisoned` says
why, and the log takes no writes until a restart.

Thread safety: none of its own; `Log` calls every method under its lock, except the
reads of a `SegmentView` (taken under the lock; segments are replaced, never mutated)
and `fsync`, which runs outside it.
"""

from __future__ import annotations

import weakref
from bisect import bisect_right
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple, NoReturn

import structlog

from protocol.batch import BOTH_LAYOUTS, F_MAX_TIMESTAMP
from protocol.errors import CorruptMessage, StorageError
from storage import failpoints
from storage.cleaned import CleanedSegmentWriter
from storage.config import INT_MAX, LogConfig
from storage.fdbudget import FDS_PER_ACTIVE_SEGMENT, FdBudget
from storage.fileio import FileIO
from storage.files import DeletionQueue, log_path
from storage.read_plan import read_bytes, read_records
from storage.record_source import RecordSource
from storage.scan import first_batch_fields, iter_batch_fields
from storage.segment import Segment, SegmentInfo, TornAppendError
from storage.segment_roll import should_roll
from storage.segment_time import max_timestamp_offset, offset_for_timestamp
from storage.swap import promote_swap_files, rename_cleaned_to_swap

log = structlog.get_logger("tidelog.storage")

# Where a read lies: (segment, position, stop, whole) as `Segment.extent` says.
Found = tuple[Segment, int, int, bool]
# What a read found: its records, and the layouts of their batches (a bitmask).
Read = tuple[bytes | RecordSource, int]


class SegmentView(NamedTuple):
    """The segment list as one read sees it, with the active segment's size then."""

    segments: list[Segment]
    bases: list[int]
    active_size: int

    def infos(self) -> list[SegmentInfo]:
        last = len(self.segments) - 1
        return [s.info(is_active=i == last) for i, s in enumerate(self.segments)]


class LocalLog:
    """The segments of one partition directory and the files' state."""

    def __init__(
        self,
        directory: Path,
        topic: str,
        partition: int,
        config: LogConfig,
        segments: list[Segment],
        *,
        recovery_point: int,
        io: FileIO,
        clock_ms: Callable[[], int],
        deletion_queue: DeletionQueue,
        fd_budget: FdBudget | None,
        dir_dirty: bool,
        fence_listener: Callable[[Segment], None],
    ) -> None:
        """`fence_listener`: a bound method told when a read fences a segment, held
        weakly (see `Segment.fence_listener`). `dir_dirty`: the directory has entries
        not yet fsynced (a segment created while opening)."""
        if not segments:
            raise ValueError("a log needs at least one segment")
        self.directory = directory
        self.name = f"{topic}-{partition}"  # for messages
        self.config = config
        self.io = io
        self._clock_ms = clock_ms
        self._deletions = deletion_queue
        self._fd_budget = fd_budget
        self._fence_listener = weakref.WeakMethod(fence_listener)
        self.segments = list(segments)  # replaced, never mutated: readers may hold it
        self.bases = [s.base_offset for s in segments]
        for segment in segments:
            segment.fence_listener = fence_listener
        self.recovery_point = recovery_point
        self.last_flush_ms = clock_ms()
        self.dir_dirty = dir_dirty
        self.poisoned: str | None = None
        self.rolls_deferred = 0  # rolls skipped because the fd budget was spent
        self._roll_deferred = False
        self._log = log.bind(topic=topic, partition=partition)

    # ---- state -----------------------------------------------------------

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.segments[-1].next_offset

    @property
    def size_bytes(self) -> int:
        return sum(s.size for s in self.segments)

    @property
    def fenced_segments(self) -> int:
        return sum(1 for s in self.segments if s.fence_position is not None)

    def view(self) -> SegmentView:
        return SegmentView(self.segments, self.bases, self.segments[-1].size)

    def _set_segments(self, segments: list[Segment]) -> None:
        self.segments = segments
        self.bases = [s.base_offset for s in segments]

    def check_order(self) -> None:
        """The segment-list invariants where a roll or an append can break them (O(1):
        only the newest two segments can have changed); a failure is a bug here."""
        if len(self.segments) > 1:
            before, last = self.segments[-2], self.segments[-1]
            assert before.base_offset < last.base_offset, (
                f"{self.name}: base offsets {before.base_offset} then {last.base_offset}"
            )
            assert before.next_offset <= last.base_offset, (
                f"{self.name}: segment {before.base_offset} ends at {before.next_offset}, "
                f"past the next base {last.base_offset}"
            )
        assert self.recovery_point <= self.log_end_offset, (
            f"{self.name}: recovery point {self.recovery_point} > end {self.log_end_offset}"
        )

    def write_error(self, operation: str, path: Path, exc: OSError) -> NoReturn:
        """Log a failed write and raise StorageError (the caller decides about poisoning)."""
        self._log.error("storage_error", operation=operation, path=str(path), errno=exc.errno)
        raise StorageError(f"{operation} failed on {path}: {exc.strerror or exc}") from exc

    def read_error(self, exc: OSError) -> StorageError:
        self._log.error("storage_error", operation="read", errno=exc.errno)
        return StorageError(f"{self.name}: read failed ({exc.strerror or exc})")

    # ---- append and roll --------------------------------------------------

    def roll_if_due(self, chunk_bytes: int, max_ts: int, last_offset: int, now_ms: int) -> bool:
        """Roll before an append of `chunk_bytes` when Kafka's rules say so and the
        descriptor budget allows (else the active segment takes it while it can);
        whether it rolled. The chunk then goes to the active segment."""
        active = self.segments[-1]
        reason = should_roll(
            active,
            self.config,
            chunk_bytes=chunk_bytes,
            chunk_max_timestamp=max_ts,
            chunk_last_offset=last_offset,
            now_ms=now_ms,
        )
        if reason is None:
            return False
        budget = self._fd_budget
        if budget is not None and not budget.allows(FDS_PER_ACTIVE_SEGMENT):
            self._defer_roll(reason, active, chunk_bytes, budget)
            return False
        return self.roll(reason, now_ms)

    def append(
        self,
        chunk: bytearray,
        *,
        last_offset: int,
        max_timestamp: int,
        offset_of_max: int,
        layouts: int,
    ) -> None:
        """Write whole batches (`layouts`: theirs) at the end of the active segment."""
        segment = self.segments[-1]
        try:
            segment.append(
                chunk,
                last_offset=last_offset,
                max_timestamp=max_timestamp,
                offset_of_max_timestamp=offset_of_max,
                index_interval_bytes=self.config.index_interval_bytes,
                layouts=layouts,
            )
        except TornAppendError as exc:
            self.poisoned = f"a failed write could not be cut back: {exc}"
            self.write_error("append", segment.log_path, exc)
        except OSError as exc:
            self.write_error("append", segment.log_path, exc)

    def _defer_roll(self, reason: str, active: Segment, chunk_bytes: int, budget: FdBudget) -> None:
        """No descriptors for a new segment: the active one takes the chunk while its
        positions and relative offsets still fit an int32 (a full index only stops
        taking entries: lookups scan further), else the append fails retriably."""
        if reason == "relative_offset_overflow" or active.size + chunk_bytes > INT_MAX:
            raise StorageError(
                f"{self.name}: a new segment is needed ({reason}) but the "
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

    def roll(self, reason: str, now_ms: int | None = None) -> bool:
        """Start a new active segment at the log end; False when the active one is
        empty (it already is a fresh one)."""
        active = self.segments[-1]
        new_base = active.next_offset
        if active.size == 0:
            return False
        now_ms = self._clock_ms() if now_ms is None else now_ms
        failpoints.hit("log.roll.before_new_segment")
        try:
            # The new segment first: if the disk is full the old one stays active and
            # untouched, and a later append retries the roll once space is freed.
            segment = Segment.create(self.directory, new_base, self.io, self.config, now_ms=now_ms)
        except OSError as exc:
            self.write_error("roll", active.log_path, exc)
        failpoints.hit("log.roll.after_new_log")
        try:
            active.become_inactive()
        except OSError as exc:  # untrimmed indexes are harmless: the next open trims them
            self._log.warning("index_trim_failed", path=str(active.log_path), errno=exc.errno)
        failpoints.hit("log.roll.after_old_trimmed")
        segment.fence_listener = self._fence_listener()
        self.segments = [*self.segments, segment]
        self.bases = [*self.bases, new_base]
        self.dir_dirty = True
        self._roll_deferred = False
        self.check_order()
        self._log.info(
            "segment_rolled",
            reason=reason,
            base_offset=new_base,
            previous_base_offset=active.base_offset,
            previous_bytes=active.size,
            path=str(segment.log_path),
        )
        return True

    # ---- flush -----------------------------------------------------------

    def flush_due(self, now_ms: int) -> bool:
        """Whether flush.messages or flush.ms ask for an fsync now."""
        unflushed = self.log_end_offset - self.recovery_point
        if unflushed <= 0:
            return False
        if unflushed >= self.config.flush_messages:
            return True
        return now_ms - self.last_flush_ms >= self.config.flush_ms

    def unflushed(self, target: int) -> list[Segment]:
        """The segments holding offsets in [recovery point, target), and the rolled ones
        whose indexes are not fsynced yet (recovery rescans them until then)."""
        point, active = self.recovery_point, self.segments[-1]
        due = [s for s in self.segments if s.base_offset < target]
        return [s for s in due if s.next_offset > point or (s is not active and s.indexes_unsynced)]

    def fsync(self, segments: list[Segment], *, dir_dirty: bool, also: Callable[[], None]) -> None:
        """fsync the `.log` of `segments`, the indexes of all but the active one (recovery
        rebuilds those), then run `also` (a snapshot's fsync), then the directory when
        `dir_dirty`. A failure poisons the log (StorageError)."""
        try:
            failpoints.hit("log.flush.before_fsync")
            for segment in segments:
                segment.flush()
                if segment is not self.segments[-1]:  # rolled, maybe during this flush
                    segment.flush_indexes()
            also()
            if dir_dirty:
                self.io.fsync_dir(self.directory)
            failpoints.hit("log.flush.after_fsync")
        except OSError as exc:
            self.poisoned = f"fsync failed: {exc}"
            self._log.error("storage_error", operation="fsync", errno=exc.errno)
            raise StorageError(
                f"{self.name}: fsync failed ({exc.strerror or exc}); "
                "the partition takes no writes until restart"
            ) from exc

    # ---- read ------------------------------------------------------------

    def find(
        self, view: SegmentView, offset: int, max_bytes: int, *, min_one: bool, hw: int
    ) -> Found | None:
        """Where a read of `offset` lies (None: nothing there yet). CorruptMessage when
        the batch lies in a fenced range, or when no batch below the high watermark `hw`
        holds `offset` or a later one on a topic that is not compacted: only compaction
        leaves such offsets, and an empty answer would stall a consumer there for good."""
        segments, bases, active_size = view
        index = max(bisect_right(bases, offset) - 1, 0)
        last = len(segments) - 1
        try:
            for i in range(index, len(segments)):
                segment = segments[i]
                end = active_size if i == last else segment.size
                found = segment.extent(offset, max_bytes, end, min_one=min_one)
                if found is not None:
                    return (segment, *found)
        except OSError as exc:
            raise self.read_error(exc) from exc
        if offset < hw and "compact" not in self.config.cleanup_policy:
            raise CorruptMessage(
                f"{self.name}: no batch holds offset {offset} or a later one although the "
                f"high watermark is {hw}: the log has a hole"
            )
        return None

    def read_bytes(self, found: Found) -> tuple[bytes, int]:
        """The whole batches of a found read, and their layouts (a bitmask)."""
        try:
            return read_bytes(*found)
        except OSError as exc:
            raise self.read_error(exc) from exc

    def read_records(self, found: Found, max_batches: int | None) -> Read:
        try:
            return read_records(*found, max_batches=max_batches)
        except OSError as exc:
            raise self.read_error(exc) from exc

    def offset_for_timestamp(
        self, segments: list[Segment], timestamp: int, start: int, hw: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start` with a timestamp
        >= `timestamp` (storage.segment_time.offset_for_timestamp)."""
        try:
            return offset_for_timestamp(segments, timestamp, start, hw)
        except OSError as exc:
            raise self.read_error(exc) from exc

    def max_timestamp(self, segments: list[Segment], start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp."""
        try:
            return max_timestamp_offset(segments, start)
        except OSError as exc:
            raise self.read_error(exc) from exc

    # ---- truncation, deletion and replacement -------------------------------

    def truncate_to(self, offset: int) -> int:
        """Remove every batch at or after the one holding `offset`; the bytes removed."""
        keep = [s for s in self.segments if s.base_offset < offset] or [self.segments[0]]
        drop = self.segments[len(keep) :]
        try:
            removed = keep[-1].truncate_to(offset)
            keep[-1].resize_indexes(self.config.segment_index_bytes)
        except OSError as exc:
            self.poisoned = f"truncate failed: {exc}"
            self.write_error("truncate", keep[-1].log_path, exc)
        self._set_segments(keep)
        self.schedule_deletion(drop)
        self.recovery_point = min(self.recovery_point, self.log_end_offset)
        return removed

    def delete_oldest(self, count: int, reason: str, log_start_offset: int) -> list[SegmentInfo]:
        """Remove the first `count` segments (not the active one) below the new
        `log_start_offset`: their files are renamed `.deleted` and unlinked after
        file.delete.delay.ms; the recovery point rises to the log start."""
        victims = self.segments[:count]
        self._set_segments(self.segments[count:])
        self.recovery_point = max(self.recovery_point, log_start_offset)
        infos = [s.info(is_active=False) for s in victims]
        self.schedule_deletion(victims)
        for info in infos:
            self._log.info(
                "segment_deleted",
                reason=reason,
                base_offset=info.base_offset,
                next_offset=info.next_offset,
                bytes=info.size_bytes,
                log_start_offset=log_start_offset,
            )
        return infos

    def schedule_deletion(self, segments: list[Segment]) -> None:
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

    def replace_segments(self, old_bases: list[int], new_bases: list[int]) -> list[int]:
        """Swap cleaned segments in for `old_bases` crash-safely (docs/compaction.md §4); the
        bases of the segments now in their place.

        The cleaner has written and fsynced `<base>.log.cleaned` files (indexes
        optional: they are rebuilt if missing) for each of `new_bases`, covering
        exactly the offsets of the old run. Steps: `.cleaned` -> `.swap`
        (descending), old files -> `.deleted`, `.swap` -> final, fsync the
        directory. Recovery finishes or rolls back a crash at any step.
        """
        positions = [self.bases.index(b) for b in old_bases]
        if (
            not positions
            or positions != list(range(positions[0], positions[0] + len(positions)))
            or positions[-1] == len(self.segments) - 1
        ):
            raise ValueError(f"segments {old_bases} are not a run of inactive segments")
        old = [self.segments[i] for i in positions]
        try:
            rename_cleaned_to_swap(self.io, self.directory, sorted(new_bases, reverse=True))
            failpoints.hit("replace_segments.after_swap_rename")
            self.schedule_deletion(old)
            failpoints.hit("replace_segments.after_old_deleted")
            new = promote_swap_files(self.io, self.directory, self.config, self._clock_ms())
        except OSError as exc:
            self.poisoned = f"segment swap failed: {exc}"
            self.write_error("replace_segments", self.directory, exc)
        listener = self._fence_listener()
        for segment in new:
            segment.fence_listener = listener
        first = positions[0]
        self._set_segments(self.segments[:first] + new + self.segments[first + len(old) :])
        return [s.base_offset for s in new]

    # ---- shutdown --------------------------------------------------------

    def close(self) -> None:
        """Write the final time entry, trim the indexes and close every file."""
        self.segments[-1].become_inactive()
        for segment in self.segments:
            segment.close()


class SegmentFiles:
    """A partition's segment files by path, as the cleaner reads and writes them
    (compaction.ports.CleanableSegments): no lock, since a closed segment's file is
    whole, and one replaced meanwhile raises FileNotFoundError."""

    def __init__(self, local: LocalLog) -> None:
        self._local = local

    def segment_batches(
        self, base_offset: int, *, chunk_bytes: int, on_read: Callable[[int], None] | None = None
    ) -> Iterator[tuple[memoryview, tuple[int, ...]]]:
        """(bytes, raw header fields; `protocol.batch.F_*` index them) of each batch of the
        closed segment at `base_offset`, CRC-checked (CorruptMessage on damage), read in
        chunks of `chunk_bytes`; FileNotFoundError if the segment was replaced meanwhile."""
        return iter_batch_fields(
            self._local.io,
            log_path(self._local.directory, base_offset),
            chunk_bytes=chunk_bytes,
            on_read=on_read,
        )

    def first_batch_timestamp_ms(self, base_offset: int) -> int:
        """Max timestamp of a segment's first batch (Kafka's getFirstBatchTimestamp), or -1."""
        fields = first_batch_fields(self._local.io, log_path(self._local.directory, base_offset))
        return -1 if fields is None else fields[F_MAX_TIMESTAMP]

    def layouts(self, base_offset: int) -> int:
        """The batch layouts the segment at `base_offset` holds (a bitmask; both when
        it is gone)."""
        for segment in self._local.segments:
            if segment.base_offset == base_offset:
                return segment.layouts
        return BOTH_LAYOUTS

    def cleaned_segment_writer(
        self, base_offset: int, *, buffer_bytes: int, on_write: Callable[[int], None] | None = None
    ) -> CleanedSegmentWriter:
        """A writer of the `.cleaned` segment at `base_offset`, in this log's formats and
        index settings, for `Log.replace_segments` to swap in."""
        return CleanedSegmentWriter(
            self._local.directory,
            base_offset,
            self._local.io,
            index_interval_bytes=self._local.config.index_interval_bytes,
            index_bytes=self._local.config.segment_index_bytes,
            buffer_bytes=buffer_bytes,
            on_write=on_write,
        )
