"""storage/producer_log.py on real segments, without a Log around them: the header walk
from an offset across segments, and the producer state rebuilt from a snapshot plus
the batches after it (what opening a log does)."""

from __future__ import annotations

from pathlib import Path

from protocol.batch import encode_batch, set_base_offset
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.producer_log import rebuild_producer_state, segment_headers
from storage.producer_snapshot import list_snapshots, write_snapshot
from storage.producer_state import ProducerState
from storage.segment import Segment
from tests.storage.helpers import BASE_TS

CONFIG = LogConfig(index_interval_bytes=1)
PID = 11


def _batch(base_offset: int, count: int, *, pid: int = -1, seq: int = -1) -> bytes:
    data = bytearray(
        encode_batch(
            [(b"k", b"v%d" % i, None, BASE_TS) for i in range(count)],
            producer_id=pid,
            producer_epoch=0 if pid >= 0 else -1,
            base_sequence=seq,
        )
    )
    set_base_offset(data, 0, base_offset)
    return bytes(data)


def _segments(directory: Path, layout: list[list[tuple[int, int]]]) -> list[Segment]:
    """Segments of batches given as (count, producer sequence or -1), offsets in order."""
    segments, offset = [], 0
    for batches in layout:
        segment = Segment.create(directory, offset, FileIO(), CONFIG, now_ms=BASE_TS)
        for count, seq in batches:
            chunk = _batch(offset, count, pid=PID if seq >= 0 else -1, seq=seq)
            segment.append(
                chunk,
                last_offset=offset + count - 1,
                max_timestamp=BASE_TS,
                offset_of_max_timestamp=offset + count - 1,
                index_interval_bytes=CONFIG.index_interval_bytes,
            )
            offset += count
        segments.append(segment)
    return segments


def test_headers_start_at_the_batch_holding_the_offset_and_cross_segments(
    tmp_path: Path,
) -> None:
    segments = _segments(tmp_path, [[(2, -1), (3, -1)], [(1, -1), (4, -1)]])
    # The sparse index may start the walk earlier in the offset's segment, never later.
    from_three = [h.base_offset for h in segment_headers(segments, 3)]
    assert from_three[-3:] == [2, 5, 6] and set(from_three[:-3]) <= {0}
    from_seven = [h.base_offset for h in segment_headers(segments, 7)]
    assert from_seven[-1] == 6 and set(from_seven[:-1]) <= {5}
    assert [h.base_offset for h in segment_headers(segments, 0)] == [0, 2, 5, 6]
    assert list(segment_headers(segments, 10)) == []  # at the log end: nothing to read
    for segment in segments:
        segment.close()


def test_the_state_is_rebuilt_from_the_batches_when_there_is_no_snapshot(
    tmp_path: Path,
) -> None:
    segments = _segments(tmp_path, [[(2, 0), (1, -1)], [(3, 2)]])
    state = rebuild_producer_state(
        FileIO(), tmp_path, segments, CONFIG, name="t-0", log_start_offset=0, now_ms=BASE_TS
    )
    entry = state.entry(PID)
    assert entry is not None and (entry.last_sequence, entry.last_offset) == (4, 5)
    assert state.map_end_offset == 6
    for segment in segments:
        segment.close()


def test_a_snapshot_at_the_log_end_is_loaded_and_strays_are_removed(tmp_path: Path) -> None:
    segments = _segments(tmp_path, [[(2, 0)], [(3, 2)]])
    # The state a clean stop wrote, at the log end (5).
    snapshot_state = ProducerState("t-0", expiration_ms=CONFIG.producer_id_expiration_ms)
    snapshot_state.replay(segment_headers(segments, 0))
    write_snapshot(FileIO(), tmp_path, 5, snapshot_state.entries())
    write_snapshot(FileIO(), tmp_path, 1, {})  # matches no segment base: a stray
    state = rebuild_producer_state(
        FileIO(), tmp_path, segments, CONFIG, name="t-0", log_start_offset=0, now_ms=BASE_TS
    )
    assert [at for at, _ in list_snapshots(tmp_path)] == [5]
    entry = state.entry(PID)
    assert entry is not None and (entry.last_sequence, entry.last_offset) == (4, 4)
    for segment in segments:
        segment.close()
