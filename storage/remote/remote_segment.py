"""One remote segment as the read plan sees it: the batches of a `.log` object.

`RemoteSegmentRef` is what the manifest says of an uploaded segment (a
COPY_SEGMENT_FINISHED entry): its object keys, offsets, size, timestamps. A
`RemoteSegmentView` joins it to the caches for one read: `pread` through the chunk
cache, the offset and time indexes through the index cache. It has the shape the
header walks take (storage.segment_walk.Walked, storage.segment_time's segment),
so a remote read finds, walks and cuts batches with the same code as a local one,
and answers the same bytes: whole batches of either layout (protocol.batch
ANY_LAYOUT), exactly as stored.

A remote object is immutable and was whole when uploaded: a header walk that finds
damage in it raises CorruptMessage (never fenced: there is nothing to roll), and a
body shorter than asked for raises RemoteStorageError (retriable) in the cache.

Thread safety: a RemoteSegmentView is used by one read; the caches are shared.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

from protocol.batch import F_MAGIC
from protocol.errors import CorruptMessage
from storage.remote.chunk_cache import ChunkCache
from storage.remote.index_cache import IndexCache, RemoteOffsetIndex, RemoteTimeIndex
from storage.scan import SegmentScan
from storage.segment_walk import find_batch

__all__ = ["RemoteSegmentRef", "RemoteSegmentView"]


@dataclass(frozen=True, slots=True)
class RemoteSegmentRef:
    """A readable remote segment: `stem` is its object key without the suffix
    (`<prefix>/<topic>-<partition>/<base:020d>-<uuid>`); offsets inclusive."""

    stem: str
    base_offset: int
    end_offset: int
    size_bytes: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    layouts: int
    has_txn_index: bool = True  # False: no `.txnindex` object, no GET for it

    @property
    def next_offset(self) -> int:
        return self.end_offset + 1

    @property
    def max_timestamp(self) -> int:
        return self.max_timestamp_ms

    @property
    def log_key(self) -> str:
        return f"{self.stem}.log"


class RemoteSegmentView:
    """A remote segment joined to the caches for one read (see the module doc)."""

    fence_position: int | None = None

    def __init__(self, ref: RemoteSegmentRef, chunks: ChunkCache, indexes: IndexCache) -> None:
        self.ref = ref
        self.base_offset = ref.base_offset
        self.size = ref.size_bytes
        self.next_offset = ref.next_offset
        self.max_timestamp = ref.max_timestamp_ms
        self.log_path = ref.log_key  # named as a local segment's, for messages
        self._chunks = chunks
        self._indexes = indexes
        self._offset_index: RemoteOffsetIndex | None = None
        self._time_index: RemoteTimeIndex | None = None

    @property
    def offset_index(self) -> RemoteOffsetIndex:
        if self._offset_index is None:
            index = self._indexes.get(f"{self.ref.stem}.index", self.base_offset, time=False)
            if index.values.size and int(index.values[-1]) >= max(self.size, 1):
                raise CorruptMessage(f"{self.ref.stem}.index points past its segment's end")
            self._offset_index = RemoteOffsetIndex(index)
        return self._offset_index

    @property
    def time_index(self) -> RemoteTimeIndex:
        if self._time_index is None:
            index = self._indexes.get(f"{self.ref.stem}.timeindex", self.base_offset, time=True)
            self._time_index = RemoteTimeIndex(index)
        return self._time_index

    def pread(self, length: int, position: int) -> bytes:
        return self._chunks.read(self.ref.log_key, self.size, position, length)

    def fence(self, position: int, reason: str) -> NoReturn:
        raise CorruptMessage(f"{self.log_path}: bad batch at byte {position}: {reason}")

    def fenced_error(self, what: str) -> CorruptMessage:  # pragma: no cover - never fenced
        return CorruptMessage(f"{self.log_path}: {what} is damaged")

    def read(self, offset: int, max_bytes: int, *, min_one: bool) -> tuple[bytes, int] | None:
        """The whole batches from the one holding `offset`, up to `max_bytes` (at least
        one with `min_one`), and their layouts; None when no batch holds `offset` or a
        later one (look in the next segment); b"" when nothing fits."""
        found = find_batch(self, offset, self.size, self.fence)
        if found is None:
            return None
        limit = max(max_bytes, found.size) if min_one else max_bytes
        if limit < found.size:
            return b"", 0
        stop = min(self.size, found.position + limit)
        data = self.pread(stop - found.position, found.position)
        view = memoryview(data)
        start = found.position
        scan = SegmentScan(
            lambda size, at: view[at - start : at - start + size],
            start,
            stop,
            block_bytes=len(data),
            whole=stop == self.size,
        )
        layouts = 0
        for batch in scan:
            layouts |= 1 << batch.fields[F_MAGIC]
        if scan.problem is not None:
            self.fence(scan.position, scan.problem)
        length = scan.position - start
        return (data if length == len(data) else data[:length]), layouts
