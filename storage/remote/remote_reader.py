"""Reads below the local log start: the broker's remote reader and one partition's view.

`RemoteReader` (one per broker) owns the chunk cache (`<data dir>/remote-cache/`,
wiped at start) and the index cache, and turns the store's failures into
RemoteStorageError: any exception of a GET (connection refused, a timeout, a 5xx
after the client's retries, a short body) fails that read only, with a retriable
error, and is counted. `RemoteLog` is one partition's remote tier: the readable
segments of its manifest (COPY_SEGMENT_FINISHED, by base offset) and the three
reads `storage.log.Log` sends below its local log start: records, offset for a
timestamp, the largest timestamp.

Every call blocks on the network: the broker runs them in its remote-read worker
threads under a timeout (broker/remote_read.py), never on the event loop; nothing
here knows trio.

Thread safety: any thread; the caches lock themselves, the counters are under a lock.
"""

from __future__ import annotations

import threading
from bisect import bisect_right
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, cast

import structlog

from protocol.errors import RemoteStorageError, TidelogError
from storage.remote.chunk_cache import CHUNK_BYTES, ChunkCache, ChunkCacheStatistics
from storage.remote.errors import RemoteErrorKind
from storage.remote.errors import RemoteStorageError as StoreError
from storage.remote.index_cache import INDEX_CACHE_BYTES, IndexCache, IndexCacheStatistics
from storage.remote.keys import TXN_INDEX_SUFFIX
from storage.remote.remote_segment import RemoteSegmentRef, RemoteSegmentView
from storage.segment import Segment
from storage.segment_time import find_offset_by_timestamp
from storage.txn_index import AbortedTxn, parse_entries

__all__ = [
    "CACHE_DIR_NAME",
    "CHUNK_CACHE_BYTES",
    "RangeStore",
    "RemoteLog",
    "RemoteReadStatistics",
    "RemoteReader",
]

log = structlog.get_logger("tidelog.storage.remote")

# The chunk cache's directory under the data dir (not a topic name: it has no "-<n>").
CACHE_DIR_NAME = "remote-cache"
# Default cap of the chunk cache on disk: 1 GiB, 1,024 chunks.
CHUNK_CACHE_BYTES = 1024 * 1024 * 1024


class RangeStore(Protocol):
    """What the reader needs of the object store (storage.remote's ObjectStore)."""

    def get_range(self, key: str, start: int, length: int) -> bytes: ...

    def get(self, key: str) -> bytes: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class RemoteReadStatistics:
    chunks: ChunkCacheStatistics
    indexes: IndexCacheStatistics
    gets: int
    errors: int


class RemoteReader:
    """The broker's remote reads: store, caches, error counting."""

    def __init__(
        self,
        store: RangeStore,
        data_dir: Path,
        *,
        chunk_cache_bytes: int = CHUNK_CACHE_BYTES,
        chunk_bytes: int = CHUNK_BYTES,
        index_cache_bytes: int = INDEX_CACHE_BYTES,
    ) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.gets = self.errors = 0
        self.chunks = ChunkCache(
            data_dir / CACHE_DIR_NAME,
            self._get_range,
            capacity_bytes=chunk_cache_bytes,
            chunk_bytes=chunk_bytes,
        )
        self.indexes = IndexCache(self._get, capacity_bytes=index_cache_bytes)
        self._txn_entries: dict[str, tuple[AbortedTxn, ...]] = {}

    def statistics(self) -> RemoteReadStatistics:
        with self._lock:
            gets, errors = self.gets, self.errors
        return RemoteReadStatistics(
            self.chunks.statistics(), self.indexes.statistics(), gets, errors
        )

    def close(self) -> None:
        """Close the store client (its pooled connections); reads after it fail."""
        self._store.close()

    def failed(self) -> None:
        """Count a remote read that failed (the store's error, or one the caller saw)."""
        with self._lock:
            self.errors += 1

    def _get_range(self, key: str, start: int, length: int) -> bytes:
        return self._call(key, lambda: self._store.get_range(key, start, length))

    def _get(self, key: str) -> bytes:
        return self._call(key, lambda: self._store.get(key))

    def _call(self, key: str, get: Callable[[], bytes]) -> bytes:
        with self._lock:
            self.gets += 1
        try:
            return get()
        except TidelogError:
            raise
        except Exception as exc:  # botocore's and urllib3's errors are no OSError
            log.warning("remote_read_failed", key=key, error=f"{type(exc).__name__}: {exc}")
            raise RemoteStorageError(
                f"{key}: the object store failed: {type(exc).__name__}: {exc}"
            ) from exc

    def segment(self, ref: RemoteSegmentRef) -> RemoteSegmentView:
        return RemoteSegmentView(ref, self.chunks, self.indexes)

    def txn_entries(self, ref: RemoteSegmentRef) -> tuple[AbortedTxn, ...]:
        """The aborted transactions of a remote segment's `.txnindex` (no such object:
        none; the uploader puts one only where the segment had entries). Small and
        immutable per upload, so kept for the broker's life, by object stem. A segment
        the manifest says went up without one costs no GET (a listing of hundreds of
        remote segments would otherwise wait on hundreds of 404s)."""
        if not ref.has_txn_index:
            return ()
        with self._lock:
            cached = self._txn_entries.get(ref.stem)
        if cached is not None:
            return cached
        key = f"{ref.stem}{TXN_INDEX_SUFFIX}"
        with self._lock:
            self.gets += 1
        try:
            data = self._store.get(key)
        except StoreError as exc:
            if exc.kind is not RemoteErrorKind.NOT_FOUND:
                raise RemoteStorageError(f"{key}: the object store failed: {exc}") from exc
            data = b""
        except TidelogError:
            raise
        except Exception as exc:  # botocore's and urllib3's errors are no OSError
            raise RemoteStorageError(
                f"{key}: the object store failed: {type(exc).__name__}: {exc}"
            ) from exc
        entries = tuple(parse_entries(data))
        with self._lock:
            self._txn_entries[ref.stem] = entries
        return entries


# The readable segments of one partition's manifest, in base-offset order.
SegmentsSource = Callable[[], Sequence[RemoteSegmentRef]]


class RemoteLog:
    """One partition's remote tier: what `Log` reads below its local log start."""

    def __init__(self, reader: RemoteReader, segments: SegmentsSource, name: str) -> None:
        self.reader = reader
        self._segments = segments
        self.name = name  # "<topic>-<partition>", for messages

    def segments(self) -> Sequence[RemoteSegmentRef]:
        return self._segments()

    def covers(self, offset: int) -> bool:
        """Whether a readable remote segment holds `offset` or a later offset."""
        refs = self._segments()
        return bool(refs) and refs[-1].end_offset >= offset

    def _below(self, local_start: int, start: int) -> list[RemoteSegmentRef]:
        return [
            ref
            for ref in self._segments()
            if ref.base_offset < local_start and ref.end_offset >= start
        ]

    def read(
        self, offset: int, max_bytes: int, *, min_one: bool, local_start: int
    ) -> tuple[bytes, int] | None:
        """Whole batches from the remote segment holding `offset` (or the first later
        one below `local_start`), as a local segment answers; None: none holds it
        (the local log does). RemoteStorageError, CorruptMessage."""
        refs = [ref for ref in self._segments() if ref.base_offset < local_start]
        bases = [ref.base_offset for ref in refs]
        try:
            for ref in refs[max(bisect_right(bases, offset) - 1, 0) :]:
                if ref.end_offset < offset:
                    continue
                found = self.reader.segment(ref).read(offset, max_bytes, min_one=min_one)
                if found is not None:
                    return found
        except RemoteStorageError:
            self.reader.failed()
            raise
        return None

    def aborted_transactions(
        self, offset: int, lso: int, local_start: int
    ) -> tuple[tuple[tuple[int, int], ...], bool, int]:
        """Kafka's collectAbortedTransactions over the remote tier for a read_committed
        read at `offset`: (producer id, first offset) of the aborted transactions meeting
        [offset, upper), whether the search is complete, and `upper` (the end of the
        segment read, at most the LSO) for the local segments to go on with."""
        refs = [ref for ref in self._segments() if ref.base_offset < local_start]
        bases = [ref.base_offset for ref in refs]
        at = max(bisect_right(bases, offset) - 1, 0)
        upper = min(refs[at].next_offset if refs else lso, lso)
        found: list[tuple[int, int]] = []
        try:
            for ref in refs[at:]:
                for entry in self.reader.txn_entries(ref):
                    if entry.last_offset >= offset and entry.first_offset < upper:
                        found.append((entry.producer_id, entry.first_offset))
                    if entry.last_stable_offset >= upper:
                        return tuple(found), True, upper
        except RemoteStorageError:
            self.reader.failed()
            raise
        return tuple(found), False, upper

    def aborted_between(
        self, low: int, high: int, local_start: int
    ) -> tuple[tuple[tuple[int, int], ...], bool]:
        """The aborted transactions meeting [low, high) in the remote segments from the
        one holding `low`, and whether the search is complete (an entry's LSO reached
        `high`)."""
        refs = [ref for ref in self._segments() if ref.base_offset < local_start]
        bases = [ref.base_offset for ref in refs]
        found: list[tuple[int, int]] = []
        try:
            for ref in refs[max(bisect_right(bases, low) - 1, 0) :]:
                for entry in self.reader.txn_entries(ref):
                    if entry.last_offset >= low and entry.first_offset < high:
                        found.append((entry.producer_id, entry.first_offset))
                    if entry.last_stable_offset >= high:
                        return tuple(found), True
        except RemoteStorageError:
            self.reader.failed()
            raise
        return tuple(found), False

    def offset_for_timestamp(
        self, timestamp: int, start: int, local_start: int
    ) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after `start` with a timestamp
        >= `timestamp` in the remote segments below `local_start`, or None. Segments
        whose manifest max timestamp is below `timestamp` are skipped unread."""
        try:
            for ref in self._below(local_start, start):
                if ref.max_timestamp_ms < timestamp:
                    continue
                segment = cast(Segment, self.reader.segment(ref))  # Segment's read shape
                found = find_offset_by_timestamp(segment, timestamp, start, ref.next_offset)
                if found is not None:
                    return found
        except RemoteStorageError:
            self.reader.failed()
            raise
        return None

    def max_timestamp(self, start: int, local_start: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record holding the largest timestamp of the
        remote segments below `local_start` (from the manifest, then one segment's
        records), or None."""
        best: RemoteSegmentRef | None = None
        for ref in self._below(local_start, start):
            if best is None or ref.max_timestamp_ms > best.max_timestamp_ms:
                best = ref
        if best is None or best.max_timestamp_ms < 0:
            return None
        return self.offset_for_timestamp(
            best.max_timestamp_ms, max(start, best.base_offset), local_start
        )

    def max_timestamp_ms(self, start: int, local_start: int) -> int:
        """The largest manifest timestamp below `local_start` (-1: none); no I/O."""
        return max((ref.max_timestamp_ms for ref in self._below(local_start, start)), default=-1)
