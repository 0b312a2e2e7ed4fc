"""Shared builders for the storage tests: batches, logs over a temp dir, a manual clock."""

from __future__ import annotations

import os
from pathlib import Path

from protocol.batch import MAGIC, Compression, encode_batch, iter_records
from protocol.layouts import to_layout
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import DeletionQueue
from storage.log import Log
from storage.recovery import open_log

BASE_TS = 1_700_000_000_000


class ManualClock:
    """A clock tests move by hand (docs/design.md: time is injected, never slept)."""

    def __init__(self, now_ms: int = BASE_TS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def batch(
    count: int = 1,
    *,
    ts: int = BASE_TS,
    value_bytes: int = 10,
    key: bytes | None = b"k",
    timestamps: list[int] | None = None,
    compression: Compression = Compression.NONE,
    tag: int = 0,
) -> bytes:
    """One producer batch of `count` records; `tag` makes values distinguishable."""
    stamps = timestamps if timestamps is not None else [ts] * count
    return encode_batch(
        [
            (key, f"{tag}:{i}:".encode().ljust(value_bytes, b"."), None, stamps[i])
            for i in range(count)
        ],
        compression=compression,
    )


def open_test_log(
    directory: Path,
    config: LogConfig | None = None,
    *,
    clock: ManualClock | None = None,
    io: FileIO | None = None,
    clean: bool = True,
    recovery_point: int | None = None,
    log_start_offset: int | None = None,
    queue: DeletionQueue | None = None,
) -> Log:
    return open_log(
        directory,
        "t",
        0,
        config or LogConfig(),
        io=io or FileIO(),
        clock_ms=clock or ManualClock(),
        deletion_queue=queue or DeletionQueue(),
        recovery_point=recovery_point,
        log_start_offset=log_start_offset,
        clean=clean,
    )


def read_all(log: Log, start: int | None = None) -> list[tuple[int, bytes | None]]:
    """(offset, value) of every record from `start` (default: log start) to the end."""
    offset = log.log_start_offset if start is None else start
    out: list[tuple[int, bytes | None]] = []
    while offset < log.high_watermark:
        data = to_layout(log.read(offset, 1 << 20).records, MAGIC)  # Kafka batches too
        records = [r for r in iter_records(data) if r.offset >= offset]
        if not records:
            break
        out += [(r.offset, r.value) for r in records]
        offset = records[-1].offset + 1
    return out


def drop_from_page_cache(path: Path) -> None:
    """Make `path`'s pages cold: written back, then dropped (clean pages go at once)."""
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)
