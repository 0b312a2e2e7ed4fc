"""Sequential reading of whole batches from a segment's `.log` file for the cleaner.

Reads in chunks of `chunk_bytes` with positional reads (so readers serving fetches on
the same file are undisturbed), grows the chunk when one batch is larger, checks each
batch's CRC-32C before it is used (the cleaner never copies damage forward) and
reports every byte read to the throttler.

The cleaner visits every batch of a log twice and most are dropped unread, so the
per-batch cost counts: `iter_batch_fields` yields the header as the raw field tuple
of `protocol.batch.HEADER` (index it with the `F_*` positions below), checked as
`protocol.batch.check_crc` checks it (magic, length, CRC; on a failure `check_crc`
itself raises, so the error says what is wrong), and the caller builds a `BatchHeader` only for
the batches it keeps (building one costs more than the CRC of a 12 KB batch).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterator
from pathlib import Path

import crc32c

from compaction.throttle import Throttler
from protocol.batch import (
    BATCH_LENGTH_OFFSET,
    CRC_START,
    HEADER,
    HEADER_SIZE,
    LOG_OVERHEAD,
    MAGIC,
    BatchHeader,
    check_crc,
    read_header,
)
from protocol.errors import CorruptMessage
from storage.fileio import FileIO

__all__ = [
    "F_ATTRIBUTES",
    "F_BASE_OFFSET",
    "F_LAST_OFFSET_DELTA",
    "F_RECORD_COUNT",
    "iter_batch_fields",
    "iter_file_batches",
]

_LENGTH = struct.Struct(">i")
# Positions in a HEADER tuple, from BatchHeader's field order (which follows HEADER's).
_POSITION = {f.name: i for i, f in enumerate(dataclasses.fields(BatchHeader))}
F_BASE_OFFSET = _POSITION["base_offset"]
F_ATTRIBUTES = _POSITION["attributes"]
F_LAST_OFFSET_DELTA = _POSITION["last_offset_delta"]
F_RECORD_COUNT = _POSITION["record_count"]
_F_CRC = _POSITION["crc"]
_F_MAGIC = _POSITION["magic"]


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
    unpack = HEADER.unpack_from
    try:
        end = io.file_size(fd)
        pos = 0
        while pos < end:
            want = min(max(chunk_bytes, HEADER_SIZE), end - pos)
            chunk = io.pread(fd, want, pos)
            if throttler is not None:
                throttler.maybe_throttle(len(chunk))
            view = memoryview(chunk)
            used = 0
            while len(view) - used >= HEADER_SIZE:
                size = _LENGTH.unpack_from(view, used + BATCH_LENGTH_OFFSET)[0] + LOG_OVERHEAD
                if size > len(view) - used:
                    break
                fields = unpack(view, used)
                if (
                    fields[_F_MAGIC] != MAGIC
                    or size < HEADER_SIZE
                    or crc32c.crc32c(view[used + CRC_START : used + size]) != fields[_F_CRC]
                ):
                    check_crc(view, used)  # says precisely what is wrong, and raises
                    raise CorruptMessage(f"{path}: bad batch at byte {pos + used}")
                yield view[used : used + size], fields
                used += size
            if used == 0:
                # One batch larger than the chunk (or a torn tail): read it whole.
                if len(view) < HEADER_SIZE:
                    raise CorruptMessage(f"{path}: torn batch header at byte {pos}")
                size = read_header(view, 0).size
                if pos + size > end:
                    raise CorruptMessage(f"{path}: batch at byte {pos} runs past the end")
                chunk = io.pread(fd, size, pos)
                if throttler is not None:
                    throttler.maybe_throttle(len(chunk))
                check_crc(chunk, 0)
                yield memoryview(chunk), unpack(chunk, 0)
                used = size
            pos += used
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
