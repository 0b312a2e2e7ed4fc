"""Sequential reading of whole batches from a segment's `.log` file for the cleaner.

Reads in chunks of `chunk_bytes` with positional reads (so readers serving fetches on
the same file are undisturbed), grows the chunk when one batch is larger, checks each
batch's CRC-32C before it is used (the cleaner never copies damage forward) and
reports every byte read to the throttler.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from compaction.throttle import Throttler
from protocol.batch import (
    BATCH_LENGTH_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    BatchHeader,
    check_crc,
    read_header,
)
from protocol.errors import CorruptMessage
from storage.fileio import FileIO

__all__ = ["iter_file_batches"]

_LENGTH = struct.Struct(">i")


def iter_file_batches(
    io: FileIO,
    path: Path,
    *,
    chunk_bytes: int,
    throttler: Throttler | None = None,
    start_position: int = 0,
    end_position: int | None = None,
) -> Iterator[tuple[memoryview, BatchHeader]]:
    """(bytes, header) of each batch in `path` from `start_position` to `end_position`.

    Raises CorruptMessage on a torn or damaged batch: a closed segment handed to the
    cleaner must be whole.
    """
    fd = io.open(path, writable=False)
    try:
        end = io.file_size(fd) if end_position is None else end_position
        pos = start_position
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
                header = check_crc(view, used)  # parses and checks the header too
                yield view[used : used + size], header
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
                yield memoryview(chunk), read_header(chunk, 0)
                used = size
            pos += used
    finally:
        io.close(fd)
