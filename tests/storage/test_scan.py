"""The one segment-file scanner (storage/scan.py): block reads, cut, count, CRC."""

from __future__ import annotations

from pathlib import Path

import pytest

from protocol.batch import (
    ANY_LAYOUT,
    BATCH_LENGTH_OFFSET,
    CRC_START,
    F_BASE_OFFSET,
    F_RECORD_COUNT,
    MAGIC_OFFSET,
    encode_batch,
)
from storage.fileio import FileIO
from storage.scan import SegmentScan


def _file(tmp_path: Path, counts: list[int], value_bytes: int = 10) -> tuple[Path, list[bytes]]:
    batches, base = [], 0
    for count in counts:
        rows = [(b"k", b"v" * value_bytes, None, 1_000) for _ in range(count)]
        batches.append(encode_batch(rows, base_offset=base))
        base += count
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(b"".join(batches))
    return path, batches


def _scan(path: Path, **kw) -> tuple[SegmentScan, list]:
    io = FileIO()
    fd = io.open(path, writable=False)
    try:
        end = kw.pop("end", io.file_size(fd))
        scan = SegmentScan(lambda n, p: io.pread(fd, n, p), kw.pop("start", 0), end, **kw)
        return scan, list(scan)
    finally:
        io.close(fd)


@pytest.mark.parametrize("block_bytes", [1, 100, 1 << 20], ids=["header", "small", "large"])
@pytest.mark.parametrize("with_bytes", [False, True])
def test_every_batch_whatever_the_block(tmp_path: Path, block_bytes: int, with_bytes: bool) -> None:
    path, batches = _file(tmp_path, [1, 4, 30, 2, 9], value_bytes=20)
    reads: list[int] = []
    scan, got = _scan(
        path, block_bytes=block_bytes, with_bytes=with_bytes, crc=True, on_read=reads.append
    )
    assert [b.fields[F_RECORD_COUNT] for b in got] == [1, 4, 30, 2, 9]
    assert [b.fields[F_BASE_OFFSET] for b in got] == [0, 1, 5, 35, 37]
    assert [b.size for b in got] == [len(b) for b in batches]
    if with_bytes:
        assert [bytes(b.data) for b in got] == batches
    assert (scan.position, scan.problem) == (sum(map(len, batches)), None)
    assert sum(reads) >= sum(map(len, batches))


def test_a_header_only_scan_reads_a_header_alone_after_a_big_batch(tmp_path: Path) -> None:
    path, batches = _file(tmp_path, [200, 200, 200], value_bytes=100)
    reads: list[int] = []
    _, got = _scan(path, block_bytes=4096, on_read=reads.append)
    assert len(got) == 3
    assert sum(reads) < sum(map(len, batches)) // 10  # headers, not the batches


def test_a_header_only_scan_starts_with_the_first_header_alone(tmp_path: Path) -> None:
    """Its batch's size picks the next read: over big batches (a fetch of 110 KB
    batches) only headers are read, never a block the walk then skips."""
    path, _ = _file(tmp_path, [200, 200, 200], value_bytes=100)
    reads: list[int] = []
    _scan(path, block_bytes=4096, on_read=reads.append)
    assert reads == [ANY_LAYOUT.max_size] * 3  # the larger header: either layout fits
    (tmp_path / "small").mkdir()
    small, batches = _file(tmp_path / "small", [1] * 20)
    reads.clear()
    _, got = _scan(small, block_bytes=4096, on_read=reads.append)
    assert len(got) == 20
    assert reads == [ANY_LAYOUT.max_size, sum(map(len, batches[1:]))]  # then one block: the rest


@pytest.mark.parametrize("whole", [True, False])
def test_a_torn_tail_is_damage_only_when_whole(tmp_path: Path, whole: bool) -> None:
    path, batches = _file(tmp_path, [2, 2, 2])
    path.write_bytes(path.read_bytes()[:-7])
    scan, got = _scan(path, block_bytes=1 << 16, whole=whole)
    assert len(got) == 2
    assert scan.position == len(batches[0]) + len(batches[1])
    assert (scan.problem is not None) == whole


@pytest.mark.parametrize(("at", "words"), [(CRC_START + 5, "CRC"), (MAGIC_OFFSET, "magic")])
def test_damage_stops_the_scan_where_it_is(tmp_path: Path, at: int, words: str) -> None:
    path, batches = _file(tmp_path, [1, 1, 1])
    data = bytearray(path.read_bytes())
    data[len(batches[0]) + at] ^= 0x5A
    path.write_bytes(bytes(data))
    scan, got = _scan(path, block_bytes=1 << 16, crc=True)
    assert len(got) == 1
    assert scan.position == len(batches[0])
    assert scan.problem is not None and words in scan.problem
    assert scan.previous is not None and scan.previous.position == 0


@pytest.mark.parametrize(
    ("at", "value", "words"),
    [(MAGIC_OFFSET, 7, "magic"), (BATCH_LENGTH_OFFSET, 3, "below the minimum")],
)
def test_damage_in_a_header_read_alone_stops_the_scan_there(
    tmp_path: Path, at: int, value: int, words: str
) -> None:
    """After a big batch the scan reads the next header alone (a fetch's header walk):
    a bad magic or length there stops it at that batch, as in a block."""
    path, batches = _file(tmp_path, [200, 200, 200], value_bytes=100)
    data = bytearray(path.read_bytes())
    third = len(batches[0]) + len(batches[1])
    size = 1 if at == MAGIC_OFFSET else 4
    data[third + at : third + at + size] = value.to_bytes(size, "big")
    path.write_bytes(bytes(data))
    reads: list[int] = []
    scan, got = _scan(path, block_bytes=4096, on_read=reads.append)
    assert [b.position for b in got] == [0, len(batches[0])]
    assert scan.position == third
    assert scan.problem is not None and words in scan.problem
    assert reads[-1] == ANY_LAYOUT.max_size  # it was read alone


def test_a_crc_flip_passes_when_crc_is_not_asked(tmp_path: Path) -> None:
    path, _ = _file(tmp_path, [1, 1])
    data = bytearray(path.read_bytes())
    data[CRC_START + 3] ^= 0xFF
    path.write_bytes(bytes(data))
    scan, got = _scan(path, block_bytes=1 << 16)
    assert len(got) == 2 and scan.problem is None


def test_few_bytes_before_the_end_are_marked(tmp_path: Path) -> None:
    path, _ = _file(tmp_path, [1])
    path.write_bytes(path.read_bytes() + b"\0" * 9)
    scan, got = _scan(path, block_bytes=1 << 16)
    assert len(got) == 1 and scan.header_cut_at_end and scan.problem is not None
