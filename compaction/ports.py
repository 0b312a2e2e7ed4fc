"""What the cleaner needs from storage, as Protocols (the way retention/rules.py does).

`storage.Log` has these shapes: the cleaner reads a closed segment's batches and
writes a cleaned one only through the log (storage owns the files, their formats
and the index rules) and never opens a segment file by path. Tests and benchmarks
may hand in anything of the same shape.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Protocol

from protocol.batch import BatchHeader
from storage import LogConfig, SegmentInfo

__all__ = ["CleanableLog", "CleanableSegments", "CleanedSegment"]


class CleanedSegment(Protocol):
    """A `.cleaned` segment being written (`storage.cleaned.CleanedSegmentWriter`)."""

    @property
    def size(self) -> int: ...
    def append(self, batch: bytes | memoryview, header: BatchHeader) -> None: ...
    def finish(self, mtime_ns: int | None) -> None: ...
    def abort(self) -> None: ...


class CleanableSegments(Protocol):
    """A partition's segment files as the cleaner reads and writes them
    (`storage.local_log.LocalLog`)."""

    def segment_batches(
        self, base_offset: int, *, chunk_bytes: int, on_read: Callable[[int], None] | None = None
    ) -> Iterator[tuple[memoryview, tuple[int, ...]]]: ...
    def first_batch_timestamp_ms(self, base_offset: int) -> int: ...
    def cleaned_segment_writer(
        self, base_offset: int, *, buffer_bytes: int, on_write: Callable[[int], None] | None = None
    ) -> CleanedSegment: ...


class CleanableLog(Protocol):
    """One partition's log as the cleaner sees it (`storage.Log`)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def config(self) -> LogConfig: ...
    @property
    def log_start_offset(self) -> int: ...
    @property
    def log_end_offset(self) -> int: ...
    @property
    def high_watermark(self) -> int: ...
    @property
    def segment_count(self) -> int: ...
    @property
    def segment_files(self) -> CleanableSegments: ...
    def segments_info(self) -> list[SegmentInfo]: ...
    def replace_segments(self, old_bases: list[int], new_bases: list[int]) -> None: ...
    def producer_batch_ends(self) -> frozenset[int]: ...
