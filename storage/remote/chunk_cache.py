"""The chunk cache: fixed-size, aligned pieces of remote `.log` objects on local disk.

A remote read asks for bytes [position, position + length) of one segment object.
The object is cut into chunks of `chunk_bytes` (chunk `i` is bytes
[i * chunk_bytes, min((i + 1) * chunk_bytes, object size))); each chunk is fetched
whole with one ranged GET, its length checked against what was asked for (a
truncated body is an error, never served), and kept as one file under the cache
directory until the cache is over `capacity_bytes`, when the least recently used
chunks go (never the ones the current read is using).

On-disk format: `<dir>/<sha256(key)[:32]>-<chunk index>.chunk`, the chunk's bytes
exactly. A chunk is written to a `.tmp` name and renamed, so a reader never sees
half a chunk. Objects are immutable (a key names one upload attempt,
docs/tiered-reads.md), so a cached chunk never goes stale.

After a crash or restart: the directory is wiped when the cache opens. Chunks are
not fsynced (a cache fill must not cost an fsync per megabyte), so after a power
loss a file could hold anything; a cold cache costs one GET per chunk again.

Thread safety: every method may be called from any thread; the index of chunks is
under one lock, file reads and writes happen outside it. Two threads missing the
same chunk both fetch it (rare; the second rename replaces the first's file).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from protocol.errors import RemoteStorageError

__all__ = ["CHUNK_BYTES", "ChunkCache", "ChunkCacheStatistics", "FetchRange"]

log = structlog.get_logger("tidelog.storage.remote")

# One ranged GET per MiB: large enough that a GET's ~10-50 ms latency is paid per
# MiB and not per batch, small enough that a 1-batch fetch reads little it does not
# need. Aligned, so two readers of the same bytes share chunks.
CHUNK_BYTES = 1024 * 1024
CHUNK_SUFFIX = ".chunk"
TEMP_SUFFIX = ".tmp"

# (key, start, length) -> the object's bytes [start, start + length): one ranged GET.
FetchRange = Callable[[str, int, int], bytes]


@dataclass(frozen=True, slots=True)
class ChunkCacheStatistics:
    hits: int
    misses: int
    size_bytes: int
    capacity_bytes: int
    chunks: int
    evictions: int
    fetched_bytes: int


class ChunkCache:
    """A size-capped LRU of object chunks in one directory (wiped at open)."""

    def __init__(
        self,
        directory: Path,
        fetch: FetchRange,
        *,
        capacity_bytes: int,
        chunk_bytes: int = CHUNK_BYTES,
    ) -> None:
        if chunk_bytes <= 0 or capacity_bytes < chunk_bytes:
            raise ValueError(
                f"the chunk cache needs room for one chunk: capacity {capacity_bytes} "
                f"< chunk {chunk_bytes} bytes"
            )
        self.directory = directory
        self.chunk_bytes = chunk_bytes
        self.capacity_bytes = capacity_bytes
        self._fetch = fetch
        self._lock = threading.Lock()
        self._chunks: OrderedDict[str, int] = OrderedDict()  # file name -> size, LRU first
        self._size = 0
        self.hits = self.misses = self.evictions = self.fetched_bytes = 0
        if directory.exists():
            shutil.rmtree(directory)
        directory.mkdir(parents=True)

    def statistics(self) -> ChunkCacheStatistics:
        with self._lock:
            return ChunkCacheStatistics(
                self.hits,
                self.misses,
                self._size,
                self.capacity_bytes,
                len(self._chunks),
                self.evictions,
                self.fetched_bytes,
            )

    def read(self, key: str, object_bytes: int, position: int, length: int) -> bytes:
        """Bytes [position, position + length) of the object `key` of `object_bytes`
        (fewer at its end), through the cache. RemoteStorageError when the store fails
        or answers with a body of the wrong length."""
        end = min(position + length, object_bytes)
        if position >= end:
            return b""
        step = self.chunk_bytes
        first, last = position // step, (end - 1) // step
        parts = []
        for index in range(first, last + 1):
            lo = max(position - index * step, 0)
            hi = min(end - index * step, step)
            parts.append(self._piece(key, object_bytes, index, lo, hi))
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def _piece(self, key: str, object_bytes: int, index: int, lo: int, hi: int) -> bytes:
        """Bytes [lo, hi) of chunk `index`: read from its file when cached (only those
        bytes: a header walk reads a few at a time), else fetched whole and kept."""
        name = f"{hashlib.sha256(key.encode()).hexdigest()[:32]}-{index}{CHUNK_SUFFIX}"
        start = index * self.chunk_bytes
        expected = min(self.chunk_bytes, object_bytes - start)
        hi = min(hi, expected)
        path = self.directory / name
        with self._lock:
            cached = name in self._chunks
            if cached:
                self._chunks.move_to_end(name)
        if cached:
            piece = _read_cached(path, expected, lo, hi)
            if piece is not None:
                with self._lock:
                    self.hits += 1
                return piece
        data = self._fetch(key, start, expected)
        if len(data) != expected:
            raise RemoteStorageError(
                f"{key}: the store answered {len(data)} bytes for [{start}, "
                f"{start + expected}), {expected} expected (a truncated body)"
            )
        with self._lock:
            self.misses += 1
            self.fetched_bytes += expected
        self._store(name, path, data)
        return data if lo == 0 and hi == expected else data[lo:hi]

    def _store(self, name: str, path: Path, data: bytes) -> None:
        """Keep a fetched chunk (a disk error only costs the caching, not the read)."""
        temp = path.with_name(f"{name}.{threading.get_ident()}{TEMP_SUFFIX}")
        try:
            temp.write_bytes(data)
            os.replace(temp, path)
        except OSError as exc:
            log.warning("remote_cache_write_failed", path=str(path), errno=exc.errno)
            temp.unlink(missing_ok=True)
            return
        victims: list[str] = []
        with self._lock:
            self._size += len(data) - self._chunks.pop(name, 0)
            self._chunks[name] = len(data)
            while self._size > self.capacity_bytes and len(self._chunks) > 1:
                victim, size = self._chunks.popitem(last=False)
                self._size -= size
                self.evictions += 1
                victims.append(victim)
        for victim in victims:
            (self.directory / victim).unlink(missing_ok=True)


def _read_cached(path: Path, expected: int, lo: int, hi: int) -> bytes | None:
    """Bytes [lo, hi) of a cached chunk file, or None when it is gone (evicted since
    the look-up) or not the chunk's length (then it is fetched again)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        if os.fstat(fd).st_size != expected:
            return None
        data = os.pread(fd, hi - lo, lo)
    finally:
        os.close(fd)
    return data if len(data) == hi - lo else None
