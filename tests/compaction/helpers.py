"""Shared helpers for the cleaner tests: a log manager on a driven clock, and readers."""

from __future__ import annotations

import math
from pathlib import Path

from compaction.cleaner import Cleaner
from compaction.config import CleanerConfig
from compaction.manager import CleanerManager
from compaction.throttle import Throttler
from protocol.batch import Record, encode_batch, iter_headers, iter_records
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.log import Log
from storage.manager import LogManager

START_MS = 1_700_000_000_000


class Clock:
    """A millisecond clock the test moves by hand."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def open_manager(data_dir: Path, clock: Clock, io: FileIO | None = None) -> LogManager:
    manager = LogManager(data_dir, LogConfig(), clock_ms=clock, io=io or FileIO())
    manager.open()
    return manager


def make_cleaner(*, map_bytes: int = 1 << 20, **kw) -> Cleaner:
    """A cleaner; it reads and writes through each log's own FileIO."""
    config = CleanerConfig(dedupe_buffer_bytes=map_bytes, min_map_bytes=0, **kw)
    return Cleaner(config, Throttler(math.inf))


def make_cleaner_manager(
    logs: LogManager, clock: Clock, io: FileIO | None = None, backoff_ms: int = 1000
) -> CleanerManager:
    return CleanerManager(
        logs.data_dir, logs.all_logs, io=io or FileIO(), clock_ms=clock, backoff_ms=backoff_ms
    )


def append(log: Log, rows, ts_ms: int, **kw) -> int:
    """Append (key, value) rows as one batch; returns its base offset."""
    batch = encode_batch([(k, v, None, ts_ms) for k, v in rows], **kw)
    return log.append(batch).base_offset


def read_all(log: Log, start: int | None = None) -> list[Record]:
    """Every record from the log start (or `start`) to the high watermark."""
    records: list[Record] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        batch_records = [r for r in iter_records(data) if r.offset >= offset]
        if not data:
            break
        records += batch_records
        offset = max(h.next_offset for _, h in iter_headers(data))
    return records


def latest_by_key(records: list[Record]) -> dict[bytes, tuple[int, bytes | None]]:
    """key -> (offset, value) of the last record per key."""
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for r in records:
        if r.key is not None:
            out[r.key] = (r.offset, r.value)
    return out
