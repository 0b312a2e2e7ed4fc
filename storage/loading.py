"""Opening one segment's files from a partition directory, and the directory listing.

Shared by recovery (storage/recovery.py) and the swap of cleaned segments
(storage/swap.py), so neither imports the other and neither imports `Log`.
Thread safety: none needed; a partition directory is loaded by one thread, under
the Log's lock when a swap promotes segments.
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import SegmentFileName, parse_segment_file_name, segment_paths
from storage.index import CorruptIndexError
from storage.segment import Segment
from storage.segment_recovery import open_segment, sanity_check

__all__ = ["load_segment", "segment_files", "unlink_logged"]

log = structlog.get_logger("tidelog.storage")


def unlink_logged(io: FileIO, path: Path, event: str, **fields: object) -> None:
    """Remove `path` and log `event` with its path; a file already gone is no event."""
    try:
        io.unlink(path)
    except FileNotFoundError:
        return
    log.info(event, path=str(path), **fields)


def segment_files(
    directory: Path, names: list[str] | None = None
) -> list[tuple[Path, SegmentFileName]]:
    """Every segment file of `directory` (transient suffixes included), by name; from
    `names` when the caller listed the directory already."""
    found = []
    for name in sorted(os.listdir(directory) if names is None else names):
        parsed = parse_segment_file_name(name)
        if parsed is not None:
            found.append((directory / name, parsed))
    return found


def load_segment(
    io: FileIO, directory: Path, base: int, config: LogConfig, now_ms: int, *, thorough: bool
) -> tuple[Segment, bool]:
    """Open one segment; returns it and whether its indexes must be rebuilt."""
    _, index, time_index, _ = segment_paths(directory, base)
    missing = not index.exists() or not time_index.exists()
    segment = open_segment(directory, base, io, config, now_ms=now_ms)
    if missing:
        log.info("index_missing", path=str(index), base_offset=base)
        return segment, True
    if not segment.tail_is_whole:
        log.warning("segment_tail_damaged", path=str(segment.log_path), base_offset=base)
        return segment, True
    try:
        sanity_check(segment, thorough=thorough)
    except CorruptIndexError as exc:
        log.warning("index_corrupt", path=str(index), base_offset=base, reason=str(exc))
        return segment, True
    return segment, False
