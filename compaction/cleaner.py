"""Cleaning one log: build the offset map over its dirty section, recopy, swap in.

`Cleaner.clean` is synchronous and runs in a worker thread; one Cleaner per thread
(it owns its offset-map budget). Steps:

1. map the dirty segments `[first dirty, first uncleanable)` into an OffsetMap until
   they end or the map is full (`mapping.MapBuilder`);
2. group every segment below the end of the mapped range, from the log's first
   segment on (the clean section is recopied too, so its superseded records go), by
   `segment.bytes` and `segment.index.bytes` (`grouping`);
3. for each group in offset order: recopy its batches by the rules of `recopy` into
   `.cleaned` files (`writer`; past the first dirty offset, survivors are found from
   the map's sorted offsets, see `_Recopier`), then let storage swap them in crash-safely
   (`Log.replace_segments`: `.cleaned` -> `.swap` -> old files `.deleted` -> final).

Groups go in ascending order, so a crash between two groups leaves a log whose
earlier part is cleaned and later part is not: still the latest value of every key,
because a record is only dropped when a later record of its key exists at or after
it, and that one is kept (or dropped only for a still later one).

Appends and fetches go on meanwhile: the active segment is never cleaned, and
storage holds its lock only for the swap itself. If retention or a truncation
removes a segment under the cleaner, the cleaning is abandoned (CleaningAborted)
and retried next round; that is not a failure.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import numpy as np

from compaction.config import CleanerConfig
from compaction.grouping import GroupableSegment, group_segments, index_bytes_estimate
from compaction.layouts import add_to_map, header_of, records_of
from compaction.mapping import STAGING_KEYS_MAX, MapBuilder
from compaction.markers import MarkerTracker
from compaction.offset_map import ENTRY_BYTES, OffsetMap
from compaction.ports import CleanableLog, CleanedSegment
from compaction.recopy import (
    UNKEYED,
    BatchOutcome,
    emptied,
    recopy_batch,
    recopy_survivors,
    tombstones_retained,
    with_delete_horizon,
)
from compaction.throttle import Throttler
from protocol.batch import (
    CONTROL_MASK,
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_PRODUCER_ID,
    F_RECORD_COUNT,
    TRANSACTIONAL_MASK,
    BatchHeader,
    max_decompressed_bytes,
)
from storage import SegmentInfo, failpoints
from storage.txn_index import AbortedTxn

__all__ = ["Cleaner", "CleaningAborted", "CleaningResult"]

# Work between two GIL hand-overs (and stop checks), in seconds of wall time: the
# broker's event loop waits at most about this long for the GIL, sooner than the
# interpreter's 5 ms switch interval would force it (and under CPU contention the
# forced switch often comes much later). Timed rather than counted in bytes because a
# byte costs very different work in the two passes; a hand-over (`time.sleep(0)`) costs
# about 80 us, so 2 ms keeps it near 4% of the cleaning.
YIELD_INTERVAL_S = 0.002
# The smallest map worth allocating; tiny logs get this, not the whole budget.
MIN_MAP_ENTRIES = 1024

_key_of = itemgetter(2)
# Above every offset: "no map offset left" for `_Recopier._next_surviving`.
_PAST_ALL = 2**63


class CleaningAborted(Exception):
    """The log changed under the cleaner (segments deleted or truncated): try later."""


@dataclass(frozen=True, slots=True)
class CleaningResult:
    """What one cleaning did: for the `log_cleaned` event and the cleaner statistics."""

    topic: str
    partition: int
    first_dirty_offset: int
    end_offset: int  # the new checkpoint: first offset not covered by this cleaning
    map_full: bool
    bytes_read: int
    bytes_written: int
    records_read: int
    records_kept: int
    records_removed: int
    batches_rewritten: int
    map_entries: int
    map_slots: int
    map_bytes: int
    segments_before: int
    segments_after: int
    duration_s: float
    throttled_s: float

    @property
    def map_utilization(self) -> float:
        return self.map_entries / self.map_slots if self.map_slots else 0.0


class Cleaner:
    """One cleaner thread's worker: owns an offset-map budget and cleans one log at a time."""

    def __init__(
        self,
        config: CleanerConfig,
        throttler: Throttler,
        *,
        stop: threading.Event | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._throttler = throttler
        self._stop = stop or threading.Event()
        self._monotonic = monotonic

    def _new_map(self, dirty_offsets: int) -> OffsetMap:
        """A map within the thread's budget, no larger than the dirty range can fill."""
        needed = max(dirty_offsets, MIN_MAP_ENTRIES) / self.config.io_buffer_load_factor
        memory = min(self.config.map_bytes_per_thread, int(needed * ENTRY_BYTES) + ENTRY_BYTES * 8)
        return OffsetMap(memory, self.config.io_buffer_load_factor)

    def clean(
        self,
        log: CleanableLog,
        *,
        first_dirty_offset: int,
        first_uncleanable_offset: int,
        now_ms: int,
    ) -> CleaningResult:
        """Clean `log`'s dirty range (from a `choice.cleanable_range`); see the module doc."""
        started = self._monotonic()
        slept_before = self._throttler.slept_s
        segments = log.segments_info()
        dirty = [
            s
            for s in segments[:-1]
            if s.next_offset > first_dirty_offset and s.base_offset < first_uncleanable_offset
        ]
        offset_map = self._new_map(
            sum(s.next_offset - max(s.base_offset, first_dirty_offset) for s in dirty)
        )
        counters = _Counters()
        builder = self._build_map(log, dirty, offset_map, first_dirty_offset,
                                  first_uncleanable_offset, counters,
                                  _AbortedRanges(log.aborted_transactions_of(
                                      [s.base_offset for s in segments])))  # fmt: skip
        end_offset = builder.end_offset
        map_full = end_offset < first_uncleanable_offset
        to_clean = [s for s in segments[:-1] if s.base_offset < end_offset]
        groups = group_segments(
            [
                _groupable(segments, i, log.config.index_interval_bytes)
                for i in range(len(to_clean))
            ],
            max_segment_bytes=log.config.segment_bytes,
            max_index_bytes=log.config.segment_index_bytes,
        )
        by_base = {s.base_offset: s for s in to_clean}
        aborted = log.aborted_transactions_of([s.base_offset for s in segments])
        recopier = _Recopier(
            offset_map,
            first_dirty_offset=first_dirty_offset,
            end_offset=end_offset,
            now_ms=now_ms,
            delete_retention_ms=log.config.delete_retention_ms,
            max_decompressed=max_decompressed_bytes(log.config.max_message_bytes),
            retained_batch_ends=log.producer_batch_ends(),
            retained_marker_epochs=log.producer_marker_epochs(),
            aborted=_AbortedRanges(aborted),
        )
        for group in groups:
            infos = [by_base[g.base_offset] for g in group]
            self._clean_group(log, infos, recopier, counters)
        return CleaningResult(
            topic=log.topic,
            partition=log.partition,
            first_dirty_offset=first_dirty_offset,
            end_offset=end_offset,
            map_full=map_full,
            bytes_read=counters.bytes_read,
            bytes_written=counters.bytes_written,
            records_read=counters.records_read,
            records_kept=recopier.kept,
            records_removed=recopier.removed,
            batches_rewritten=recopier.rewritten,
            map_entries=offset_map.size,
            map_slots=offset_map.slots,
            map_bytes=offset_map.memory_bytes,
            segments_before=len(segments),
            segments_after=log.segment_count,
            duration_s=self._monotonic() - started,
            throttled_s=self._throttler.slept_s - slept_before,
        )

    def _batches(
        self, log: CleanableLog, base_offset: int, counters: _Counters
    ) -> Iterator[tuple[memoryview, tuple[int, ...]]]:
        """(bytes, raw header fields) of each batch of a segment (`reader.F_*` index them)."""
        try:
            for view, fields in log.segment_files.segment_batches(
                base_offset,
                chunk_bytes=self.config.io_chunk_bytes,
                on_read=self._throttler.maybe_throttle,
            ):
                counters.bytes_read += len(view)
                if time.monotonic() >= counters.next_yield_s:
                    if self._stop.is_set():
                        raise CleaningAborted("the cleaner is stopping")
                    time.sleep(0)  # hand the GIL to the event loop if it is waiting
                    counters.next_yield_s = time.monotonic() + YIELD_INTERVAL_S
                yield view, fields
        except FileNotFoundError as exc:
            raise CleaningAborted(
                f"segment {base_offset} of {log.topic}-{log.partition} disappeared during the "
                f"cleaning ({exc.filename})"
            ) from exc

    def _build_map(
        self,
        log: CleanableLog,
        dirty: Sequence[SegmentInfo],
        offset_map: OffsetMap,
        first_dirty_offset: int,
        first_uncleanable_offset: int,
        counters: _Counters,
        aborted: _AbortedRanges,
    ) -> MapBuilder:
        builder = MapBuilder(offset_map, first_dirty_offset)
        cap = max_decompressed_bytes(log.config.max_message_bytes)
        for i, info in enumerate(dirty):
            full = False
            for view, fields in self._batches(log, info.base_offset, counters):
                if aborted.skips_map(fields):
                    continue  # markers and aborted records never shadow a key (Kafka)
                if not add_to_map(builder, view, fields, cap):
                    full = True
                    break
            if full:
                break
            nxt = dirty[i + 1].base_offset if i + 1 < len(dirty) else first_uncleanable_offset
            builder.end_segment(nxt)
        builder.finish()
        counters.records_read = builder.records_mapped
        return builder

    def _clean_group(
        self, log: CleanableLog, infos: list[SegmentInfo], recopier: _Recopier, counters: _Counters
    ) -> None:
        base = infos[0].base_offset
        writer = log.segment_files.cleaned_segment_writer(
            base, buffer_bytes=self.config.io_chunk_bytes, on_write=self._throttler.maybe_throttle
        )
        try:
            for info in infos:
                for view, fields in self._batches(log, info.base_offset, counters):
                    recopier.recopy(view, fields, writer)
            # An aborted transaction whose marker went leaves the index with it: a
            # read_committed reader would otherwise skip that producer's later data.
            gone = recopier.dropped_markers
            writer.add_aborted(
                [
                    e
                    for e in log.aborted_transactions_of([i.base_offset for i in infos])
                    if (e.producer_id, e.last_offset) not in gone
                ]
            )
            mtime_ns = infos[-1].mtime_ms * 1_000_000 if infos[-1].mtime_ms >= 0 else None
            writer.finish(mtime_ns)
            failpoints.hit("compaction.after_cleaned_fsync")
        except BaseException:
            writer.abort()
            raise
        try:
            log.replace_segments([i.base_offset for i in infos], [base])
        except ValueError as exc:  # checked before any rename: the segments changed
            writer.abort()
            raise CleaningAborted(str(exc)) from exc
        except BaseException:
            writer.abort()  # removes only what is still `.cleaned`; recovery handles `.swap`
            raise
        counters.bytes_written += writer.size


@dataclass
class _Counters:
    bytes_read: int = 0
    bytes_written: int = 0
    records_read: int = 0
    next_yield_s: float = 0.0  # time.monotonic() of the next GIL hand-over


class _Recopier:
    """Applies the recopy rules to the batches of a cleaning, in offset order.

    Batches below the first dirty offset (the clean section, and the batch holding
    the first dirty offset) need their keys looked up in the map: they are decoded
    and resolved through a bounded cache of key -> latest offset. From the first
    batch at or past the first dirty offset on, no key is looked up again: the map is
    turned into its sorted offsets (`OffsetMap.take_sorted_offsets`), and a batch's
    survivors are the map offsets within its offset range (one comparison with the
    next map offset settles most batches, a binary search the rest). A batch without
    survivors is dropped and a batch whose records all survive (tombstones kept,
    horizon already set) is copied, both without decoding a record; only the batches
    that keep some records are decoded and rebuilt.

    The newest batch of each live idempotent producer (its last offset is in
    `retained_batch_ends`) is cleaned like any other, but when no record of it survives
    its header stays as an empty batch (Kafka's RETAIN_EMPTY), so a rebuild of the
    producer state from the log still finds its last sequence and deduplication
    survives compaction. (Copying it whole, as round 2 did, resurrected shadowed
    values once a later tombstone of their key went.) Likewise a producer whose epoch
    only a marker records (`retained_marker_epochs`: a bump forgot its batches) keeps
    its markers of that epoch past their delete horizon, so a rebuilt state still fences
    the older epoch.
    """

    def __init__(
        self,
        offset_map: OffsetMap,
        *,
        first_dirty_offset: int,
        end_offset: int,
        now_ms: int,
        delete_retention_ms: int,
        max_decompressed: int,
        retained_batch_ends: frozenset[int] = frozenset(),
        retained_marker_epochs: Mapping[int, int] | None = None,
        aborted: _AbortedRanges | None = None,
    ) -> None:
        self._map = offset_map
        self._retained = retained_batch_ends
        self._marker_epochs = retained_marker_epochs or {}
        self._aborted = aborted if aborted is not None else _AbortedRanges([])
        self._first_dirty = first_dirty_offset
        self._end = end_offset
        self._now_ms = now_ms
        self._retention_ms = delete_retention_ms
        self._cap = max_decompressed
        # key -> latest offset in the map (-1 when absent), at most STAGING_KEYS_MAX keys;
        # recopy_batch raises KeyError for a key not in it.
        self._latest: dict[bytes | None, int] = {None: UNKEYED}
        # The map's offsets in ascending order, once the clean section is done, and the
        # smallest of them past every batch seen so far.
        self._surviving: np.ndarray | None = None
        self._next_surviving = _PAST_ALL
        self._markers = MarkerTracker(now_ms)
        self.dropped_markers: set[tuple[int, int]] = set()  # (producer id, offset)
        self.kept = 0
        self.removed = 0
        self.rewritten = 0

    def recopy(self, view: memoryview, fields: tuple[int, ...], writer: CleanedSegment) -> None:
        """Recopy one batch (its bytes and raw header fields) into `writer`, or drop it."""
        base = fields[F_BASE_OFFSET]
        last = base + fields[F_LAST_OFFSET_DELTA]
        if fields[F_ATTRIBUTES] & CONTROL_MASK:
            self._recopy_marker(view, BatchHeader(*fields), writer)
            return
        if fields[F_ATTRIBUTES] & TRANSACTIONAL_MASK:
            self._markers.saw_transactional_batch(fields[F_PRODUCER_ID])
        retained = last in self._retained  # a live producer's newest batch
        if self._aborted.is_aborted(fields) or (  # Kafka's cleaner removes aborted records
            base >= self._first_dirty and self._surely_dropped(base, last)
        ):
            self.removed += fields[F_RECORD_COUNT]
            if retained:
                self._keep_empty(view, BatchHeader(*fields), writer)
            return
        header = BatchHeader(*fields)
        if base < self._first_dirty:
            outcome = self._recopy_by_key(view, header)
        else:
            outcome = self._recopy_by_offset(view, header)
        self.kept += outcome.records_kept
        self.removed += outcome.records_removed
        self.rewritten += outcome.rewritten
        if outcome.data is not None:
            writer.append(outcome.data, _header_of(outcome, header))
        elif retained:
            self._keep_empty(view, header, writer)

    def _keep_empty(self, view: memoryview, header: BatchHeader, writer: CleanedSegment) -> None:
        """A live producer's newest batch with no record left stays as an empty batch
        (one already empty, from an earlier pass, is copied as it is)."""
        if header.record_count == 0:
            writer.append(bytes(view), header)
            return
        data = emptied(view, header)
        self.rewritten += 1
        writer.append(data, header_of(data, header.magic))

    def _carries_epoch(self, header: BatchHeader) -> bool:
        """The marker alone records its producer's current epoch (fencing after a rebuild)."""
        return self._marker_epochs.get(header.producer_id) == header.producer_epoch

    def _recopy_marker(self, view: memoryview, header: BatchHeader, writer: CleanedSegment) -> None:
        """A transaction marker: kept, given its delete horizon, or dropped past it
        (compaction.markers)."""
        verdict = self._markers.on_marker(header)
        past_range = header.base_offset >= self._end  # cleaned by no pass (Kafka)
        if past_range or (verdict == "drop" and self._carries_epoch(header)):
            verdict = "keep"
        if verdict == "drop":
            self.removed += header.record_count
            self.dropped_markers.add((header.producer_id, header.base_offset))
            return
        self.kept += header.record_count
        if verdict == "keep":
            writer.append(view, header)
            return
        records = records_of(view, header, self._cap)
        rebuilt = with_delete_horizon(view, header, records, self._now_ms + self._retention_ms)
        self.rewritten += 1
        writer.append(rebuilt, header_of(rebuilt, header.magic))

    def _surely_dropped(self, base: int, last: int) -> bool:
        """True when the batch at `base`..`last` (past the first dirty offset) has no map
        offset and lies below the end: nothing of it survives.

        Batches come in offset order, so comparing with the smallest map offset not yet
        passed settles most batches without a numpy call. The first call (the first
        batch past the first dirty offset) turns the map into its sorted offsets.
        """
        if self._surviving is None:  # the clean section is done: no more key lookups
            self._latest = {}
            self._surviving = self._map.take_sorted_offsets()
            self._advance(int(self._surviving.searchsorted(base)))
        return last < self._end and self._next_surviving > last

    def _recopy_by_offset(self, view: memoryview, header: BatchHeader) -> BatchOutcome:
        surviving = self._surviving
        assert surviving is not None  # set by _surely_dropped
        last = header.last_offset
        # The map's offsets within this batch (records at or past the end are all kept).
        first = int(surviving.searchsorted(header.base_offset))
        count = int(surviving.searchsorted(min(last, self._end - 1), "right")) - first
        self._advance(first + count)
        if last < self._end and count == 0:
            return BatchOutcome(None, 0, header.record_count, rewritten=False)
        if (
            last < self._end
            and count == header.record_count
            and header.has_delete_horizon
            and tombstones_retained(header, self._now_ms)
        ):
            # Every record is its key's latest, tombstones stay, no horizon to set.
            return BatchOutcome(view, count, 0, rewritten=False)
        records = records_of(view, header, self._cap)
        return recopy_survivors(
            view,
            header,
            records,
            frozenset(surviving[first : first + count].tolist()),
            map_end_offset=self._end,
            now_ms=self._now_ms,
            delete_retention_ms=self._retention_ms,
        )

    def _advance(self, position: int) -> None:
        """Note the first map offset not yet passed (batches come in offset order)."""
        surviving = self._surviving
        assert surviving is not None
        self._next_surviving = int(surviving[position]) if position < len(surviving) else _PAST_ALL

    def _recopy_by_key(self, view: memoryview, header: BatchHeader) -> BatchOutcome:
        records = records_of(view, header, self._cap)
        try:
            return self._recopy(view, header, records)
        except KeyError:  # a key the cache has not seen (or forgot): resolve, retry
            self._resolve(records)
            return self._recopy(view, header, records)

    def _resolve(self, records: Sequence[tuple[Any, ...]]) -> None:
        """Look up the batch's keys that the cache lacks, in one vectorized probe."""
        missing = list(set(map(_key_of, records)).difference(self._latest))
        if len(self._latest) + len(missing) > STAGING_KEYS_MAX:
            self._latest = {None: UNKEYED}
        offsets = self._map.get_digests(self._map.digest_keys(missing))
        self._latest.update(zip(missing, offsets.tolist(), strict=True))

    def _recopy(
        self, view: memoryview, header: BatchHeader, records: Sequence[tuple[Any, ...]]
    ) -> BatchOutcome:
        return recopy_batch(
            view,
            header,
            records,
            self._latest,
            map_end_offset=self._end,
            now_ms=self._now_ms,
            delete_retention_ms=self._retention_ms,
        )


class _AbortedRanges:
    """The aborted transactions of a log as ranges per producer (from `.txnindex`):
    a transactional batch inside one is aborted data. Per batch, not per record."""

    __slots__ = ("_ranges",)

    def __init__(self, entries: list[AbortedTxn]) -> None:
        self._ranges: dict[int, list[tuple[int, int]]] = {}
        for e in entries:
            self._ranges.setdefault(e.producer_id, []).append((e.first_offset, e.last_offset))

    def is_aborted(self, fields: tuple[int, ...]) -> bool:
        if not fields[F_ATTRIBUTES] & TRANSACTIONAL_MASK or not self._ranges:
            return False
        ranges = self._ranges.get(fields[F_PRODUCER_ID])
        if ranges is None:
            return False
        base = fields[F_BASE_OFFSET]
        return any(first <= base < last for first, last in ranges)

    def skips_map(self, fields: tuple[int, ...]) -> bool:
        """Batches whose keys never enter the offset map: markers and aborted data."""
        return bool(fields[F_ATTRIBUTES] & CONTROL_MASK) or self.is_aborted(fields)


def _header_of(outcome: BatchOutcome, original: BatchHeader) -> BatchHeader:
    """The header of the batch being written (a rewrite changes size and timestamps)."""
    if not outcome.rewritten or outcome.data is None:
        return original
    return header_of(outcome.data, original.magic)


def _groupable(
    segments: Sequence[SegmentInfo], position: int, index_interval_bytes: int
) -> GroupableSegment:
    """Grouping input for `segments[position]`: next segment's base, index sizes estimated."""
    info = segments[position]
    nxt = segments[position + 1].base_offset if position + 1 < len(segments) else info.next_offset
    offset_index, time_index = index_bytes_estimate(info.size_bytes, index_interval_bytes)
    return GroupableSegment(info.base_offset, nxt, info.size_bytes, offset_index, time_index)
