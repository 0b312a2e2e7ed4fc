"""A log's producer state from its files: the newest snapshot plus the batches after it.

The pure pieces (`storage.producer_state`, `storage.producer_snapshot`) know nothing of
segments; this module walks a log's segments for them. Used when a log is opened
and after its tail is truncated, both times before the log takes appends, so no lock
is needed: the segments are not written meanwhile.

Cost: with a snapshot at the log end (a clean shutdown wrote it) nothing is read;
after a crash only the batches after the newest snapshot (the last roll's) are
walked, header by header (`storage.scan.SegmentScan`, no payload reads for big
batches). A log written before producer state existed has no snapshot: its first
start walks every header once, the snapshots taken from then on spare the next ones.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Sequence
from pathlib import Path

from protocol.batch import BatchHeader
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.producer_snapshot import remove_stray_snapshots, restore
from storage.producer_state import ProducerState
from storage.scan import SegmentScan
from storage.segment import Segment
from storage.segment_walk import SCAN_READ_BYTES

__all__ = ["rebuild_producer_state", "segment_headers"]


def segment_headers(segments: Sequence[Segment], offset: int) -> Iterator[BatchHeader]:
    """Headers of the logged batches from the one holding `offset` on, in order (the
    sparse index may start the walk a few batches earlier in that segment: callers
    skip batches that end before `offset`).

    A fenced (damaged) range ends its segment's walk; the walk goes on with the next
    segment, as reads do. Damage the walk meets is not reported here: recovery and
    reads own that.
    """
    if not segments or offset >= segments[-1].next_offset:
        return  # nothing at or past the log end (a clean stop's snapshot): read nothing
    bases = [s.base_offset for s in segments]
    first = max(bisect.bisect_right(bases, offset) - 1, 0)
    for i in range(first, len(segments)):
        segment = segments[i]
        start = segment.offset_index.lookup(offset)[1] if i == first else 0
        end = segment.size if segment.fence_position is None else segment.fence_position
        for batch in SegmentScan(segment.pread, start, end, block_bytes=SCAN_READ_BYTES):
            yield BatchHeader(*batch.fields)


def rebuild_producer_state(
    io: FileIO,
    directory: Path,
    segments: Sequence[Segment],
    config: LogConfig,
    *,
    name: str,
    log_start_offset: int,
    now_ms: int,
) -> ProducerState:
    """The producer state of a log made of `segments` (the last one active).

    Snapshots matching no segment base are removed first (Kafka's
    removeStraySnapshots: those of segments deleted or merged by the cleaner),
    except one above every base (a clean shutdown's, at the log end).
    """
    state = ProducerState(name, expiration_ms=config.producer_id_expiration_ms)
    remove_stray_snapshots(io, directory, [s.base_offset for s in segments])
    restore(
        io,
        directory,
        state,
        log_start_offset=log_start_offset,
        log_end_offset=segments[-1].next_offset,
        now_ms=now_ms,
        read_headers=lambda offset: segment_headers(segments, offset),
    )
    return state
