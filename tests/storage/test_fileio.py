from __future__ import annotations

import errno
from pathlib import Path

import pytest

from storage.fileio import FileIO
from tests.faulty_io import FaultyFileIO


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
