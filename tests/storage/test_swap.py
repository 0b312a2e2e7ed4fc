"""The swap of cleaned segments, step by step (storage/swap.py), on real files."""

from __future__ import annotations

from pathlib import Path

from protocol.batch import set_base_offset
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import CLEANED_SUFFIX, SWAP_SUFFIX, log_path, segment_paths
from storage.swap import complete_swaps, promote_swap_files, rename_cleaned_to_swap, scan_log_end
from tests.storage.helpers import BASE_TS, batch


def _batches(base_offset: int, counts: list[int]) -> bytes:
    out, offset = b"", base_offset
    for count in counts:
        data = bytearray(batch(count, tag=offset))
        set_base_offset(data, 0, offset)
        out += bytes(data)
        offset += count
    return out


def _names(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_scan_log_end_stops_at_the_last_whole_batch(tmp_path: Path) -> None:
    path = log_path(tmp_path, 10)
    assert path.write_bytes(b"") == 0 and scan_log_end(FileIO(), path) is None
    data = _batches(10, [2, 3])
    path.write_bytes(data + data[:30])  # a torn batch after two whole ones
    assert scan_log_end(FileIO(), path) == 15


def test_cleaned_files_become_swap_files(tmp_path: Path) -> None:
    for path in segment_paths(tmp_path, 0, CLEANED_SUFFIX):
        path.write_bytes(b"x")
    rename_cleaned_to_swap(FileIO(), tmp_path, [0])
    assert _names(tmp_path) == sorted(p.name for p in segment_paths(tmp_path, 0, SWAP_SUFFIX))


def test_a_complete_swap_replaces_the_originals_in_its_range(tmp_path: Path) -> None:
    log_path(tmp_path, 0).write_bytes(_batches(0, [5]))
    log_path(tmp_path, 5).write_bytes(_batches(5, [5]))
    log_path(tmp_path, 10).write_bytes(_batches(10, [1]))  # past the swap: kept
    cleaned = _batches(9, [1])  # the survivor: offset 9
    log_path(tmp_path, 0, SWAP_SUFFIX).write_bytes(cleaned)
    assert complete_swaps(FileIO(), tmp_path) == [0]
    assert _names(tmp_path) == [log_path(tmp_path, b).name for b in (0, 10)]
    assert log_path(tmp_path, 0).read_bytes() == cleaned


def test_swap_index_files_without_their_log_are_leftovers(tmp_path: Path) -> None:
    log_path(tmp_path, 0).write_bytes(_batches(0, [2]))
    _, index, time_index, _ = segment_paths(tmp_path, 0, SWAP_SUFFIX)
    index.write_bytes(b"")
    time_index.write_bytes(b"")
    assert complete_swaps(FileIO(), tmp_path) == []
    assert _names(tmp_path) == [log_path(tmp_path, 0).name]


def test_promoted_segments_are_open_and_inactive(tmp_path: Path) -> None:
    log_path(tmp_path, 0).write_bytes(_batches(0, [4]))
    log_path(tmp_path, 0, SWAP_SUFFIX).write_bytes(_batches(3, [1]))
    (segment,) = promote_swap_files(FileIO(), tmp_path, LogConfig(), BASE_TS)
    try:
        assert (segment.base_offset, segment.next_offset) == (0, 4)
    finally:
        segment.close()
