"""Writing one cleaned segment: `<base>.log.cleaned` plus its two `.cleaned` indexes.

Storage writes the segment the cleaner hands batches to (`SegmentFiles.cleaned_segment_writer`):
the files use the storage formats through storage's own index classes
(`OffsetIndex.write_file`, `TimeIndex.write_file`), with the same sparse-entry rule
as an append (`index_entry_due`; the time index only takes a larger timestamp, and
keeps one slot for the final entry). Index entries are collected in memory and
written with `pwrite` + `fsync` at the end, not through a memory map: `msync` holds
the GIL in CPython, and a slow disk would then stall the broker's event loop.
Output is buffered and written in large chunks. `finish()` writes everything, fsyncs
it and stamps the files with the replaced segments' mtime (so time retention of
segments without timestamps is unchanged).

After a crash: `.cleaned` files are incomplete by definition and deleted at startup.
Thread safety: none; one cleaner thread owns one writer.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from protocol.batch import BatchHeader
from storage.fileio import FileIO
from storage.files import CLEANED_SUFFIX, segment_paths
from storage.index import OffsetIndex, TimeIndex, index_entry_due
from storage.txn_index import AbortedTxn, encode_entries

__all__ = ["CleanedSegmentWriter"]


class CleanedSegmentWriter:
    """Accumulates surviving batches of one group into `.cleaned` files."""

    def __init__(
        self,
        directory: Path,
        base_offset: int,
        io: FileIO,
        *,
        index_interval_bytes: int,
        index_bytes: int,
        buffer_bytes: int,
        on_write: Callable[[int], None] | None = None,
    ) -> None:
        """`on_write(n)` is told every n bytes written (the cleaner's throttle)."""
        self.directory = directory
        self.base_offset = base_offset
        self.paths = segment_paths(directory, base_offset, CLEANED_SUFFIX)
        for path in self.paths:  # a leftover of an aborted cleaning
            try:
                io.unlink(path)
            except FileNotFoundError:
                pass
        self._io = io
        self._interval = index_interval_bytes
        self._buffer_limit = max(buffer_bytes, 1)
        self._on_write = on_write
        self._fd = io.open(self.paths[0], create=True)
        self._offset_capacity = index_bytes // OffsetIndex.DTYPE.itemsize
        self._time_capacity = index_bytes // TimeIndex.DTYPE.itemsize
        self._offset_entries: list[tuple[int, int]] = []
        self._time_entries: list[tuple[int, int]] = []
        self._buffer = bytearray()
        self._written = 0
        self._since_entry = 0
        self.size = 0
        self.batches = 0
        self.max_timestamp = -1
        self._offset_of_max_timestamp = -1
        self.next_offset = base_offset
        # AbortedTxn entries the cleaned segment keeps (`.txnindex`), in order.
        self.aborted: list[AbortedTxn] = []

    def append(self, batch: bytes | memoryview, header: BatchHeader) -> None:
        """Add one whole batch (offsets must increase)."""
        position = self.size
        if header.max_timestamp > self.max_timestamp:
            self.max_timestamp = header.max_timestamp
            self._offset_of_max_timestamp = header.last_offset
        if index_entry_due(self._since_entry, self._interval):
            if len(self._offset_entries) < self._offset_capacity:
                self._offset_entries.append((header.last_offset - self.base_offset, position))
            self._add_time_entry(final=False)
            self._since_entry = 0
        self._since_entry += len(batch)
        self._buffer += batch
        self.size += len(batch)
        self.batches += 1
        self.next_offset = header.next_offset
        if len(self._buffer) >= self._buffer_limit:
            self._drain()

    def _drain(self) -> None:
        if self._buffer:
            self._io.write_all(self._fd, self._buffer, self._written)
            if self._on_write is not None:
                self._on_write(len(self._buffer))
            self._written += len(self._buffer)
            self._buffer = bytearray()

    def _add_time_entry(self, *, final: bool) -> None:
        """TimeIndex.maybe_append's rule: only a newer timestamp, one slot kept for the end."""
        limit = self._time_capacity if final else self._time_capacity - 1
        if self._offset_of_max_timestamp < 0 or len(self._time_entries) >= limit:
            return
        if self._time_entries and self.max_timestamp <= self._time_entries[-1][0]:
            return
        self._time_entries.append(
            (self.max_timestamp, self._offset_of_max_timestamp - self.base_offset)
        )

    def finish(self, mtime_ns: int | None) -> None:
        """Write what is buffered and both indexes, fsync everything, set mtimes, close."""
        self._drain()
        self._io.fsync(self._fd)
        self._io.close(self._fd)
        self._fd = -1
        self._add_time_entry(final=True)
        OffsetIndex.write_file(self._io, self.paths[1], self._offset_entries)
        TimeIndex.write_file(self._io, self.paths[2], self._time_entries)
        if self.aborted:  # the source segments' aborted transactions (storage.txn_index)
            self._io.write_atomic(
                self.paths[3], encode_entries(self.aborted), failpoint="txn_index", sync=True
            )
        if mtime_ns is not None:
            for path in self.paths[:3]:
                os.utime(path, ns=(mtime_ns, mtime_ns))

    def add_aborted(self, entries: list[AbortedTxn]) -> None:
        """Keep these AbortedTxn entries in the cleaned segment's `.txnindex`."""
        self.aborted.extend(entries)

    def abort(self) -> None:
        """Close and delete whatever `.cleaned` files remain (the cleaning failed)."""
        if self._fd >= 0:  # not finished: the log file is still open
            try:
                self._io.close(self._fd)
            except OSError:
                pass
            self._fd = -1
        for path in self.paths:
            try:
                self._io.unlink(path)
            except OSError:
                pass
