"""Reading a closed segment's batches (storage.scan.iter_batch_fields, the cleaner's
`LocalLog.segment_batches`): raw header fields, chunk boundaries, batches larger than a
chunk, and damage (CRC, magic, length, torn tail) refused."""

from __future__ import annotations

import pytest

from protocol.batch import (
    BATCH_LENGTH_OFFSET,
    CRC_START,
    F_BASE_OFFSET,
    F_LAST_OFFSET_DELTA,
    F_RECORD_COUNT,
    MAGIC_OFFSET,
    BatchHeader,
    encode_batch,
    read_header,
    set_base_offset,
)
from protocol.errors import CorruptMessage
from storage.fileio import FileIO
from storage.scan import iter_batch_fields


def segment(tmp_path, sizes):
    """A .log file of batches of `sizes[i]` records each; returns (path, batches)."""
    batches = []
    offset = 0
    for count in sizes:
        data = bytearray(encode_batch([(b"k%d" % i, b"v" * 100, None, 5) for i in range(count)]))
        set_base_offset(data, 0, offset)
        batches.append(bytes(data))
        offset += count
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path, batches


@pytest.mark.parametrize("chunk_bytes", [64, 1000, 1 << 20], ids=["tiny", "mid", "large"])
def test_every_batch_with_its_header_fields(tmp_path, chunk_bytes):
    path, batches = segment(tmp_path, [1, 3, 20, 2, 7])
    got = list(iter_batch_fields(FileIO(), path, chunk_bytes=chunk_bytes))
    assert [bytes(view) for view, _ in got] == batches
    for (_, fields), data in zip(got, batches, strict=True):
        header = read_header(data)
        assert fields[F_BASE_OFFSET] == header.base_offset
        assert fields[F_LAST_OFFSET_DELTA] == header.last_offset_delta
        assert fields[F_RECORD_COUNT] == header.record_count
    headers = [BatchHeader(*fields) for _, fields in got]
    assert headers == [read_header(b) for b in batches]


@pytest.mark.parametrize(
    ("position", "value", "match"),
    [
        pytest.param(CRC_START + 10, 0x55, "CRC", id="crc"),
        pytest.param(MAGIC_OFFSET, 7, "magic", id="magic"),
        pytest.param(BATCH_LENGTH_OFFSET + 3, 5, "batch_length", id="length"),
    ],
)
def test_damaged_second_batch_is_refused(tmp_path, position, value, match):
    path, batches = segment(tmp_path, [2, 2, 2])
    data = bytearray(path.read_bytes())
    second = len(batches[0])
    if position == BATCH_LENGTH_OFFSET + 3:  # a length of 5: shorter than a header
        data[second + BATCH_LENGTH_OFFSET : second + BATCH_LENGTH_OFFSET + 3] = b"\0\0\0"
    data[second + position] = value
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptMessage, match=match):
        list(iter_batch_fields(FileIO(), path, chunk_bytes=1 << 20))


def test_torn_tail_is_refused(tmp_path):
    path, _ = segment(tmp_path, [2, 2])
    path.write_bytes(path.read_bytes()[:-10])
    with pytest.raises(CorruptMessage, match="past the end"):
        list(iter_batch_fields(FileIO(), path, chunk_bytes=1 << 20))
