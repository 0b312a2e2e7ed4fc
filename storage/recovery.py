"""Opening a partition directory: leftovers, index checks and crash recovery.

Rules (docs/design.md "Durability", docs/compaction.md §4 and docs/storage.md "Recovery"):

1. Temp files (`.tmp`) and `.deleted` files are removed. `.cleaned` files are
   removed (an interrupted cleaning is rolled back), and so is every `.swap`
   file at or above the smallest `.cleaned` base. Remaining `.swap` files form
   a complete swap: original segment files inside their offset range are
   removed, then each `.swap` is renamed to its final name.
2. Index files without a `.log` are orphans and are removed. A segment whose
   index is missing or fails its sanity check is rescanned (index rebuilt).
3. After an unclean stop (no clean-shutdown marker), every segment from the one
   holding the recovery point to the end is rescanned: length, CRC-32C and
   offsets of each batch. The first bad byte at or past the recovery point
   ends the log: the file is truncated there and later segments are removed.
   So does a rescanned segment of a non-compacted log that ends below the next
   segment's base offset (a power cut lost its unflushed tail after a roll):
   the later segments are removed so the log stays a gap-free prefix.
2a. Load trusts no file name it did not check. A `.log` named above int64, one
   whose first whole, CRC-valid batch lies below its name's base offset, or one
   starting below the end of the segment before it (overlapping) is renamed
   aside with the `.quarantined` suffix (with its indexes), logged as
   `segment_quarantined` and counted: offsets never repeat because of a stray
   or copied file.
4. A bad byte below the recovery point (or anywhere after a clean stop) is
   damage to acknowledged, flushed data: the segment is fenced from that byte
   (reads there fail with CORRUPT_MESSAGE), nothing is cut, and later segments
   stay readable. If the fenced segment was the last one, a new active segment
   starts at max(recovery point, last valid offset + 1).
5. Producer state: the newest `<offset>.snapshot` at or below the recovered log end
   plus the batches after it (storage.producer_log); snapshots of segments that are
   gone, above the log end, torn or corrupt are removed.

Every action is logged with its path, offsets and bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from protocol.batch import ANY_LAYOUT, F_BASE_OFFSET, HEADER_SIZE, BatchHeader
from storage.config import LogConfig
from storage.fdbudget import FdBudget
from storage.fileio import FileIO
from storage.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    MAX_BASE_OFFSET,
    SWAP_SUFFIX,
    TEMP_SUFFIX,
    TIME_INDEX_SUFFIX,
    DeletionQueue,
    SegmentFileName,
    quarantined_name,
    segment_paths,
)
from storage.loading import load_segment, segment_files, unlink_logged
from storage.log import Log
from storage.producer_log import rebuild_producer_state
from storage.scan import SegmentScan
from storage.segment import Segment
from storage.segment_recovery import RecoveryResult, recover
from storage.swap import complete_swaps

log = structlog.get_logger("tidelog.storage")

# "No recovery point applies": after a clean stop every byte was flushed.
ALL_FLUSHED = 2**63 - 1


def remove_leftovers(io: FileIO, directory: Path) -> list[tuple[Path, SegmentFileName]]:
    """Rule 1: temp and `.deleted` files, rolled-back cleanings, completed swaps.

    Returns the segment files left: the one listing serves the rest of the load (a
    directory is listed again only after a swap renamed files).
    """
    names = os.listdir(directory)
    for name in names:
        if name.endswith(TEMP_SUFFIX):
            unlink_logged(io, directory / name, "temp_file_deleted")
    files = segment_files(directory, names)
    cleaned = [n.base_offset for _, n in files if n.transient == CLEANED_SUFFIX]
    min_cleaned = min(cleaned) if cleaned else None
    left = []
    for path, parsed in files:
        if parsed.transient == DELETED_SUFFIX:
            unlink_logged(io, path, "deleted_file_removed")
        elif parsed.transient == CLEANED_SUFFIX:
            unlink_logged(io, path, "cleaned_leftover_deleted")
        elif (
            parsed.transient == SWAP_SUFFIX
            and min_cleaned is not None
            and parsed.base_offset >= min_cleaned
        ):
            unlink_logged(io, path, "incomplete_swap_deleted")
        else:
            left.append((path, parsed))
    if any(parsed.transient == SWAP_SUFFIX for _, parsed in left):
        complete_swaps(io, directory)
        return segment_files(directory)
    return left


def _quarantine(io: FileIO, directory: Path, base: int, reason: str, bound: Any) -> None:
    """Rename a segment's files aside (`.quarantined`): never loaded again, kept for an
    operator."""
    for path in segment_paths(directory, base):
        if path.exists():
            io.rename(path, quarantined_name(path))
    io.fsync_dir(directory)
    bound.error("segment_quarantined", base_offset=base, path=str(directory), reason=reason)


def _misplaced_first_batch(segment: Segment) -> str | None:
    """Why the segment's first batch cannot belong to it: a whole, CRC-valid batch (so
    real data, not a torn write) whose offsets lie below the name's base offset.

    The header comes first: only a base offset below the name's costs the read and
    CRC of the whole batch (done for every segment at every open, that read was
    round 2's clean-reopen and recovery slowdown).
    """
    head = segment.pread(ANY_LAYOUT.max_size, 0)
    if len(head) < HEADER_SIZE or len(head) < ANY_LAYOUT.header_bytes(head):
        return None  # no whole header: never misplaced
    if ANY_LAYOUT.unpack_from(head)[F_BASE_OFFSET] >= segment.base_offset:
        return None  # not below the base: never misplaced
    scan = SegmentScan(segment.pread, 0, segment.size, block_bytes=HEADER_SIZE, crc=True)
    first = next(iter(scan), None)
    if first is None:
        return None
    header = BatchHeader(*first.fields)
    if header.base_offset < segment.base_offset:
        return (
            f"first batch holds offset {header.base_offset}, below the file's base offset "
            f"{segment.base_offset}"
        )
    return None


def _admit_segments(
    io: FileIO, directory: Path, segments: list[Segment], rebuild: list[bool], bound: Any
) -> tuple[list[Segment], list[bool], int]:
    """Drop (quarantine) segments that overlap the one before or hold misplaced data."""
    kept: list[Segment] = []
    kept_rebuild: list[bool] = []
    refused = 0
    for segment, needs in zip(segments, rebuild, strict=True):
        reason = _misplaced_first_batch(segment)
        if reason is None and kept and segment.base_offset < kept[-1].next_offset:
            reason = (
                f"overlaps the segment at {kept[-1].base_offset}, which ends at offset "
                f"{kept[-1].next_offset - 1}"
            )
        if reason is None:
            kept.append(segment)
            kept_rebuild.append(needs)
            continue
        segment.close()
        _quarantine(io, directory, segment.base_offset, reason, bound)
        refused += 1
    return kept, kept_rebuild, refused


def _hole_after(segments: list[Segment], i: int, config: LogConfig) -> bool:
    """True when segment `i` ends below the next segment's base on a non-compacted log.

    Compaction may legitimately leave such a gap (the cleaner drops a segment's last
    batches), so compacted logs keep their segments.
    """
    if i + 1 >= len(segments) or "compact" in config.cleanup_policy:
        return False
    return segments[i].next_offset < segments[i + 1].base_offset


@dataclass(slots=True)
class _Loaded:
    """What the load steps found: the segments, which need their indexes rebuilt, and
    counts for the log's statistics."""

    segments: list[Segment]
    rebuild: list[bool]
    quarantined: int = 0
    truncated_bytes: int = 0
    fenced_last: bool = False


def open_log(
    directory: Path,
    topic: str,
    partition: int,
    config: LogConfig,
    *,
    io: FileIO,
    clock_ms: Callable[[], int],
    deletion_queue: DeletionQueue,
    recovery_point: int | None,
    log_start_offset: int | None,
    clean: bool,
    fd_budget: FdBudget | None = None,
) -> Log:
    """Load (and after an unclean stop, recover) one partition directory into a Log.

    Steps: leftovers, load, rescan the tail, fence or truncate, build.
    """
    started = time.monotonic()
    bound = log.bind(topic=topic, partition=partition, path=str(directory))
    io.mkdir(directory)
    now_ms = clock_ms()
    bases, quarantined = _clear_leftovers(io, directory, bound)
    loaded = _load_segments(io, directory, bases, config, now_ms, clean=clean, bound=bound)
    loaded.quarantined += quarantined
    checkpoint_rp = recovery_point if recovery_point is not None else 0
    kept = _rescan_tail(loaded, config, clean=clean, checkpoint_rp=checkpoint_rp, bound=bound)
    _drop_segments(io, directory, loaded.segments[kept:], "after_truncated_segment", bound)
    segments = loaded.segments[:kept]
    start = log_start_offset if log_start_offset is not None else 0
    if segments and segments[-1].next_offset < start:
        bound.warning("log_behind_start_offset", log_start_offset=start)
        _drop_segments(io, directory, segments, None, bound)
        segments = []
    loaded.segments = segments
    result_log = _build(
        directory,
        topic,
        partition,
        config,
        loaded,
        start=start,
        point=None if clean else checkpoint_rp,
        io=io,
        now_ms=now_ms,
        clock_ms=clock_ms,
        deletion_queue=deletion_queue,
        fd_budget=fd_budget,
    )
    bound.info(
        "log_loaded",
        clean=clean,
        segments=result_log.segment_count,
        log_start_offset=result_log.log_start_offset,
        log_end_offset=result_log.log_end_offset,
        recovery_point=result_log.recovery_point,
        truncated_bytes=loaded.truncated_bytes,
        duration_s=round(time.monotonic() - started, 6),
    )
    return result_log


def _clear_leftovers(io: FileIO, directory: Path, bound: Any) -> tuple[list[int], int]:
    """Rules 1 and 2a (names): leftovers removed, `.log` names above int64 quarantined,
    orphan indexes removed; returns the segment bases to load and the quarantined count."""
    files = remove_leftovers(io, directory)
    quarantined = 0
    for _, parsed in files:
        if (
            parsed.kind == LOG_SUFFIX
            and not parsed.transient
            and parsed.base_offset > MAX_BASE_OFFSET
        ):
            reason = f"base offset {parsed.base_offset} is above int64"
            _quarantine(io, directory, parsed.base_offset, reason, bound)
            quarantined += 1
    if quarantined:  # renamed aside: list again (else the one listing serves)
        files = segment_files(directory)
    bases = sorted({n.base_offset for _, n in files if n.kind == LOG_SUFFIX and not n.transient})
    for path, parsed in files:
        if parsed.kind in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and parsed.base_offset not in bases:
            unlink_logged(io, path, "orphan_index_deleted", base_offset=parsed.base_offset)
    return bases, quarantined


def _load_segments(
    io: FileIO,
    directory: Path,
    bases: list[int],
    config: LogConfig,
    now_ms: int,
    *,
    clean: bool,
    bound: Any,
) -> _Loaded:
    """Rules 2 and 2a (contents): open each segment, check its indexes, admit it."""
    segments: list[Segment] = []
    rebuild: list[bool] = []
    for base in bases:
        segment, needs = load_segment(io, directory, base, config, now_ms, thorough=not clean)
        segments.append(segment)
        rebuild.append(needs)
    segments, rebuild, refused = _admit_segments(io, directory, segments, rebuild, bound)
    return _Loaded(segments, rebuild, quarantined=refused)


def _rescan_tail(
    loaded: _Loaded, config: LogConfig, *, clean: bool, checkpoint_rp: int, bound: Any
) -> int:
    """Rules 2 and 3: rescan segments needing a rebuild and, after an unclean stop,
    every one from the recovery point's on; returns how many segments are kept."""
    segments, rebuild = loaded.segments, loaded.rebuild
    fence_below = ALL_FLUSHED if clean else checkpoint_rp
    tail_from = len(segments)
    if not clean and segments:
        holding = [i for i, s in enumerate(segments) if s.base_offset <= checkpoint_rp]
        tail_from = holding[-1] if holding else 0
    for i, segment in enumerate(segments):
        if i < tail_from and not rebuild[i]:
            continue
        result = recover(segment, config, fence_below_offset=fence_below)
        if rebuild[i] or i < tail_from:
            bound.info("index_rebuilt", base_offset=segment.base_offset)
        if result.bad_position is None:
            if i >= tail_from and _hole_after(segments, i, config):
                # A power cut lost this unflushed segment's tail, but the next segment's
                # files survived: later segments can only hold data written after the lost
                # bytes, so they go too and the log stays a gap-free prefix (P4).
                bound.warning(
                    "recovery_truncated",
                    segment=str(segment.log_path),
                    base_offset=segment.base_offset,
                    position=segment.size,
                    next_offset=segment.next_offset,
                    bytes=0,
                    reason=f"hole before the next segment at {segments[i + 1].base_offset}",
                )
                return i + 1
            continue
        if _fence_or_truncate(loaded, i, result, checkpoint_rp, bound):
            return i + 1
    return len(segments)


def _fence_or_truncate(
    loaded: _Loaded, i: int, result: RecoveryResult, checkpoint_rp: int, bound: Any
) -> bool:
    """Rules 3 and 4 for segment `i`, whose rescan found a bad batch: a torn tail was
    truncated (True: the log ends here), damage below the recovery point is fenced."""
    segments = loaded.segments
    segment = segments[i]
    if segment.fence_position is None:
        loaded.truncated_bytes += result.truncated_bytes
        bound.warning(
            "recovery_truncated",
            segment=str(segment.log_path),
            base_offset=segment.base_offset,
            position=result.valid_bytes,
            next_offset=result.next_offset,
            bytes=result.truncated_bytes,
            reason=result.reason,
        )
        return True
    bound.error(
        "segment_fenced",
        segment=str(segment.log_path),
        base_offset=segment.base_offset,
        position=result.bad_position,
        next_valid_offset=result.next_offset,
        reason=result.reason,
    )
    if i + 1 < len(segments):
        segment.next_offset = segments[i + 1].base_offset
    else:
        segment.next_offset = max(checkpoint_rp, result.next_offset)
        loaded.fenced_last = True
    return False


def _drop_segments(
    io: FileIO, directory: Path, segments: list[Segment], reason: str | None, bound: Any
) -> None:
    """Close and delete `segments` (after a truncated one, or a log behind its start)."""
    for segment in segments:
        if reason is not None:
            bound.warning(
                "segment_deleted",
                reason=reason,
                base_offset=segment.base_offset,
                bytes=segment.size,
            )
        segment.close()
        for path in segment_paths(directory, segment.base_offset):
            unlink_logged(io, path, "segment_file_deleted")


def _build(
    directory: Path,
    topic: str,
    partition: int,
    config: LogConfig,
    loaded: _Loaded,
    *,
    start: int,
    point: int | None,
    io: FileIO,
    now_ms: int,
    clock_ms: Callable[[], int],
    deletion_queue: DeletionQueue,
    fd_budget: FdBudget | None,
) -> Log:
    """The Log over the kept segments, with an active segment to append to.

    `point` is the checkpointed recovery point after an unclean stop (None after a
    clean one: every byte is flushed).
    """
    segments = loaded.segments
    created = not segments or loaded.fenced_last  # a new file: its entry is not durable yet
    if not segments:
        segments = [Segment.create(directory, start, io, config, now_ms=now_ms)]
    elif loaded.fenced_last:
        segments[-1].become_inactive()
        segments.append(
            Segment.create(directory, segments[-1].next_offset, io, config, now_ms=now_ms)
        )
    for segment in segments[:-1]:
        segment.become_inactive()
    segments[-1].resize_indexes(config.segment_index_bytes)
    log_end = segments[-1].next_offset
    start = max(start, segments[0].base_offset)
    recovery_point = log_end if point is None else min(point, log_end)
    recovery_point = max(recovery_point, min(start, log_end))
    producers = rebuild_producer_state(
        io,
        directory,
        segments,
        config,
        name=f"{topic}-{partition}",
        log_start_offset=start,
        now_ms=now_ms,
    )
    result_log = Log(
        directory,
        topic,
        partition,
        config,
        segments,
        log_start_offset=start,
        recovery_point=recovery_point,
        io=io,
        clock_ms=clock_ms,
        deletion_queue=deletion_queue,
        fd_budget=fd_budget,
        producer_state=producers,
        dir_dirty=created,
    )
    result_log.recovery_truncated_bytes = loaded.truncated_bytes
    result_log.quarantined_segments = loaded.quarantined
    return result_log
