"""One segment: a `.log` file of whole batches plus its offset and time indexes.

Invariants: the `.log` holds whole batches back to back from byte 0 to `size`,
their offsets strictly increase from `base_offset`, and `next_offset` is one past
the last batch's last offset (`base_offset` when empty). Index entries point only
at bytes below `size`. A segment whose bytes from `fence_position` on failed
recovery below the recovery point, or held a batch header a read walked into
and could not accept (a clean stop rescans nothing), is *fenced*: that range
is never served, reads of it fail with CorruptMessage. Reads check the headers
they serve (magic, length), not the CRC: as in Kafka, the consumer checks that.

Thread safety: `append`, `truncate_to`, `become_inactive` and `close` run under
the owning log's lock. Readers use positional reads on the open descriptor and
pass the size they saw under that lock, so they never read a half-written
append. Descriptors are opened on demand (storage.fdcache): the `.log` (one
descriptor both writes and reads) and the index writers are kept while used and
released when idle; the index maps keep none (storage.mapping). A reader holds
the descriptor it reads through, so a release never closes it under the reader;
a segment that retention renamed to `.deleted` reopens by that name until the
file is removed, and a file replaced under its name is refused, not read.

Kept here: what a live segment does every append and fetch (write, truncate,
fence, a read's extent, descriptors). Elsewhere, so each part reads in one
sitting: the header walks (storage.segment_walk), the roll rules
(storage.segment_roll), the time lookups (storage.segment_time) and what
start-up does to a segment it did not write: metadata, index checks and the
recovery rescan (storage.segment_recovery).
"""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from protocol.batch import TIDELOG_BATCHES
from protocol.errors import CorruptMessage
from storage import failpoints
from storage.config import LogConfig
from storage.fdcache import Descriptor, LazyFile, open_retried
from storage.fileio import FileIO
from storage.files import DELETED_SUFFIX, segment_paths
from storage.index import OffsetIndex, TimeIndex, index_entry_due
from storage.segment_walk import find_batch, iter_batches
from storage.txn_index import TxnIndex

log = structlog.get_logger("tidelog.storage")

# Serialises fencing by readers, so each damage is logged once (rare: no contention).
_FENCE_LOCK = threading.Lock()


class _HandedOut(threading.local):
    """The descriptor `Segment.fd` last returned on this thread, kept open for it."""

    file: Descriptor | None = None


_HANDED_OUT = _HandedOut()


@dataclass(frozen=True, slots=True)
class SegmentInfo:
    """What retention needs to know about a segment, as one immutable snapshot."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int  # -1 if no batch has a timestamp
    mtime_ms: int
    is_active: bool


class TornAppendError(OSError):
    """A write failed and cutting the file back failed too: the tail is unknown."""


def random_jitter_ms(config: LogConfig) -> int:
    """Kafka's per-segment roll jitter: 0..min(jitter, segment.ms)-1."""
    if config.segment_jitter_ms <= 0:
        return 0
    return random.randrange(min(config.segment_jitter_ms, config.segment_ms))


class Segment:
    """A `.log` file and its two indexes, all named after `base_offset`."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        io: FileIO,
        *,
        now_ms: int,
        roll_jitter_ms: int = 0,
        index_bytes: int = 0,
    ) -> None:
        self.directory = directory
        self.base_offset = base_offset
        self._io = io
        self.log_path, index_path, time_index_path, txn_path = segment_paths(directory, base_offset)
        if index_bytes:  # a new segment: no stale file of this name may leak into it
            try:
                fd = open_retried(io, self.log_path, exclusive=True)
            except FileExistsError:
                for path in (self.log_path, index_path, time_index_path, txn_path):
                    try:
                        io.unlink(path)
                    except FileNotFoundError:
                        pass
                fd = open_retried(io, self.log_path, exclusive=True)
        else:
            fd = open_retried(io, self.log_path, create=True)
        # The `.log` descriptor (writer and reader alike) comes from storage.fdcache:
        # kept while the segment is used, released when idle, reopened on demand.
        self._file = LazyFile(io, self.log_path, fd=fd)
        self.size = io.file_size(fd)
        # Bytes [0, verified_bytes) are whole batches with plausible headers: appended by
        # this process (validated on produce), rescanned by recovery, or walked once by
        # a read. Reads inside it skip the header walk (the hot tail read stays as cheap).
        self.verified_bytes = 0
        # The layouts of the batches in [0, verified_bytes), or more (a bitmask of
        # `protocol.batch.TIDELOG_BATCHES` / `KAFKA_BATCHES`): a read inside it knows
        # which layouts it holds without walking its headers.
        self.layouts = 0
        self.offset_index = OffsetIndex(index_path, base_offset, io, preallocate_bytes=index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, io, preallocate_bytes=index_bytes)
        # The aborted transactions whose ABORT marker lies here (storage.txn_index).
        # A new segment has none yet (no file is looked for at a roll).
        self.txn_index = TxnIndex(txn_path, io) if index_bytes else TxnIndex.load(txn_path, io)
        self.next_offset = base_offset
        self.max_timestamp = -1
        self.offset_of_max_timestamp = -1
        self.rolling_based_timestamp = -1
        self.bytes_since_last_index_entry = 0
        self.created_ms = now_ms
        self.roll_jitter_ms = roll_jitter_ms
        self.fence_position: int | None = None
        self.fence_reason = ""
        self._fence_listener: weakref.WeakMethod[Callable[[Segment], None]] | None = None
        # False when loading found bytes after the last whole batch: rescan needed.
        self.tail_is_whole = True

    @property
    def fence_listener(self) -> Callable[[Segment], None] | None:
        """The bound method told when a read fences this segment (its log rolls an
        active one), held weakly: a strong one made log <-> segment a reference
        cycle, so a deleted topic's descriptors and maps (and its disk blocks) stayed
        held until the cyclic GC happened to run, in the middle of later appends."""
        ref = self._fence_listener
        return None if ref is None else ref()

    @fence_listener.setter
    def fence_listener(self, listener: Callable[[Segment], None] | None) -> None:
        self._fence_listener = None if listener is None else weakref.WeakMethod(listener)

    # ---- opening ---------------------------------------------------------

    @classmethod
    def create(
        cls, directory: Path, base_offset: int, io: FileIO, config: LogConfig, *, now_ms: int
    ) -> Segment:
        """A new empty segment with preallocated indexes; stale files of that name go first."""
        return cls(
            directory,
            base_offset,
            io,
            now_ms=now_ms,
            roll_jitter_ms=random_jitter_ms(config),
            index_bytes=config.segment_index_bytes,
        )

    @classmethod
    def open_existing(
        cls, directory: Path, base_offset: int, io: FileIO, config: LogConfig, *, now_ms: int
    ) -> Segment:
        """Open an existing segment as it is, nothing read yet: storage.segment_recovery
        reads its metadata and checks or rebuilds its indexes."""
        return cls(
            directory, base_offset, io, now_ms=now_ms, roll_jitter_ms=random_jitter_ms(config)
        )

    # ---- writing ---------------------------------------------------------

    def append(
        self,
        chunk: bytes | bytearray,
        *,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        index_interval_bytes: int,
        layouts: int = TIDELOG_BATCHES,
    ) -> int:
        """Write `chunk` (whole batches, in the `layouts` they are) with one write at
        the end; returns its position.

        All or nothing: when the write fails the file is cut back and OSError is
        raised; if even that fails the caller must stop writing (the tail is unknown).
        """
        position = self.size
        file = self._file.get()
        failpoints.hit("segment.append.before_write")
        if failpoints.hit("segment.append.write") == "partial":
            self._io.write_all(file.fd, memoryview(chunk)[: len(chunk) // 2], position)
            failpoints.kill_now()
        try:
            self._io.write_all(file.fd, chunk, position)
        except OSError:
            self._cut_back(position)
            raise
        failpoints.hit("segment.append.after_write")
        if max_timestamp > self.max_timestamp:
            new_max = (max_timestamp, offset_of_max_timestamp)
        else:
            new_max = (self.max_timestamp, self.offset_of_max_timestamp)
        since_entry = self.bytes_since_last_index_entry
        if index_entry_due(since_entry, index_interval_bytes):
            try:
                self.offset_index.append(last_offset, position)
                self.time_index.maybe_append(*new_max)
            except OSError:
                self.offset_index.truncate_to(self.next_offset)
                self.time_index.truncate_to(self.next_offset)
                self._cut_back(position)
                raise
            since_entry = 0
        if position == 0:
            self.rolling_based_timestamp = max_timestamp
        self.max_timestamp, self.offset_of_max_timestamp = new_max
        self.bytes_since_last_index_entry = since_entry + len(chunk)
        self.next_offset = last_offset + 1
        self.size = position + len(chunk)
        if self.verified_bytes == position:
            self.verified_bytes = self.size
            self.layouts |= layouts
        return position

    def _cut_back(self, position: int) -> None:
        """Undo a failed append's bytes; TornAppendError when even that fails."""
        try:
            file = self._file.get()
            self._io.ftruncate(file.fd, position)
        except OSError as cut_error:
            raise TornAppendError(
                cut_error.errno, f"cannot cut {self.log_path} back to {position}"
            ) from cut_error

    def become_inactive(self) -> None:
        """At roll: write the final time entry and trim both indexes to their entries."""
        if self.offset_of_max_timestamp >= 0:
            self.time_index.maybe_append(
                self.max_timestamp, self.offset_of_max_timestamp, final=True
            )
        self.offset_index.trim()
        self.time_index.trim()

    def resize_indexes(self, size_bytes: int) -> None:
        self.offset_index.resize(size_bytes)
        self.time_index.resize(size_bytes)

    def flush(self) -> None:
        """fsync the `.log` only: an acks=-1 round. The indexes wait for the roll
        (`flush_indexes`); recovery rebuilds those of the segments it rescans."""
        file = self._file.get()
        self._io.fsync(file.fd)
        self.txn_index.flush()  # fsyncs only after an ABORT marker's entry

    def flush_indexes(self) -> None:
        """fsync the index entries written since the last time (a rolled segment)."""
        self.offset_index.flush()
        self.time_index.flush()

    @property
    def indexes_unsynced(self) -> bool:
        return self.offset_index.unsynced or self.time_index.unsynced

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; returns bytes removed."""
        found = find_batch(self, offset)
        if found is None:
            return 0
        return self.truncate_at(found.position, found.base_offset)

    def truncate_at(self, position: int, next_offset: int, *, recompute: bool = True) -> int:
        """Cut the file at byte `position` (a batch boundary) and the indexes at
        `next_offset`; returns bytes removed. `recompute=False`: the caller (recovery)
        has just set the max timestamp and the bytes since the last index entry."""
        removed = self.size - position
        file = self._file.get()
        self._io.ftruncate(file.fd, position)
        self.size = position
        self.verified_bytes = min(self.verified_bytes, position)
        self.offset_index.truncate_to(next_offset)
        self.time_index.truncate_to(next_offset)
        self.txn_index.truncate_from(next_offset)
        self.next_offset = max(self.base_offset, next_offset) if position else self.base_offset
        if recompute:
            self._recompute_max_timestamp()
            self.bytes_since_last_index_entry = 0
        if position == 0:
            self.rolling_based_timestamp = -1
        return removed

    def _recompute_max_timestamp(self) -> None:
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        for batch in iter_batches(self, 0, self.size):
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = (
                    batch.max_timestamp,
                    batch.last_offset,
                )

    # ---- reading ---------------------------------------------------------

    def fence(self, position: int, reason: str) -> None:
        """Damage found by a read at byte `position`: fence from there on (logged once).

        Never cut: the bytes are flushed, acknowledged data an operator may want.
        """
        with _FENCE_LOCK:
            if self.fence_position is not None and self.fence_position <= position:
                return
            self.fence_position, self.fence_reason = position, reason
        log.error(
            "segment_fenced",
            segment=str(self.log_path),
            base_offset=self.base_offset,
            position=position,
            reason=reason,
            found_by="read",
        )
        listener = self.fence_listener
        if listener is not None:
            listener(self)

    def fenced_error(self, what: str) -> CorruptMessage:
        return CorruptMessage(
            f"{self.log_path}: {what} lies in a damaged range fenced at byte "
            f"{self.fence_position} ({self.fence_reason})"
        )

    def extent(
        self, offset: int, max_bytes: int, end: int, *, min_one: bool = True
    ) -> tuple[int, int, bool] | None:
        """Where a read lies: (position, stop, whole). Bytes [position, stop) begin with
        the batch holding `offset`; `whole` says they end on a batch boundary (they reach
        `end`), else they must be cut to whole batches. position == stop: nothing fits.

        None when no batch below `end` holds `offset` or later (look in the next
        segment). Raises CorruptMessage when the batch lies in a fenced range.
        """
        found = find_batch(self, offset, end, self.fence)
        fence = self.fence_position
        if found is None or (fence is not None and found.position >= fence):
            if fence is not None and fence < end:
                raise self.fenced_error(f"offset {offset}")
            return None
        if fence is not None:
            end = min(end, fence)
        limit = max(max_bytes, found.size) if min_one else max_bytes
        if limit < found.size:
            return found.position, found.position, False
        stop = min(end, found.position + limit)
        return found.position, stop, stop == end

    def file_size(self) -> int:
        """Bytes of the `.log` file on disk: more than `size` when a crash left a tail."""
        file = self._file.get()
        return self._io.file_size(file.fd)

    def pread(self, length: int, position: int) -> bytes:
        """`length` bytes of the `.log` file at `position` (fewer at its end)."""
        file = self._file.get()  # held for the call: a release cannot close it meanwhile
        return self._io.pread(file.fd, length, position)

    @property
    def fd(self) -> int:
        """The `.log` file's descriptor, reopened if it was released: valid on this
        thread until its next call of `fd` (kept open for it meanwhile), so duplicate
        it to keep it. A deleted segment reopens by its `.deleted` name until
        file.delete.delay.ms removes the file; after that this raises OSError."""
        file = self._file.get()
        _HANDED_OUT.file = file
        return file.fd

    # ---- lifecycle -------------------------------------------------------

    def info(self, *, is_active: bool) -> SegmentInfo:
        try:
            mtime_ms = int(self.log_path.stat().st_mtime * 1000)
        except FileNotFoundError:
            mtime_ms = -1
        return SegmentInfo(
            self.base_offset,
            self.next_offset,
            self.size,
            self.max_timestamp,
            mtime_ms,
            is_active,
        )

    def rename_to_deleted(self) -> list[Path]:
        """Rename every file with `.deleted`; the open descriptor keeps serving readers."""
        renamed = []
        for path in segment_paths(self.directory, self.base_offset):
            target = path.with_name(path.name + DELETED_SUFFIX)
            try:
                self._io.rename(path, target)
            except FileNotFoundError:
                continue
            renamed.append(target)
        self.log_path = self.log_path.with_name(self.log_path.name + DELETED_SUFFIX)
        self._file.path = self.log_path
        for index in (self.offset_index, self.time_index):
            index.rename(index.path.with_name(index.path.name + DELETED_SUFFIX))
        self.txn_index.rename(
            self.txn_index.path.with_name(self.txn_index.path.name + DELETED_SUFFIX)
        )
        return renamed

    def close(self) -> None:
        """Trim the indexes and close the files (shutdown; no reader may still use it)."""
        self.offset_index.close()
        self.time_index.close()
        self.txn_index.close()
        self._file.close()

    def release_writers(self) -> None:
        """Close the index descriptors kept for appends (segment deleted or replaced).
        The `.log` stays cached for readers still inside until the cache releases it;
        they reopen it by its `.deleted` name until file.delete.delay.ms removes it."""
        self.offset_index.release_writer()
        self.time_index.release_writer()
