"""Header walks over one segment's `.log`: the batches of a byte range, the batch
holding an offset, and where damage a walk met begins.

Every reader of a segment that needs batch boundaries (a read's extent,
truncation, load, the timestamp search) walks through here, so the fence and the
damage report are applied in one place. It knows a segment only by the
`Walked` shape (storage.segment.Segment is one), so `segment` can import it
without a cycle. Header-only: no CRC (recovery checks those, see
storage.segment_recovery); the CRC of one batch is read only to blame damage.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

from protocol.batch import (
    ANY_LAYOUT,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    check_crc,
)
from protocol.errors import CorruptMessage
from storage.scan import ScannedBatch, SegmentScan

__all__ = [
    "SCAN_READ_BYTES",
    "BatchPosition",
    "DamageCallback",
    "Walked",
    "culprit",
    "find_batch",
    "iter_batches",
]

# How many bytes a header scan reads at once: many small batches per syscall.
SCAN_READ_BYTES = 64 * 1024
# Called with (byte position, reason) when a read walks into a header that cannot be.
DamageCallback = Callable[[int, str], None]


class OffsetLookup(Protocol):
    """An offset index's look-up (storage.index.OffsetIndex, or a remote segment's)."""

    def lookup(self, offset: int) -> tuple[int, int]: ...


class Walked(Protocol):
    """What a walk reads of a segment: its bytes, their end, the fence, the index."""

    @property
    def size(self) -> int: ...

    @property
    def fence_position(self) -> int | None: ...

    @property
    def offset_index(self) -> OffsetLookup: ...

    def pread(self, length: int, position: int) -> bytes: ...


@dataclass(frozen=True, slots=True)
class BatchPosition:
    """A batch found by a scan: where it starts and what its header says."""

    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    magic: int  # its layout: 1 Tidelog's (§3), 2 Kafka's v2


def iter_batches(
    segment: Walked, start: int, end: int, on_damage: DamageCallback | None = None
) -> Iterator[BatchPosition]:
    """Headers of the whole batches in [start, end), read in blocks; stops at a bad
    one, reporting it to `on_damage` (when `end` is the segment's end, a header that
    does not fit is damage, not a cut). Never walks into the fenced range."""
    fence = segment.fence_position
    if fence is not None:
        end = min(end, fence)
    scan = SegmentScan(segment.pread, start, end, block_bytes=SCAN_READ_BYTES)
    for batch in scan:
        fields = batch.fields
        yield BatchPosition(
            batch.position,
            batch.size,
            fields[F_BASE_OFFSET],
            fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA],
            fields[F_MAX_TIMESTAMP],
            fields[F_MAGIC],
        )
    if scan.problem is not None and on_damage is not None and not scan.header_cut_at_end:
        previous = scan.previous
        before = (
            None
            if previous is None
            else BatchPosition(previous.position, previous.size, 0, 0, 0, 0)
        )
        on_damage(culprit(segment, before, scan.position), scan.problem)


def culprit(segment: Walked, previous: BatchPosition | ScannedBatch | None, position: int) -> int:
    """Where damage a header walk found at `position` starts: at the batch before it
    when that one fails its CRC (a wrong length there led the walk astray)."""
    if previous is None:
        return position
    try:
        check_crc(segment.pread(previous.size, previous.position), layout=ANY_LAYOUT)
    except CorruptMessage:
        return previous.position
    return position


def find_batch(
    segment: Walked, offset: int, end: int | None = None, on_damage: DamageCallback | None = None
) -> BatchPosition | None:
    """The first batch whose last offset is >= `offset`, below byte `end` (the
    offset index only says where the walk starts)."""
    _, start = segment.offset_index.lookup(offset)
    for batch in iter_batches(segment, start, segment.size if end is None else end, on_damage):
        if batch.last_offset >= offset:
            return batch
    return None
