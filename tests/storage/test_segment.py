"""One segment on its own (storage/segment.py and its walks, time lookups and
recovery beside it): append, index entries, reads, the
recovery rescan, the roll rules and fencing, without a Log around it."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest

from protocol.batch import MAGIC_OFFSET, iter_records, set_base_offset
from protocol.errors import CorruptMessage
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.read_plan import read_bytes
from storage.segment import Segment
from storage.segment_recovery import open_segment, recover
from storage.segment_roll import should_roll
from storage.segment_time import find_offset_by_timestamp
from tests.storage.helpers import BASE_TS, batch

CONFIG = LogConfig(index_interval_bytes=1)


def _chunk(base_offset: int, count: int, ts: int = BASE_TS) -> bytes:
    data = bytearray(batch(count, ts=ts, tag=base_offset))
    set_base_offset(data, 0, base_offset)
    return bytes(data)


def _filled(tmp_path: Path, counts: list[int]) -> tuple[Segment, list[bytes]]:
    segment = Segment.create(tmp_path, 0, FileIO(), CONFIG, now_ms=BASE_TS)
    chunks, offset = [], 0
    for i, count in enumerate(counts):
        chunk = _chunk(offset, count, BASE_TS + i)
        segment.append(
            chunk,
            last_offset=offset + count - 1,
            max_timestamp=BASE_TS + i,
            offset_of_max_timestamp=offset + count - 1,
            index_interval_bytes=CONFIG.index_interval_bytes,
        )
        chunks.append(chunk)
        offset += count
    return segment, chunks


def _read(segment: Segment, offset: int) -> bytes | None:
    """What `Log.read` answers from this one segment (None: look in the next)."""
    extent = segment.extent(offset, 1 << 20, segment.size)
    return None if extent is None else read_bytes(segment, *extent)[0]


def test_appends_are_read_back_from_any_offset(tmp_path: Path) -> None:
    segment, chunks = _filled(tmp_path, [2, 3, 1])
    assert (segment.next_offset, segment.size) == (6, sum(map(len, chunks)))
    data = _read(segment, 3)
    assert data == chunks[1] + chunks[2]  # from the batch holding offset 3
    assert data is not None and [r.offset for r in iter_records(data)] == [2, 3, 4, 5]
    assert _read(segment, 6) is None  # past the end: the next segment
    segment.close()


def test_an_entry_per_batch_past_the_interval(tmp_path: Path) -> None:
    segment, chunks = _filled(tmp_path, [1, 1, 1, 1])
    # Kafka's rule: an entry once more than index.interval.bytes were written before.
    assert segment.offset_index.entries == 3
    assert segment.offset_index.lookup(2) == (2, len(chunks[0]) + len(chunks[1]))
    assert find_offset_by_timestamp(segment, BASE_TS + 2, 0, 4) == (2, BASE_TS + 2)
    segment.close()


def test_recover_rebuilds_the_indexes_and_cuts_a_torn_tail(tmp_path: Path) -> None:
    segment, chunks = _filled(tmp_path, [2, 2, 2])
    entries = segment.offset_index.entries
    segment.close()
    log_file = segment.log_path
    log_file.write_bytes(log_file.read_bytes()[:-5])
    reopened = open_segment(tmp_path, 0, FileIO(), CONFIG, now_ms=BASE_TS)
    result = recover(reopened, CONFIG, fence_below_offset=0)
    assert result.valid_bytes == len(chunks[0]) + len(chunks[1])
    assert result.truncated_bytes == len(chunks[2]) - 5
    assert (reopened.next_offset, reopened.size) == (4, result.valid_bytes)
    assert reopened.offset_index.entries == entries - 1
    assert reopened.max_timestamp == BASE_TS + 1
    reopened.close()


def test_damage_below_the_recovery_point_is_fenced_not_cut(tmp_path: Path) -> None:
    segment, chunks = _filled(tmp_path, [1, 1, 1])
    segment.close()
    data = bytearray(segment.log_path.read_bytes())
    data[len(chunks[0]) + MAGIC_OFFSET] = 0x33
    segment.log_path.write_bytes(bytes(data))
    reopened = open_segment(tmp_path, 0, FileIO(), CONFIG, now_ms=BASE_TS)
    result = recover(reopened, CONFIG, fence_below_offset=10)
    assert result.bad_position == len(chunks[0]) and result.truncated_bytes == 0
    assert reopened.fence_position == len(chunks[0]) and reopened.size == len(data)
    assert _read(reopened, 0) == chunks[0]
    with pytest.raises(CorruptMessage, match="fenced"):
        _read(reopened, 1)
    reopened.close()


def test_roll_rules(tmp_path: Path) -> None:
    segment, chunks = _filled(tmp_path, [1])
    small = LogConfig(segment_bytes=len(chunks[0]) + 10)
    roll = partial(should_roll, segment)
    kw = {"chunk_max_timestamp": BASE_TS, "chunk_last_offset": 1, "now_ms": BASE_TS}
    assert roll(small, chunk_bytes=5, **kw) is None
    assert roll(small, chunk_bytes=len(chunks[0]), **kw) is not None  # full
    empty = Segment.create(tmp_path, 100, FileIO(), small, now_ms=BASE_TS)
    assert should_roll(empty, small, chunk_bytes=1 << 20, **kw) is None  # takes any chunk
    empty.close()
    segment.close()
