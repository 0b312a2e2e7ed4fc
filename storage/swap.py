"""The swap of cleaned segments into a log (docs/compaction.md §4), step by step.

`Log.replace_segments` runs the steps in order; recovery (storage/recovery.py)
finishes or rolls back a swap a crash interrupted, with the same steps:

1. the cleaner writes and fsyncs `<base>.log.cleaned` (+ indexes) for each new base;
2. `rename_cleaned_to_swap`: every `.cleaned` file becomes `.swap`, descending bases;
3. the replaced segments are renamed `.deleted` (the Log's delayed deletion);
4. `complete_swaps`: originals inside the swapped offset range are removed, each
   `.swap` is renamed to its final name, and the directory is fsynced.

After a crash: `.cleaned` files left means step 2 did not finish, and recovery
deletes them (and any `.swap` at or above the smallest `.cleaned` base); `.swap`
files alone form a complete set, and recovery runs step 4.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import structlog

from protocol.batch import F_BASE_OFFSET, F_LAST_OFFSET_DELTA
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import CLEANED_SUFFIX, LOG_SUFFIX, SWAP_SUFFIX, segment_paths
from storage.loading import load_segment, segment_files, unlink_logged
from storage.scan import SegmentScan
from storage.segment import Segment
from storage.segment_walk import SCAN_READ_BYTES

__all__ = ["complete_swaps", "promote_swap_files", "rename_cleaned_to_swap", "scan_log_end"]

log = structlog.get_logger("tidelog.storage")


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
    """Step 2: every `.cleaned` file of `bases` becomes `.swap` (in this order)."""
    for base in bases:
        for path in segment_paths(directory, base, CLEANED_SUFFIX):
            if path.exists():
                io.rename(path, path.with_name(path.name[: -len(CLEANED_SUFFIX)] + SWAP_SUFFIX))
    io.fsync_dir(directory)


def complete_swaps(io: FileIO, directory: Path) -> list[int]:
    """Step 4: promote a complete set of `.swap` files; returns the bases promoted."""
    swaps = [(p, n) for p, n in segment_files(directory) if n.transient == SWAP_SUFFIX]
    swap_logs = [(p, n) for p, n in swaps if n.kind == LOG_SUFFIX]
    if not swaps:
        return []
    if not swap_logs:
        for path, _ in swaps:
            unlink_logged(io, path, "swap_leftover_deleted")
        return []
    low = min(n.base_offset for _, n in swap_logs)
    high = max((scan_log_end(io, p) or n.base_offset + 1) for p, n in swap_logs)
    for path, parsed in segment_files(directory):
        if not parsed.transient and low <= parsed.base_offset < high:
            unlink_logged(io, path, "swap_replaced_original", base_offset=parsed.base_offset)
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
        segment, _ = load_segment(io, directory, base, config, now_ms, thorough=True)
        segment.become_inactive()
        segments.append(segment)
    return segments
