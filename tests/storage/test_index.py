from __future__ import annotations

import bisect
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.fileio import FileIO
from storage.index import SEARCH_STRIDE, CorruptIndexError, OffsetIndex, TimeIndex

IO = FileIO()


def make_offset_index(path: Path, base: int = 100, size: int = 8 * 64) -> OffsetIndex:
    index = OffsetIndex(path / "i.index", base, IO)
    index.resize(size)
    return index


def test_offset_index_lookup_and_empty_default(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path)
    assert index.lookup(150) == (100, 0)
    index.append(110, 4000)
    index.append(120, 8000)
    assert index.lookup(109) == (100, 0)
    assert index.lookup(110) == (110, 4000)
    assert index.lookup(119) == (110, 4000)
    assert index.lookup(10_000) == (120, 8000)


def test_offset_index_file_is_big_endian_8_byte_entries(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path, base=100, size=16)
    index.append(101, 7)
    index.flush()
    raw = (tmp_path / "i.index").read_bytes()
    assert raw[:8] == (1).to_bytes(4, "big") + (7).to_bytes(4, "big")
    assert len(raw) == 16


def test_offset_index_preallocation_rounds_down_and_trim(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path, size=8 * 3 + 5)
    assert index.capacity == 3
    index.append(101, 1)
    index.trim()
    assert (tmp_path / "i.index").stat().st_size == 8
    reopened = OffsetIndex(tmp_path / "i.index", 100, IO)
    assert reopened.entries == 1 and reopened.lookup(200) == (101, 1)


def test_offset_index_full_skips_and_rejects_backwards(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path, size=16)
    index.append(101, 1)
    with pytest.raises(ValueError):
        index.append(101, 2)
    index.append(102, 2)
    assert index.is_full()
    index.append(103, 3)
    assert index.entries == 2


def test_offset_index_truncate(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path)
    for i in range(1, 6):
        index.append(100 + i * 10, i * 100)
    index.truncate_to(130)
    assert index.entries == 2 and index.lookup(1000) == (120, 200)
    index.truncate_to(100)
    assert index.entries == 0


def test_offset_index_sanity_check_detects_garbage(tmp_path: Path) -> None:
    index = make_offset_index(tmp_path)
    index.append(110, 100)
    index.append(120, 200)
    index.sanity_check(log_size=300)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(log_size=150)
    # A preallocated file read back after a crash: zeros after the real entries.
    index.flush()
    reopened = OffsetIndex(tmp_path / "i.index", 100, IO)
    assert reopened.entries == reopened.capacity
    with pytest.raises(CorruptIndexError):
        reopened.sanity_check(log_size=300)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 5), min_size=0, max_size=3000),
    st.lists(st.integers(-10, 20_000), min_size=1, max_size=20),
)
def test_offset_index_lookup_matches_bisect(gaps, targets) -> None:
    with tempfile.TemporaryDirectory() as name:
        check_lookups(Path(name), gaps, targets)


def check_lookups(directory: Path, gaps: list[int], targets: list[int]) -> None:
    index = OffsetIndex(directory / "x.index", 0, IO)
    index.resize(8 * (len(gaps) + 1))
    offsets = list(np.cumsum(gaps)) if gaps else []
    for i, offset in enumerate(offsets):
        index.append(int(offset), i * 10)
    for target in targets:
        slot = bisect.bisect_right(offsets, target) - 1
        expected = (0, 0) if slot < 0 else (int(offsets[slot]), slot * 10)
        assert index.lookup(target) == expected
    assert len(offsets) < 2 * SEARCH_STRIDE or index.entries == len(offsets)


def test_time_index_monotonic_rules_and_lookup(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", 50, IO)
    index.resize(12 * 4)
    assert index.lookup(5) == (-1, 50)
    index.maybe_append(1000, 55)
    index.maybe_append(1000, 56)  # equal timestamp: ignored
    index.maybe_append(900, 57)  # older timestamp: ignored
    index.maybe_append(1100, 58)
    assert index.entries == 2
    assert index.lookup(999) == (-1, 50)
    assert index.lookup(1050) == (1000, 55)
    assert index.last_entry() == (1100, 58)
    with pytest.raises(ValueError):
        index.maybe_append(1200, 54)


def test_time_index_keeps_last_slot_for_final_entry(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", 0, IO)
    index.resize(12 * 2)
    index.maybe_append(1, 1)
    assert index.is_full()
    index.maybe_append(2, 2)
    assert index.entries == 1
    index.maybe_append(3, 3, final=True)
    assert index.entries == 2
    index.truncate_to(3)
    assert index.last_entry() == (1, 1)


def test_time_index_sanity_check(tmp_path: Path) -> None:
    index = TimeIndex(tmp_path / "t.timeindex", 0, IO)
    index.resize(12 * 4)
    index.maybe_append(5, 3)
    index.sanity_check(next_offset=4)
    with pytest.raises(CorruptIndexError):
        index.sanity_check(next_offset=3)
