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

from protocol.batch import CONTROL_MASK, BatchHeader
from protocol.kafka.control import read_marker
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.producer_snapshot import remove_stray_snapshots, restore
from storage.producer_state import CompletedTxn, Marker, ProducerState
from storage.scan import SegmentScan
from storage.segment import Segment
from storage.segment_walk import SCAN_READ_BYTES
from storage.txn_index import AbortedTxn

__all__ = ["rebuild_producer_state", "segment_headers"]


def segment_headers(
    segments: Sequence[Segment], offset: int, markers: dict[int, Marker | None] | None = None
) -> Iterator[BatchHeader]:
    """Headers of the logged batches from the one holding `offset` on, in order (the
    sparse index may start the walk a few batches earlier in that segment: callers
    skip batches that end before `offset`).

    A fenced (damaged) range ends its segment's walk; the walk goes on with the next
    segment, as reads do. Damage the walk meets is not reported here: recovery and
    reads own that. With `markers`, each control batch's marker is read (its bytes:
    one small pread per marker) into it by base offset.
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
            header = BatchHeader(*batch.fields)
            if markers is not None and header.attributes & CONTROL_MASK:
                markers[header.base_offset] = read_marker(segment.pread(batch.size, batch.position))
            yield header


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
    markers: dict[int, Marker | None] = {}
    bases = [s.base_offset for s in segments]

    def replay_from(offset: int) -> None:
        # The `.txnindex` entries of the markers replayed are written again.
        for segment in segments:
            if segment.next_offset > offset:
                segment.txn_index.truncate_from(offset)

    def index_aborted(txn: CompletedTxn, lso: int) -> None:
        if txn.aborted:
            segment = segments[max(bisect.bisect_right(bases, txn.last_offset) - 1, 0)]
            segment.txn_index.append(
                AbortedTxn(txn.producer_id, txn.first_offset, txn.last_offset, lso)
            )

    restore(
        io,
        directory,
        state,
        log_start_offset=log_start_offset,
        log_end_offset=segments[-1].next_offset,
        now_ms=now_ms,
        read_headers=lambda offset: segment_headers(segments, offset, markers),
        read_marker=lambda header: markers.get(header.base_offset),
        on_completed=index_aborted,
        on_replay_start=replay_from,
    )
    return state
