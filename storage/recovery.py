"""Opening a partition directory: leftovers, index checks and crash recovery.

Rules (DESIGN.md "Durability", KAFKA_SEMANTICS.md §7.4 and §8):

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

Every action is logged with its path, offsets and bytes.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import structlog

from protocol.batch import F_BASE_OFFSET, F_LAST_OFFSET_DELTA, HEADER_SIZE, BatchHeader
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
    parse_segment_file_name,
    quarantined_name,
    segment_paths,
)
from storage.index import CorruptIndexError
from storage.log import Log
from storage.scan import SegmentScan
from storage.segment import SCAN_READ_BYTES, Segment

log = structlog.get_logger("tidelog.storage")

# "No recovery point applies": after a clean stop every byte was flushed.
ALL_FLUSHED = 2**63 - 1


def _unlink(io: FileIO, path: Path, event: str, **fields: object) -> None:
    try:
        io.unlink(path)
    except FileNotFoundError:
        return
    log.info(event, path=str(path), **fields)


def _segment_files(directory: Path) -> list[tuple[Path, SegmentFileName]]:
    found = []
    for name in sorted(os.listdir(directory)):
        parsed = parse_segment_file_name(name)
        if parsed is not None:
            found.append((directory / name, parsed))
    return found


def scan_log_end(io: FileIO, path: Path) -> int | None:
    """One past the last offset of the whole batches in a `.log` file (None if empty)."""
    segment_end: int | None = None
    fd = io.open(path, writable=False)
    try:
        scan = SegmentScan(
            partial(io.pread, fd), 0, io.file_size(fd), block_bytes=SCAN_READ_BYTES, whole=False
        )
        for batch in scan:
            segment_end = batch.fields[F_BASE_OFFSET] + batch.fields[F_LAST_OFFSET_DELTA] + 1
    finally:
        io.close(fd)
    return segment_end


def rename_cleaned_to_swap(io: FileIO, directory: Path, bases: list[int]) -> None:
    """Step 3 of the swap: every `.cleaned` file of `bases` becomes `.swap` (in this order)."""
    for base in bases:
        for path in segment_paths(directory, base, CLEANED_SUFFIX):
            if path.exists():
                io.rename(path, path.with_name(path.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
    io.fsync_dir(directory)


def complete_swaps(io: FileIO, directory: Path) -> list[int]:
    """Promote a complete set of `.swap` files; returns the bases promoted."""
    swaps = [(p, n) for p, n in _segment_files(directory) if n.transient == SWAP_SUFFIX]
    swap_logs = [(p, n) for p, n in swaps if n.kind == LOG_SUFFIX]
    if not swaps:
        return []
    if not swap_logs:
        for path, _ in swaps:
            _unlink(io, path, "swap_leftover_deleted")
        return []
    low = min(n.base_offset for _, n in swap_logs)
    high = max((scan_log_end(io, p) or n.base_offset + 1) for p, n in swap_logs)
    for path, parsed in _segment_files(directory):
        if not parsed.transient and low <= parsed.base_offset < high:
            _unlink(io, path, "swap_replaced_original", base_offset=parsed.base_offset)
    for path, _ in swaps:
        io.rename(path, path.with_name(path.name[: -len(SWAP_SUFFIX)]))
    io.fsync_dir(directory)
    bases = sorted(n.base_offset for _, n in swap_logs)
    log.info("swap_completed", directory=str(directory), bases=bases)
    return bases


def promote_swap_files(
    io: FileIO, directory: Path, config: LogConfig, now_ms: int
) -> list[Segment]:
    """Complete the swap and open the new segments (indexes rebuilt when needed)."""
    segments = []
    for base in complete_swaps(io, directory):
        segment, _ = _load_segment(io, directory, base, config, now_ms, thorough=True)
        segment.become_inactive()
        segments.append(segment)
    return segments


def remove_leftovers(io: FileIO, directory: Path) -> None:
    """Rule 1: temp and `.deleted` files, rolled-back cleanings, completed swaps."""
    for name in os.listdir(directory):
        if name.endswith(TEMP_SUFFIX):
            _unlink(io, directory / name, "temp_file_deleted")
    files = _segment_files(directory)
    cleaned = [n.base_offset for _, n in files if n.transient == CLEANED_SUFFIX]
    min_cleaned = min(cleaned) if cleaned else None
    for path, parsed in files:
        if parsed.transient == DELETED_SUFFIX:
            _unlink(io, path, "deleted_file_removed")
        elif parsed.transient == CLEANED_SUFFIX:
            _unlink(io, path, "cleaned_leftover_deleted")
        elif (
            parsed.transient == SWAP_SUFFIX
            and min_cleaned is not None
            and parsed.base_offset >= min_cleaned
        ):
            _unlink(io, path, "incomplete_swap_deleted")
    complete_swaps(io, directory)


def _load_segment(
    io: FileIO, directory: Path, base: int, config: LogConfig, now_ms: int, *, thorough: bool
) -> tuple[Segment, bool]:
    """Open one segment; returns it and whether its indexes must be rebuilt."""
    _, index, time_index = segment_paths(directory, base)
    missing = not index.exists() or not time_index.exists()
    segment = Segment.load(directory, base, io, config, now_ms=now_ms)
    if missing:
        log.info("index_missing", path=str(index), base_offset=base)
        return segment, True
    if not segment.tail_is_whole:
        log.warning("segment_tail_damaged", path=str(segment.log_path), base_offset=base)
        return segment, True
    try:
        segment.sanity_check(thorough=thorough)
    except CorruptIndexError as exc:
        log.warning("index_corrupt", path=str(index), base_offset=base, reason=str(exc))
        return segment, True
    return segment, False


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
    real data, not a torn write) whose offsets lie below the name's base offset."""
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
    """Load (and after an unclean stop, recover) one partition directory into a Log."""
    started = time.monotonic()
    bound = log.bind(topic=topic, partition=partition, path=str(directory))
    io.mkdir(directory)
    now_ms = clock_ms()
    remove_leftovers(io, directory)
    quarantined = 0
    for _, parsed in _segment_files(directory):
        if (
            parsed.kind == LOG_SUFFIX
            and not parsed.transient
            and parsed.base_offset > MAX_BASE_OFFSET
        ):
            reason = f"base offset {parsed.base_offset} is above int64"
            _quarantine(io, directory, parsed.base_offset, reason, bound)
            quarantined += 1
    files = _segment_files(directory)
    bases = sorted({n.base_offset for _, n in files if n.kind == LOG_SUFFIX and not n.transient})
    for path, parsed in files:
        if parsed.kind in (INDEX_SUFFIX, TIME_INDEX_SUFFIX) and parsed.base_offset not in bases:
            _unlink(io, path, "orphan_index_deleted", base_offset=parsed.base_offset)

    segments: list[Segment] = []
    rebuild: list[bool] = []
    for base in bases:
        segment, needs = _load_segment(io, directory, base, config, now_ms, thorough=not clean)
        segments.append(segment)
        rebuild.append(needs)
    segments, rebuild, refused = _admit_segments(io, directory, segments, rebuild, bound)
    quarantined += refused

    checkpoint_rp = recovery_point if recovery_point is not None else 0
    fence_below = ALL_FLUSHED if clean else checkpoint_rp
    tail_from = len(segments)
    if not clean and segments:
        holding = [i for i, s in enumerate(segments) if s.base_offset <= checkpoint_rp]
        tail_from = holding[-1] if holding else 0
    truncated_total = 0
    fenced_last = False
    kept = len(segments)
    for i, segment in enumerate(segments):
        if i < tail_from and not rebuild[i]:
            continue
        result = segment.recover(config, fence_below_offset=fence_below)
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
                kept = i + 1
                break
            continue
        if segment.fence_position is None:
            truncated_total += result.truncated_bytes
            bound.warning(
                "recovery_truncated",
                segment=str(segment.log_path),
                base_offset=segment.base_offset,
                position=result.valid_bytes,
                next_offset=result.next_offset,
                bytes=result.truncated_bytes,
                reason=result.reason,
            )
            kept = i + 1
            break
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
            fenced_last = True
    for segment in segments[kept:]:
        bound.warning(
            "segment_deleted",
            reason="after_truncated_segment",
            base_offset=segment.base_offset,
            bytes=segment.size,
        )
        segment.close()
        for path in segment_paths(directory, segment.base_offset):
            _unlink(io, path, "segment_file_deleted")
    segments = segments[:kept]

    start = log_start_offset if log_start_offset is not None else 0
    if segments and segments[-1].next_offset < start:
        bound.warning("log_behind_start_offset", log_start_offset=start)
        for segment in segments:
            segment.close()
            for path in segment_paths(directory, segment.base_offset):
                _unlink(io, path, "segment_file_deleted")
        segments = []
    if not segments:
        segments = [Segment.create(directory, start, io, config, now_ms=now_ms)]
    elif fenced_last:
        segments[-1].become_inactive()
        segments.append(
            Segment.create(directory, segments[-1].next_offset, io, config, now_ms=now_ms)
        )
    for segment in segments[:-1]:
        segment.become_inactive()
    segments[-1].resize_indexes(config.segment_index_bytes)
    log_end = segments[-1].next_offset
    start = max(start, segments[0].base_offset)
    point = log_end if clean else min(checkpoint_rp, log_end)
    point = max(point, min(start, log_end))
    result_log = Log(
        directory,
        topic,
        partition,
        config,
        segments,
        log_start_offset=start,
        recovery_point=point,
        io=io,
        clock_ms=clock_ms,
        deletion_queue=deletion_queue,
        fd_budget=fd_budget,
    )
    result_log.recovery_truncated_bytes = truncated_total
    result_log.quarantined_segments = quarantined
    bound.info(
        "log_loaded",
        clean=clean,
        segments=len(segments),
        log_start_offset=start,
        log_end_offset=log_end,
        recovery_point=point,
        truncated_bytes=truncated_total,
        duration_s=round(time.monotonic() - started, 6),
    )
    return result_log
