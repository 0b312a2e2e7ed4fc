from __future__ import annotations

import errno
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from storage.checkpoint import (
    CheckpointFormatError,
    decode_checkpoint,
    encode_checkpoint,
    read_checkpoint,
    write_checkpoint,
)
from storage.fileio import FileIO
from tests.faulty_io import FaultyFileIO


def test_kafka_text_format() -> None:
    data = encode_checkpoint({("b", 1): 7, ("a", 0): 12})
    assert data == b"0\n2\na 0 12\nb 1 7\n"
    assert decode_checkpoint(data) == {("a", 0): 12, ("b", 1): 7}


@pytest.mark.parametrize(
    "data",
    [b"", b"1\n0\n", b"0\n2\na 0 1\n", b"0\nx\n", b"0\n1\na 0\n", b"\xff\xfe", b"0\n1\na b c\n"],
)
def test_malformed_checkpoints_raise(data: bytes) -> None:
    with pytest.raises(CheckpointFormatError):
        decode_checkpoint(data)


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=64))
def test_arbitrary_bytes_decode_or_raise_one_error(data: bytes) -> None:
    try:
        decode_checkpoint(data)
    except CheckpointFormatError:
        pass


def test_missing_or_corrupt_file_reads_empty(tmp_path: Path) -> None:
    io = FileIO()
    assert read_checkpoint(io, tmp_path / "nope") == {}
    (tmp_path / "bad").write_bytes(b"garbage")
    assert read_checkpoint(io, tmp_path / "bad") == {}


def test_failed_write_keeps_old_checkpoint(tmp_path: Path) -> None:
    io = FaultyFileIO()
    path = tmp_path / "recovery-point-offset-checkpoint"
    write_checkpoint(io, path, {("t", 0): 5})
    io.fail("fsync", errno.EIO)
    with pytest.raises(OSError):
        write_checkpoint(io, path, {("t", 0): 9})
    assert read_checkpoint(io, path) == {("t", 0): 5}
    io.clear()
    write_checkpoint(io, path, {("t", 0): 9})
    assert read_checkpoint(io, path) == {("t", 0): 9}
    assert not path.with_name(path.name + ".tmp").exists()
