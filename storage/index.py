"""Sparse offset and time indexes: numpy memory maps over preallocated files.

On disk (docs/storage.md "File layout"), big-endian, fixed-size entries, no header:

    offset index  8 bytes: int32 relative offset | int32 position in the .log
    time index   12 bytes: int64 timestamp ms    | int32 relative offset

`Index` owns the map, the entry count and the search; `OffsetIndex` and
`TimeIndex` only say what an entry is and when one may be appended. Entries are
written with `pwrite` and read through the shared map (one page cache). Neither
the map nor the writing descriptor stays open: both come from the bounded caches
of `storage.fdcache` and are reopened on demand, and the map keeps no descriptor
(`storage.mapping`), so an index costs nothing while its partition is idle.

Invariants: keys (relative offset, timestamp) strictly increase over the first
`entries` entries; the file is preallocated to `segment.index.bytes` (rounded
down to the entry size) while its segment is active and trimmed to
`entries x entry_size` when it stops being active.

Thread safety: appends, truncation and resizing happen under the owning log's
lock; lookups may run concurrently from other threads. A lookup reads the entry
count first and the map second, and a resize never drops the first `entries`
entries, so a lookup always sees a valid prefix.

After a crash: a preallocated (active) index holds zeros past its last entry
and entries the log may not have; recovery rebuilds such indexes from the log.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import ClassVar

import numpy as np

from storage.fdcache import MAPS, Lazy, LazyFile, open_retried
from storage.fileio import FileIO
from storage.mapping import map_readonly

# Two-level search: numpy's searchsorted copies a big-endian strided column to
# native order first, so search a sample of every STRIDE-th entry, then one run.
SEARCH_STRIDE = 1024
# Entries converted and written per step by `Index.write_file` (a few milliseconds of
# GIL each); a 10 MiB offset index holds 1.3 million entries.
WRITE_CHUNK_ENTRIES = 1 << 15


def index_entry_due(bytes_since_entry: int, index_interval_bytes: int) -> bool:
    """Kafka's sparse-entry rule, for appends, rebuilds and cleaned segments alike: an
    entry for a batch once more than `index.interval.bytes` were written since the last."""
    return bytes_since_entry > index_interval_bytes


class CorruptIndexError(Exception):
    """An index file that does not agree with the rules above; the caller rebuilds it."""


class Index:
    """Base class: one memory-mapped file of fixed-size entries sorted by `KEY`."""

    DTYPE: ClassVar[np.dtype]
    PACKER: ClassVar[struct.Struct]  # the same layout as DTYPE, for writes
    KEY: ClassVar[str]

    @classmethod
    def write_file(cls, io: FileIO, path: Path, entries: list[tuple[int, int]]) -> None:
        """Write a whole index of `entries` (relative to the base) to `path` and fsync it.

        With `pwrite`, not through a map (`msync` holds the GIL), and in pieces of
        WRITE_CHUNK_ENTRIES: converting a million tuples in one numpy call would hold
        the GIL for a tenth of a second.
        """
        fd = open_retried(io, path, create=True)
        try:
            io.ftruncate(fd, 0)
            step = WRITE_CHUNK_ENTRIES
            for start in range(0, len(entries), step):
                part = np.array(entries[start : start + step], dtype=cls.DTYPE)
                io.write_all(fd, part.tobytes(), start * cls.DTYPE.itemsize)
            io.fsync(fd)
        finally:
            io.close(fd)

    def __init__(
        self, path: Path, base_offset: int, io: FileIO, *, preallocate_bytes: int = 0
    ) -> None:
        """Index `path` (created if missing); `preallocate_bytes` starts a new, empty index.

        Nothing stays open: the map and the descriptor appends write through are
        opened on first use and kept in `storage.fdcache` (released when idle).
        """
        self.path = path
        self.base_offset = base_offset
        self._io = io
        if preallocate_bytes:  # a new index: whatever a stale file held is dropped
            length = preallocate_bytes // self.DTYPE.itemsize * self.DTYPE.itemsize
            fd = open_retried(io, path, create=True)
            try:
                if io.file_size(fd):
                    io.ftruncate(fd, 0)
                io.ftruncate(fd, length)
            finally:
                io.close(fd)
            self._entries = 0
        else:
            try:
                length = path.stat().st_size
            except FileNotFoundError:
                io.close(open_retried(io, path, create=True))
                length = 0
            self._entries = length // self.DTYPE.itemsize
        self._length = length
        self._writer = LazyFile(io, path)
        self._map = _LazyMap(io, self._writer, self.DTYPE, length)
        # A length that is not whole entries was not written by us (Kafka: corrupt).
        self.misaligned = length % self.DTYPE.itemsize != 0
        self._dirty = False  # entries or a length not fsynced yet

    @property
    def entry_size(self) -> int:
        return self.DTYPE.itemsize

    @property
    def entries(self) -> int:
        return self._entries

    @property
    def capacity(self) -> int:
        """How many entries fit in the file as it is sized now."""
        return self._length // self.DTYPE.itemsize

    @property
    def size_bytes(self) -> int:
        """Bytes of real entries (Kafka's sizeInBytes), not the file length."""
        return self._entries * self.entry_size

    def _view(self) -> np.ndarray:
        """The map of the file's whole entries (opened on demand; hold it while using it)."""
        if self._length < self.entry_size:
            return np.zeros(0, dtype=self.DTYPE)
        return self._map.get()

    def rename(self, path: Path) -> None:
        """The file was renamed (a deleted segment): reopen it by its new name."""
        self.path = path
        self._writer.path = path

    def resize(self, size_bytes: int) -> None:
        """Set the file length (rounded down to whole entries), keeping the entries."""
        length = max(size_bytes // self.entry_size, self._entries) * self.entry_size
        if length == self._length and not self.misaligned:
            return
        writer = self._writer.get()
        self._io.ftruncate(writer.fd, length)
        self._length = self._map.length = length  # not fsynced: an untrimmed index is harmless
        self._map.drop()  # the next use maps the new length
        self.misaligned = False

    def trim(self) -> None:
        """Shrink the file to its entries: done when the segment stops being active."""
        self.resize(self._entries * self.entry_size)
        self.release_writer()

    @property
    def unsynced(self) -> bool:
        """Entries were written since the last fsync."""
        return self._dirty

    def flush(self) -> None:
        """fsync the entries appended since the last flush: at a roll's flush and at
        close, not every acks=-1 round (docs/storage.md "Flush and the recovery point")."""
        if self._dirty:
            self._dirty = False
            try:
                writer = self._writer.get()  # reopened by path if the cache released it
            except FileNotFoundError:
                # The file is gone under this segment: the cleaner swapped its segment
                # out, or retention deleted it, since the entries were written. Nothing
                # of it is left to make durable, and a live log rebuilds a missing
                # index from its segment at the next start (docs/storage.md "Recovery").
                return
            self._io.fsync(writer.fd)

    def reset(self) -> None:
        """Forget every entry (before a rebuild); the file keeps its length."""
        self._entries = 0

    def _search(self, view: np.ndarray, key: int) -> int:
        """Slot of the last entry whose key is <= `key`, or -1."""
        entries = self._entries
        column = view[self.KEY][:entries]
        coarse = np.searchsorted(column[::SEARCH_STRIDE], key, side="right")
        if coarse == 0:
            return -1
        low = (int(coarse) - 1) * SEARCH_STRIDE
        run = column[low : low + SEARCH_STRIDE]
        return low + int(np.searchsorted(run, key, side="right")) - 1

    def _truncate_entries(self, entries: int) -> None:
        self._entries = min(self._entries, max(entries, 0))

    def _put(self, values: tuple[int, int]) -> None:
        """Write one entry with pwrite, then publish it by bumping the count.

        pwrite, not a store through the map: a first store into a fresh page of
        a shared file mapping takes the file system's page_mkwrite path (block
        allocation under the journal, ~1 ms on a busy ext4), while pwrite only
        dirties the page cache, which the map shares.
        """
        slot = self._entries
        writer = self._writer.get()
        self._io.write_all(writer.fd, self.PACKER.pack(*values), slot * self.entry_size)
        self._dirty = True
        self._entries = slot + 1

    def release_writer(self) -> None:
        """Close the descriptor used for appends (the segment stopped being active)."""
        self._writer.close()

    def keys(self) -> np.ndarray:
        """The keys of all entries, in native order (tests and sanity checks)."""
        return self._view()[self.KEY][: self._entries].astype(np.int64)

    def close(self) -> None:
        """Trim, fsync and drop the map (readers still holding it keep a valid view)."""
        self.resize(self._entries * self.entry_size)
        self.flush()
        self.release_writer()
        self._map.close()


class _LazyMap(Lazy[np.ndarray]):
    """An index's map, opened on demand (storage.fdcache.MAPS); keeps no descriptor.

    It holds what it maps, not the index: an index <-> map cycle kept a deleted
    topic's files mapped until the cyclic GC ran (never, once the heap is frozen).
    """

    __slots__ = ("_io", "_writer", "dtype", "length")

    def __init__(self, io: FileIO, writer: LazyFile, dtype: np.dtype, length: int) -> None:
        self._io, self._writer, self.dtype, self.length = io, writer, dtype, length
        super().__init__(MAPS)

    def _open(self) -> np.ndarray:
        writer = self._writer
        if writer.is_open:
            file = writer.get()  # held for the call: a release cannot close it meanwhile
            return map_readonly(file.fd, self.length, self.dtype)
        fd = writer.open_transient()  # the same file, checked to be the same inode
        try:
            return map_readonly(fd, self.length, self.dtype)
        finally:
            self._io.close(fd)


class OffsetIndex(Index):
    """Maps an offset to a byte position from which a scan finds its batch.

    Entry `(o, p)`: the chunk (one append) starting at byte `p` ends at offset
    `base + o`. `lookup(t)` returns the greatest entry with offset <= t, or
    `(base, 0)`; scanning from there finds the first batch whose last offset >= t.
    """

    DTYPE = np.dtype([("rel", ">i4"), ("pos", ">i4")])
    PACKER = struct.Struct(">ii")
    KEY = "rel"

    def is_full(self) -> bool:
        return self._entries >= self.capacity

    def last_offset(self) -> int:
        if self._entries == 0:
            return self.base_offset
        return self.base_offset + int(self._view()[self._entries - 1]["rel"])

    def append(self, offset: int, position: int) -> None:
        """Add an entry; a full index skips it (sparse lookups stay correct)."""
        if self.is_full():
            return
        relative = offset - self.base_offset
        if self._entries and relative <= int(self._view()[self._entries - 1]["rel"]):
            raise ValueError(f"offset index {self.path}: {offset} is not after the last entry")
        self._put((relative, position))

    def lookup(self, offset: int) -> tuple[int, int]:
        view = self._view()
        slot = self._search(view, offset - self.base_offset)
        if slot < 0:
            return self.base_offset, 0
        entry = view[slot]
        return self.base_offset + int(entry["rel"]), int(entry["pos"])

    def truncate_to(self, offset: int) -> None:
        """Drop entries for offsets >= `offset`."""
        self._truncate_entries(self._search(self._view(), offset - self.base_offset - 1) + 1)

    def sanity_check(self, log_size: int) -> None:
        """Raise CorruptIndexError unless offsets increase and positions lie in the log."""
        if self.misaligned:
            raise CorruptIndexError(f"{self.path}: length is not a multiple of {self.entry_size}")
        if self._entries == 0:
            return
        entries = self._view()[: self._entries]
        rel = entries["rel"].astype(np.int64)
        pos = entries["pos"].astype(np.int64)
        if rel[0] < 0 or np.any(np.diff(rel) <= 0):
            raise CorruptIndexError(f"{self.path}: offsets do not increase")
        if pos[0] < 0 or np.any(np.diff(pos) <= 0) or pos[-1] >= max(log_size, 1):
            raise CorruptIndexError(f"{self.path}: positions are not inside the log")


class TimeIndex(Index):
    """Maps a timestamp to an offset before which no record has a later timestamp.

    Entry `(t, o)`: `t` was the largest timestamp in the segment when written and
    `o` the last offset of the batch where it first appeared, so every record
    with a timestamp > t lies after `o`. Timestamps strictly increase; equal or
    smaller ones are not appended. One slot is kept for the final entry at roll.
    """

    DTYPE = np.dtype([("ts", ">i8"), ("rel", ">i4")])
    PACKER = struct.Struct(">qi")
    KEY = "ts"

    def is_full(self) -> bool:
        return self._entries >= self.capacity - 1

    def last_entry(self) -> tuple[int, int]:
        """(timestamp, offset) of the last entry, or (-1, base) when empty."""
        if self._entries == 0:
            return -1, self.base_offset
        entry = self._view()[self._entries - 1]
        return int(entry["ts"]), self.base_offset + int(entry["rel"])

    def first_timestamp(self) -> int:
        return int(self._view()[0]["ts"]) if self._entries else -1

    def maybe_append(self, timestamp: int, offset: int, *, final: bool = False) -> None:
        """Append if `timestamp` is newer than the last entry and there is room."""
        if self._entries >= self.capacity or (self.is_full() and not final):
            return
        last_ts, last_offset = self.last_entry()
        if timestamp <= last_ts:
            return
        if self._entries and offset < last_offset:
            raise ValueError(f"time index {self.path}: offset {offset} goes backwards")
        self._put((timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> tuple[int, int]:
        """Greatest entry with timestamp <= `timestamp`, or (-1, base)."""
        view = self._view()
        slot = self._search(view, timestamp)
        if slot < 0:
            return -1, self.base_offset
        entry = view[slot]
        return int(entry["ts"]), self.base_offset + int(entry["rel"])

    def truncate_to(self, offset: int) -> None:
        """Drop entries whose offset is >= `offset` (offsets are non-decreasing)."""
        entries = self._entries
        rel = self._view()["rel"][:entries].astype(np.int64)
        keep = int(np.searchsorted(rel, offset - self.base_offset, side="left"))
        self._truncate_entries(keep)

    def sanity_check(self, next_offset: int) -> None:
        if self.misaligned:
            raise CorruptIndexError(f"{self.path}: length is not a multiple of {self.entry_size}")
        if self._entries == 0:
            return
        entries = self._view()[: self._entries]
        ts = entries["ts"].astype(np.int64)
        rel = entries["rel"].astype(np.int64)
        if np.any(np.diff(ts) <= 0) or rel[0] < 0 or np.any(np.diff(rel) < 0):
            raise CorruptIndexError(f"{self.path}: entries are not in order")
        if self.base_offset + rel[-1] >= max(next_offset, self.base_offset + 1):
            raise CorruptIndexError(f"{self.path}: entries point past the log end")
