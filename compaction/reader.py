"""Sequential reading of whole batches from a segment's `.log` file for the cleaner.

Reads in chunks of `chunk_bytes` with positional reads (so readers serving fetches on
the same file are undisturbed), grows the chunk when one batch is larger, checks each
batch's CRC-32C before it is used (the cleaner never copies damage forward) and
reports every byte read to the throttler.

The cleaner visits every batch of a log twice and most are dropped unread, so the
per-batch cost counts: `iter_batch_fields` yields the header as the raw field tuple
of `protocol.batch.HEADER` (index it with the `F_*` positions), checked by the
shared `storage.scan.SegmentScan` (magic, length, CRC; a failure raises saying what
is wrong), and the caller builds a `BatchHeader` only for the batches it keeps
(building one costs more than the CRC of a 12 KB batch).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from compaction.throttle import Throttler
from protocol.batch import (
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_RECORD_COUNT,
    BatchHeader,
)
from protocol.errors import CorruptMessage
from storage.fileio import FileIO
from storage.scan import SegmentScan

__all__ = [
    "F_ATTRIBUTES",
    "F_BASE_OFFSET",
    "F_LAST_OFFSET_DELTA",
    "F_RECORD_COUNT",
    "iter_batch_fields",
    "iter_file_batches",
]


def iter_batch_fields(
    io: FileIO,
    path: Path,
    *,
    chunk_bytes: int,
    throttler: Throttler | None = None,
) -> Iterator[tuple[memoryview, tuple[int, ...]]]:
    """(bytes, raw header fields) of each batch in `path`, CRC-checked.

    Raises CorruptMessage on a torn or damaged batch: a closed segment handed to the
    cleaner must be whole.
    """
    fd = io.open(path, writable=False)
    try:
        scan = SegmentScan(
            lambda size, position: io.pread(fd, size, position),
            0,
            io.file_size(fd),
            block_bytes=chunk_bytes,
            with_bytes=True,
            crc=True,
            on_read=None if throttler is None else throttler.maybe_throttle,
        )
        for batch in scan:
            assert batch.data is not None  # with_bytes: every batch has its bytes
            yield batch.data, batch.fields
        if scan.problem is not None:
            raise CorruptMessage(f"{path}: bad batch at byte {scan.position}: {scan.problem}")
    finally:
        io.close(fd)


def iter_file_batches(
    io: FileIO,
    path: Path,
    *,
    chunk_bytes: int,
    throttler: Throttler | None = None,
) -> Iterator[tuple[memoryview, BatchHeader]]:
    """`iter_batch_fields` with each header parsed into a BatchHeader."""
    for view, fields in iter_batch_fields(io, path, chunk_bytes=chunk_bytes, throttler=throttler):
        yield view, BatchHeader(*fields)
