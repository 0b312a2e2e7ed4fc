"""The index cache: remote segments' `.index` and `.timeindex` objects, in memory.

An index object is fetched whole (one GET), its length checked (whole entries of
storage.index's layout; a body of another length is a truncated or foreign one and
an error), and kept parsed: the keys and values as native int64 columns, so a
look-up is one `searchsorted`. Apart from the chunk cache, so a scan of cold data
never evicts the indexes every read starts from. Capped at `capacity_bytes` of
index entries, least recently used out first (the one in use stays).

Not on disk: an index is ~1/500 of its segment (an entry per index.interval.bytes,
4 KiB), so a 64 MiB cap holds the indexes of ~30 GiB of segments, and a restart
fetches each again once.

Thread safety: any thread; the map is under a lock, fetches happen outside it.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from protocol.errors import RemoteStorageError
from storage.index import OffsetIndex, TimeIndex

__all__ = ["INDEX_CACHE_BYTES", "IndexCache", "IndexCacheStatistics", "RemoteIndex"]

# Default cap of parsed index entries kept (see the module doc).
INDEX_CACHE_BYTES = 64 * 1024 * 1024

# key -> the whole object's bytes: one GET.
FetchObject = Callable[[str], bytes]


@dataclass(frozen=True, slots=True)
class RemoteIndex:
    """A parsed index: `keys` ascending (relative offsets, or timestamps), `values`
    (positions, or relative offsets), both int64, of one segment at `base_offset`."""

    keys: np.ndarray
    values: np.ndarray
    base_offset: int

    @property
    def size_bytes(self) -> int:
        return int(self.keys.nbytes + self.values.nbytes)

    def floor(self, key: int) -> int:
        """Slot of the last entry whose key is <= `key`, or -1."""
        return int(np.searchsorted(self.keys, key, side="right")) - 1


@dataclass(frozen=True, slots=True)
class IndexCacheStatistics:
    hits: int
    misses: int
    size_bytes: int
    capacity_bytes: int


class RemoteOffsetIndex:
    """OffsetIndex.lookup over a RemoteIndex: (offset, position) to start a walk at."""

    __slots__ = ("_index",)

    def __init__(self, index: RemoteIndex) -> None:
        self._index = index

    def lookup(self, offset: int) -> tuple[int, int]:
        index = self._index
        slot = index.floor(offset - index.base_offset)
        if slot < 0:
            return index.base_offset, 0
        return index.base_offset + int(index.keys[slot]), int(index.values[slot])


class RemoteTimeIndex:
    """TimeIndex.lookup over a RemoteIndex: (timestamp, offset) to start a search at."""

    __slots__ = ("_index",)

    def __init__(self, index: RemoteIndex) -> None:
        self._index = index

    def lookup(self, timestamp: int) -> tuple[int, int]:
        index = self._index
        slot = index.floor(timestamp)
        if slot < 0:
            return -1, index.base_offset
        return int(index.keys[slot]), index.base_offset + int(index.values[slot])


def parse_index(key: str, data: bytes, base_offset: int, *, time: bool) -> RemoteIndex:
    """A fetched `.index` (time=False) or `.timeindex` object, checked and parsed."""
    dtype = (TimeIndex if time else OffsetIndex).DTYPE
    if len(data) % dtype.itemsize:
        raise RemoteStorageError(
            f"{key}: {len(data)} bytes is not a whole number of {dtype.itemsize}-byte "
            "index entries (a truncated body)"
        )
    entries = np.frombuffer(data, dtype=dtype)
    key_field, value_field = ("ts", "rel") if time else ("rel", "pos")
    keys = entries[key_field].astype(np.int64)
    values = entries[value_field].astype(np.int64)
    if keys.size > 1 and bool(np.any(np.diff(keys) <= 0)):
        raise RemoteStorageError(f"{key}: index entries are not in order")
    return RemoteIndex(keys, values, base_offset)


class IndexCache:
    """Parsed remote indexes by object key, LRU, capped in bytes."""

    def __init__(self, fetch: FetchObject, *, capacity_bytes: int = INDEX_CACHE_BYTES) -> None:
        self._fetch = fetch
        self.capacity_bytes = capacity_bytes
        self._lock = threading.Lock()
        self._indexes: OrderedDict[str, RemoteIndex] = OrderedDict()
        self._size = 0
        self.hits = self.misses = 0

    def statistics(self) -> IndexCacheStatistics:
        with self._lock:
            return IndexCacheStatistics(self.hits, self.misses, self._size, self.capacity_bytes)

    def get(self, key: str, base_offset: int, *, time: bool) -> RemoteIndex:
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                self.hits += 1
                return index
        index = parse_index(key, self._fetch(key), base_offset, time=time)
        with self._lock:
            self.misses += 1
            old = self._indexes.pop(key, None)
            self._size += index.size_bytes - (0 if old is None else old.size_bytes)
            self._indexes[key] = index
            while self._size > self.capacity_bytes and len(self._indexes) > 1:
                _, victim = self._indexes.popitem(last=False)
                self._size -= victim.size_bytes
        return index
