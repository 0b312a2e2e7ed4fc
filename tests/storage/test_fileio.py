from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from storage.fileio import FileIO, ReadWouldWait, reads_must_not_wait
from tests.faulty_io import FaultyFileIO
from tests.storage.helpers import drop_from_page_cache


def test_write_atomic_replaces_content(tmp_path: Path) -> None:
    io = FileIO()
    target = tmp_path / "f"
    io.write_atomic(target, b"one")
    io.write_atomic(target, b"two")
    assert target.read_bytes() == b"two"
    assert [p.name for p in tmp_path.iterdir()] == ["f"]


def test_faulty_io_fails_nth_call_then_recovers(tmp_path: Path) -> None:
    io = FaultyFileIO()
    io.fail("pwrite", errno.ENOSPC, nth=2)
    fd = io.open(tmp_path / "x", create=True)
    io.write_all(fd, b"a", 0)
    with pytest.raises(OSError) as info:
        io.write_all(fd, b"b", 1)
    assert info.value.errno == errno.ENOSPC
    io.write_all(fd, b"c", 1)
    assert io.pread(fd, 10, 0) == b"ac"
    io.close(fd)


def test_faulty_io_persistent_and_path_filter(tmp_path: Path) -> None:
    io = FaultyFileIO()
    io.fail("fsync", errno.EIO, persistent=True, path_contains="bad")
    good = io.open(tmp_path / "good", create=True)
    bad = io.open(tmp_path / "bad", create=True)
    io.fsync(good)
    for _ in range(3):
        with pytest.raises(OSError):
            io.fsync(bad)
    io.close(good)
    io.close(bad)


def test_short_writes_are_completed(tmp_path: Path) -> None:
    io = FaultyFileIO()
    fd = io.open(tmp_path / "x", create=True)
    io.short_write_bytes = 2
    io.write_all(fd, b"hello", 0)
    assert io.pread(fd, 10, 0) == b"hello"
    io.close(fd)


# --- reads that must not wait (the event loop's fetch path) -------------------------


def test_reads_that_must_not_wait_serve_the_page_cache_and_refuse_the_disk(
    tmp_path: Path,
) -> None:
    data = os.urandom(64 * 1024)
    path = tmp_path / "f"
    path.write_bytes(data)
    io = FileIO()
    fd = io.open(path, writable=False)
    try:
        with reads_must_not_wait():
            assert io.pread(fd, 4096, 8192) == data[8192:12288]  # just written: cached
        drop_from_page_cache(path)
        with reads_must_not_wait(), pytest.raises(ReadWouldWait):
            io.pread(fd, 4096, 8192)
        assert io.pread(fd, 4096, 8192) == data[8192:12288]  # outside the block: waits
        with reads_must_not_wait():
            assert io.pread(fd, 4096, 8192) == data[8192:12288]  # cached again
    finally:
        io.close(fd)


def test_a_short_read_that_must_not_wait_is_left_to_the_waiting_path(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"x" * 100)
    io = FileIO()
    fd = io.open(path, writable=False)
    try:
        with reads_must_not_wait(), pytest.raises(ReadWouldWait):
            io.pread(fd, 200, 0)  # the end of the file, or an uncached page: it cannot tell
        assert io.pread(fd, 200, 0) == b"x" * 100
    finally:
        io.close(fd)
