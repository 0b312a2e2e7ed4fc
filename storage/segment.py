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

After a crash: the tail of an active segment may hold a torn batch and its
preallocated indexes entries for bytes that never reached the file; recovery
(`recover`) rescans and truncates it.
"""

from __future__ import annotations

import random
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from protocol.batch import (
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_MAX_TIMESTAMP,
    HEADER,
    HEADER_SIZE,
    TIMESTAMP_TYPE_MASK,
    check_crc,
    decode_payload,
    max_decompressed_bytes,
)
from protocol.errors import CorruptMessage
from storage import failpoints
from storage.config import INT_MAX, LogConfig
from storage.fdcache import Descriptor, LazyFile, open_retried
from storage.fileio import FileIO
from storage.files import DELETED_SUFFIX, segment_paths
from storage.index import CorruptIndexError, OffsetIndex, TimeIndex, index_entry_due
from storage.scan import ScannedBatch, SegmentScan

log = structlog.get_logger("tidelog.storage")

# How many bytes a header scan reads at once: many small batches per syscall.
SCAN_READ_BYTES = 64 * 1024
# How many bytes a recovery scan checks per read: large enough to amortise pread.
RECOVERY_READ_BYTES = 8 * 1024 * 1024
# Serialises fencing by readers, so each damage is logged once (rare: no contention).
_FENCE_LOCK = threading.Lock()
# Called with (byte position, reason) when a read walks into a header that cannot be.
DamageCallback = Callable[[int, str], None]


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


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """A batch found by a scan: where it starts and what its header says."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int


@dataclass(frozen=True, slots=True)
class RecoveryResult:
    valid_bytes: int
    truncated_bytes: int
    next_offset: int
    bad_position: int | None  # first byte that failed, or None
    reason: str


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
        self.log_path, index_path, time_index_path = segment_paths(directory, base_offset)
        if index_bytes:  # a new segment: no stale file of this name may leak into it
            try:
                fd = open_retried(io, self.log_path, exclusive=True)
            except FileExistsError:
                for path in (self.log_path, index_path, time_index_path):
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
        self.offset_index = OffsetIndex(index_path, base_offset, io, preallocate_bytes=index_bytes)
        self.time_index = TimeIndex(time_index_path, base_offset, io, preallocate_bytes=index_bytes)
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
    def load(
        cls, directory: Path, base_offset: int, io: FileIO, config: LogConfig, *, now_ms: int
    ) -> Segment:
        """Open an existing segment; its indexes are taken as they are (check them after)."""
        segment = cls(
            directory, base_offset, io, now_ms=now_ms, roll_jitter_ms=random_jitter_ms(config)
        )
        segment.load_metadata()
        return segment

    def load_metadata(self) -> None:
        """next_offset, max timestamp and rolling timestamp from the indexes and a short scan."""
        if self.size == 0:
            return
        first = self._header_at(0)
        self.rolling_based_timestamp = first[F_MAX_TIMESTAMP] if first is not None else -1
        last_ts, last_ts_offset = self.time_index.last_entry()
        self.max_timestamp, self.offset_of_max_timestamp = last_ts, last_ts_offset
        if self.time_index.entries == 0:
            self.offset_of_max_timestamp = -1
        _, start = self.offset_index.lookup(self.offset_index.last_offset())
        start = start if start < self.size else 0
        self.next_offset = max(self.next_offset, self.base_offset)
        end = start
        for batch in self.iter_batches(start, self.size):
            if batch.base_offset < self.next_offset or (
                batch.last_offset - self.base_offset > INT_MAX
            ):
                break  # not the next batch of this segment: recovery rescans from here
            self.next_offset = batch.last_offset + 1
            end = batch.position + batch.size
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp = batch.max_timestamp
                self.offset_of_max_timestamp = batch.last_offset
        self.tail_is_whole = end == self.size
        if start == 0 and self.tail_is_whole:
            self.verified_bytes = end

    def sanity_check(self, *, thorough: bool) -> None:
        """Raise CorruptIndexError when an index cannot belong to this log.

        The quick form (after a clean shutdown) checks the last entries only, as
        Kafka does; the thorough form checks every entry is in order.
        """
        oi, ti = self.offset_index, self.time_index
        for index in (oi, ti):
            if index.misaligned:
                raise CorruptIndexError(f"{index.path}: length is not whole entries")
        if thorough:
            oi.sanity_check(self.size)
            ti.sanity_check(self.next_offset)
            return
        if oi.entries:
            last_offset, last_pos = oi.lookup(oi.last_offset())
            if last_offset < self.base_offset or last_pos >= max(self.size, 1):
                raise CorruptIndexError(f"{oi.path}: last entry points outside the log")
        if ti.entries:
            last_ts, last_offset = ti.last_entry()
            if last_ts < ti.first_timestamp() or last_offset < self.base_offset:
                raise CorruptIndexError(f"{ti.path}: entries out of order")

    # ---- writing ---------------------------------------------------------

    def append(
        self,
        chunk: bytes | bytearray,
        *,
        last_offset: int,
        max_timestamp: int,
        offset_of_max_timestamp: int,
        index_interval_bytes: int,
    ) -> int:
        """Write `chunk` (whole batches) with one write at the end; returns its position.

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

    def should_roll(
        self,
        config: LogConfig,
        *,
        chunk_bytes: int,
        chunk_max_timestamp: int,
        chunk_last_offset: int,
        now_ms: int,
    ) -> str | None:
        """Why this segment must roll before taking the chunk (Kafka's rules), or None."""
        if self.size == 0:
            return None  # an empty segment takes any chunk; rolling it would recreate itself
        if self.size > config.segment_bytes - chunk_bytes:
            return "size"
        if self.time_waited_ms(now_ms, chunk_max_timestamp) > (
            config.max_segment_ms - self.roll_jitter_ms
        ):
            return "time"
        if self.offset_index.is_full():
            return "offset_index_full"
        if self.time_index.is_full():
            return "time_index_full"
        if chunk_last_offset - self.base_offset > INT_MAX:
            return "relative_offset_overflow"
        return None

    def time_waited_ms(self, now_ms: int, timestamp: int) -> int:
        """Record time since the first batch, or wall time since creation without one."""
        if self.rolling_based_timestamp >= 0:
            return timestamp - self.rolling_based_timestamp
        return now_ms - self.created_ms

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
        """fsync the log and the indexes."""
        file = self._file.get()
        self._io.fsync(file.fd)
        self.offset_index.flush()
        self.time_index.flush()

    def truncate_to(self, offset: int) -> int:
        """Remove every batch whose last offset is >= `offset`; returns bytes removed."""
        found = self.find_batch(offset)
        if found is None:
            return 0
        return self._truncate_at(found.position, found.base_offset)

    def _truncate_at(self, position: int, next_offset: int, *, recompute: bool = True) -> int:
        removed = self.size - position
        file = self._file.get()
        self._io.ftruncate(file.fd, position)
        self.size = position
        self.verified_bytes = min(self.verified_bytes, position)
        self.offset_index.truncate_to(next_offset)
        self.time_index.truncate_to(next_offset)
        self.next_offset = max(self.base_offset, next_offset) if position else self.base_offset
        if recompute:
            self._recompute_max_timestamp()
            self.bytes_since_last_index_entry = 0
        if position == 0:
            self.rolling_based_timestamp = -1
        return removed

    def _recompute_max_timestamp(self) -> None:
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        for batch in self.iter_batches(0, self.size):
            if batch.max_timestamp > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = (
                    batch.max_timestamp,
                    batch.last_offset,
                )

    def recover(self, config: LogConfig, *, fence_below_offset: int) -> RecoveryResult:
        """Rescan every batch (length, CRC, offsets), rebuild both indexes, handle a bad tail.

        A bad batch at an offset >= `fence_below_offset` (the recovery point) is a
        torn tail: the file is truncated there. One below it held acknowledged,
        flushed data: the segment is fenced from that byte and nothing is cut.
        """
        self.offset_index.reset()
        self.time_index.reset()
        self.max_timestamp, self.offset_of_max_timestamp = -1, -1
        self.rolling_based_timestamp = -1
        self.fence_position = None
        next_offset, since_entry = self.base_offset, 0
        bad_reason = ""
        file = self._file.get()
        file_size = self._io.file_size(file.fd)
        scan = SegmentScan(self.pread, 0, file_size, block_bytes=RECOVERY_READ_BYTES, crc=True)
        for batch in scan:
            fields = batch.fields
            bad_reason = _misfit(fields, next_offset, self.base_offset)
            if bad_reason:
                scan.position = batch.position
                break
            last_offset = fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA]
            max_ts = fields[F_MAX_TIMESTAMP]
            if batch.position == 0:
                self.rolling_based_timestamp = max_ts
            if max_ts > self.max_timestamp:
                self.max_timestamp, self.offset_of_max_timestamp = max_ts, last_offset
            # Kafka's rebuild rule: an entry when the bytes before this batch since
            # the last entry exceed index.interval.bytes.
            if index_entry_due(since_entry, config.index_interval_bytes):
                time_index = self.time_index
                if self.offset_index.is_full() or time_index.entries >= time_index.capacity:
                    # The file is shorter than the rebuild (deleted, cut, or written
                    # one entry per multi-batch append): grow it as an active index,
                    # else the rest of the segment gets no entries. Trimmed at build.
                    # (A trimmed time index is "full" one entry early, keeping the
                    # slot become_inactive fills: that alone is no reason to grow.)
                    self.resize_indexes(config.segment_index_bytes)
                self.offset_index.append(last_offset, batch.position)
                self.time_index.maybe_append(self.max_timestamp, self.offset_of_max_timestamp)
                since_entry = 0
            since_entry += batch.size
            next_offset = last_offset + 1
        else:
            bad_reason = scan.problem or ""
        position = scan.position
        self.bytes_since_last_index_entry = since_entry
        self.next_offset = next_offset
        self.verified_bytes = position
        if position >= file_size:
            self.size = file_size
            return RecoveryResult(file_size, 0, next_offset, None, "")
        if next_offset < fence_below_offset:
            self.size = file_size
            self.fence_position = position
            self.fence_reason = bad_reason
            return RecoveryResult(position, 0, next_offset, position, bad_reason)
        self.size = file_size
        truncated = self._truncate_at(position, next_offset, recompute=False)
        failpoints.hit("recovery.after_truncate")
        return RecoveryResult(position, truncated, next_offset, position, bad_reason)

    # ---- reading ---------------------------------------------------------

    def _header_at(self, position: int) -> tuple[Any, ...] | None:
        data = self.pread(HEADER_SIZE, position)
        if len(data) < HEADER_SIZE:
            return None
        return HEADER.unpack_from(data)

    def iter_batches(
        self, start: int, end: int, on_damage: DamageCallback | None = None
    ) -> Iterator[BatchPosition]:
        """Headers of the whole batches in [start, end), read in blocks; stops at a bad
        one, reporting it to `on_damage` (when `end` is the segment's end, a header that
        does not fit is damage, not a cut)."""
        if self.fence_position is not None:
            end = min(end, self.fence_position)
        scan = SegmentScan(self.pread, start, end, block_bytes=SCAN_READ_BYTES)
        for batch in scan:
            fields = batch.fields
            yield BatchPosition(
                batch.position,
                batch.size,
                fields[F_BASE_OFFSET],
                fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA],
                fields[F_MAX_TIMESTAMP],
            )
        if scan.problem is not None and on_damage is not None and not scan.header_cut_at_end:
            previous = scan.previous
            before = (
                None
                if previous is None
                else BatchPosition(previous.position, previous.size, 0, 0, 0)
            )
            on_damage(self.culprit(before, scan.position), scan.problem)

    def culprit(self, previous: BatchPosition | ScannedBatch | None, position: int) -> int:
        """Where damage a header walk found at `position` starts: at the batch before it
        when that one fails its CRC (a wrong length there led the walk astray)."""
        if previous is None:
            return position
        try:
            check_crc(self.pread(previous.size, previous.position))
        except CorruptMessage:
            return previous.position
        return position

    def find_batch(
        self, offset: int, end: int | None = None, on_damage: DamageCallback | None = None
    ) -> BatchPosition | None:
        """The first batch whose last offset is >= `offset`, below byte `end`."""
        _, start = self.offset_index.lookup(offset)
        for batch in self.iter_batches(start, self.size if end is None else end, on_damage):
            if batch.last_offset >= offset:
                return batch
        return None

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
        found = self.find_batch(offset, end, self.fence)
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

    def find_offset_by_timestamp(
        self, timestamp: int, start_offset: int, end_offset: int
    ) -> tuple[int, int] | None:
        """First (offset, timestamp) in [start_offset, end_offset) with timestamp >= `timestamp`."""
        _, index_offset = self.time_index.lookup(timestamp)
        _, position = self.offset_index.lookup(max(index_offset, start_offset))
        for batch in self.iter_batches(position, self.size, self.fence):
            if batch.base_offset >= end_offset:
                return None
            if batch.max_timestamp < timestamp or batch.last_offset < start_offset:
                continue
            for record_offset, record_ts in self._record_times(batch):
                if start_offset <= record_offset < end_offset and record_ts >= timestamp:
                    return record_offset, record_ts
        if self.fence_position is not None:
            # The walk ended at a fenced range the answer may lie in (the segment's
            # timestamps said it holds one): say so, rather than "none" here and a
            # later segment's offset from the caller.
            raise self.fenced_error(f"timestamp {timestamp}")
        return None

    def _record_times(self, batch: BatchPosition) -> list[tuple[int, int]]:
        """(offset, timestamp) of each record of one batch (LogAppendTime: the batch's)."""
        data = self.pread(batch.size, batch.position)
        header, records = decode_payload(data, max_decompressed=max_decompressed_bytes(batch.size))
        base, base_ts = header.base_offset, header.base_timestamp
        try:
            if header.attributes & TIMESTAMP_TYPE_MASK:
                return [(base + record[0], batch.max_timestamp) for record in records]
            return [(base + record[0], base_ts + record[1]) for record in records]
        except (TypeError, IndexError) as exc:
            raise CorruptMessage(
                f"{self.log_path}: batch at byte {batch.position} is malformed"
            ) from exc

    def first_offset_with_timestamp(self, offset_hint: int, timestamp: int) -> int | None:
        """Offset of the first record with `timestamp` in the batch holding `offset_hint`."""
        batch = self.find_batch(offset_hint)
        if batch is None:
            return None
        for record_offset, record_ts in self._record_times(batch):
            if record_ts == timestamp:
                return record_offset
        return None

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
        return renamed

    def close(self) -> None:
        """Trim the indexes and close the files (shutdown; no reader may still use it)."""
        self.offset_index.close()
        self.time_index.close()
        self._file.close()

    def release_writers(self) -> None:
        """Close the index descriptors kept for appends (segment deleted or replaced).
        The `.log` stays cached for readers still inside until the cache releases it;
        they reopen it by its `.deleted` name until file.delete.delay.ms removes it."""
        self.offset_index.release_writer()
        self.time_index.release_writer()


def _misfit(fields: tuple[int, ...], expected_offset: int, base_offset: int) -> str:
    """Why a CRC-valid batch cannot come next in this segment ("" when it can)."""
    base, delta = fields[F_BASE_OFFSET], fields[F_LAST_OFFSET_DELTA]
    if base < expected_offset or delta < 0:
        return f"offset {base} does not follow {expected_offset - 1}"
    if base + delta - base_offset > INT_MAX:
        return f"offset {base + delta} overflows the segment"
    return ""
