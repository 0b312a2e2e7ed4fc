"""The `.cleaned` segment writer: storage-format indexes that storage's own classes accept."""

from __future__ import annotations

import os

from protocol.batch import encode_batch, iter_headers, read_header, set_base_offset
from storage import index as index_module
from storage.cleaned import CleanedSegmentWriter
from storage.fileio import FileIO
from storage.files import CLEANED_SUFFIX, segment_paths
from storage.index import OffsetIndex, TimeIndex


def batch(base_offset: int, ts: int) -> bytes:
    data = bytearray(encode_batch([(b"k%d" % base_offset, b"v" * 200, None, ts)] * 3))
    set_base_offset(data, 0, base_offset)
    return bytes(data)


def write(tmp_path, batches, *, index_bytes=4096, interval=500):
    writer = CleanedSegmentWriter(
        tmp_path, 100, FileIO(), index_interval_bytes=interval, index_bytes=index_bytes,
        buffer_bytes=1000,
    )  # fmt: skip
    for data in batches:
        writer.append(data, read_header(data))
    writer.finish(mtime_ns=1_600_000_000_000_000_000)
    return writer


def test_log_and_indexes_are_valid_storage_files(tmp_path):
    batches = [batch(100 + 3 * i, 1000 + (i % 5) * 10) for i in range(40)]
    writer = write(tmp_path, batches)
    log_path, index_path, time_index_path, _ = segment_paths(tmp_path, 100, CLEANED_SUFFIX)
    data = log_path.read_bytes()
    assert data == b"".join(batches)
    assert writer.size == len(data) and writer.next_offset == 220
    positions = {h.base_offset: pos for pos, h in iter_headers(data)}
    offsets = OffsetIndex(index_path, 100, FileIO())
    offsets.sanity_check(len(data))
    assert 1 < offsets.entries < 40
    for target in (100, 150, 219):
        found_offset, position = offsets.lookup(target)
        assert found_offset <= target and position in positions.values()
    times = TimeIndex(time_index_path, 100, FileIO())
    times.sanity_check(220)
    assert times.last_entry() == (1040, 100 + 3 * 4 + 2)  # largest timestamp, first reached
    assert os.stat(log_path).st_mtime_ns == 1_600_000_000_000_000_000


def test_full_indexes_stop_taking_entries(tmp_path):
    write(tmp_path, [batch(100 + 3 * i, 1000 + i) for i in range(40)], index_bytes=24)
    _, index_path, time_index_path, _ = segment_paths(tmp_path, 100, CLEANED_SUFFIX)
    assert index_path.stat().st_size == 24  # 3 entries of 8 bytes
    assert time_index_path.stat().st_size == 24  # 2 entries of 12 bytes, the last the final one
    times = TimeIndex(time_index_path, 100, FileIO())
    assert times.last_entry()[0] == 1039


def test_abort_removes_every_cleaned_file(tmp_path):
    writer = CleanedSegmentWriter(
        tmp_path, 0, FileIO(), index_interval_bytes=0, index_bytes=4096, buffer_bytes=10
    )
    writer.append(batch(0, 1), read_header(batch(0, 1)))
    writer.abort()
    assert list(tmp_path.iterdir()) == []


def test_indexes_larger_than_one_conversion_step(tmp_path, monkeypatch):
    """Index entries are converted and written in steps; the files hold every entry in
    order across the step boundaries."""
    monkeypatch.setattr(index_module, "WRITE_CHUNK_ENTRIES", 7)
    batches = [batch(100 + 3 * i, 1000 + i) for i in range(40)]
    write(tmp_path, batches, interval=0)
    _, index_path, time_index_path, _ = segment_paths(tmp_path, 100, CLEANED_SUFFIX)
    data = b"".join(batches)
    offsets = OffsetIndex(index_path, 100, FileIO())
    offsets.sanity_check(len(data))
    assert offsets.entries == 39  # every batch after the first
    for i in range(1, 40):
        assert offsets.lookup(100 + 3 * i + 2) == (100 + 3 * i + 2, len(batches[0]) * i)
    times = TimeIndex(time_index_path, 100, FileIO())
    times.sanity_check(220)
    assert times.entries == 39  # one per batch after the first (each a new largest)
    assert times.last_entry() == (1039, 219)
