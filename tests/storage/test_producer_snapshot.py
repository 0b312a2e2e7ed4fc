"""Producer state snapshots: format round trip, torn and corrupt files, listing,
deletion and a restore from snapshot plus log."""

from __future__ import annotations

import errno
from pathlib import Path

import crc32c
import pytest

from protocol.batch import encode_batch, iter_headers, set_base_offset
from storage.fileio import FileIO
from storage.producer_snapshot import (
    CorruptSnapshotError,
    decode_snapshot,
    delete_snapshots_below,
    encode_snapshot,
    list_snapshots,
    load_latest_snapshot,
    read_snapshot,
    remove_stray_snapshots,
    restore,
    snapshot_path,
    write_snapshot,
)
from storage.producer_state import BatchMetadata, ProducerEntry, ProducerState
from tests.faulty_io import FaultyFileIO

ENTRIES = {
    7: ProducerEntry(0, (BatchMetadata(0, 4, 10, 14, 1000),), 1000),
    2**40: ProducerEntry(
        32767,
        tuple(BatchMetadata(s, s, 20 + s, 20 + s, 2000 + s) for s in range(5)),
        2004,
    ),
    9: ProducerEntry(3, (), -1),
}


def test_round_trip() -> None:
    data = encode_snapshot(123, ENTRIES)
    assert decode_snapshot(data, 123) == ENTRIES
    assert decode_snapshot(encode_snapshot(0, {}), 0) == {}


def test_file_name_has_twenty_digits(tmp_path: Path) -> None:
    assert snapshot_path(tmp_path, 123).name == "00000000000000000123.snapshot"


def test_every_torn_length_is_refused() -> None:
    data = encode_snapshot(5, ENTRIES)
    for length in range(len(data)):
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(data[:length], 5)


def test_every_flipped_byte_is_refused() -> None:
    data = encode_snapshot(5, ENTRIES)
    for pos in range(len(data)):
        damaged = bytearray(data)
        damaged[pos] ^= 0x01
        with pytest.raises(CorruptSnapshotError):
            decode_snapshot(bytes(damaged), 5)


def test_trailing_bytes_and_wrong_offset_are_refused() -> None:
    data = encode_snapshot(5, ENTRIES)
    with pytest.raises(CorruptSnapshotError, match="name says 6"):
        decode_snapshot(data, 6)
    # Trailing bytes with a recomputed CRC: the structure check catches them.
    longer = bytearray(data + b"\0")
    longer[2:6] = crc32c.crc32c(bytes(longer[6:])).to_bytes(4, "big")
    with pytest.raises(CorruptSnapshotError, match="1 bytes after"):
        decode_snapshot(bytes(longer), 5)


def test_write_read_list_and_delete(tmp_path: Path) -> None:
    io = FileIO()
    for offset in (0, 10, 25):
        write_snapshot(io, tmp_path, offset, ENTRIES)
    (tmp_path / "00000000000000000010.log").write_bytes(b"")
    (tmp_path / "00000000000000000030.snapshot.tmp").write_bytes(b"x")
    assert [o for o, _ in list_snapshots(tmp_path)] == [0, 10, 25]
    assert read_snapshot(io, snapshot_path(tmp_path, 10), 10) == ENTRIES
    deleted = delete_snapshots_below(io, tmp_path, 25)
    assert deleted == [snapshot_path(tmp_path, 0), snapshot_path(tmp_path, 10)]
    assert [o for o, _ in list_snapshots(tmp_path)] == [25]


def test_failed_rename_keeps_the_old_snapshot(tmp_path: Path) -> None:
    io = FaultyFileIO()
    write_snapshot(io, tmp_path, 10, ENTRIES)
    io.fail("rename", errno.ENOSPC)
    with pytest.raises(OSError):
        write_snapshot(io, tmp_path, 10, {})
    assert read_snapshot(io, snapshot_path(tmp_path, 10), 10) == ENTRIES
    assert [p.name for p in tmp_path.iterdir()] == ["00000000000000000010.snapshot"]


def test_latest_snapshot_skips_and_deletes_a_torn_one(tmp_path: Path) -> None:
    io = FileIO()
    write_snapshot(io, tmp_path, 10, ENTRIES)
    newest = write_snapshot(io, tmp_path, 20, {})
    newest.write_bytes(newest.read_bytes()[:-1])
    write_snapshot(io, tmp_path, 30, {})
    loaded = load_latest_snapshot(io, tmp_path, 29)
    assert loaded is not None
    assert (loaded.offset, loaded.entries) == (10, ENTRIES)
    assert not newest.exists()
    assert load_latest_snapshot(io, tmp_path, 9) is None


def test_remove_stray_snapshots_keeps_the_newest_above_every_segment(tmp_path: Path) -> None:
    io = FileIO()
    for offset in (0, 5, 10, 15, 40):
        write_snapshot(io, tmp_path, offset, {})
    removed = remove_stray_snapshots(io, tmp_path, [0, 10, 20])
    assert sorted(p.name[:20] for p in removed) == [f"{5:020d}", f"{15:020d}"]
    assert [o for o, _ in list_snapshots(tmp_path)] == [0, 10, 40]
    removed = remove_stray_snapshots(io, tmp_path, [0, 10, 50])
    assert [o for o, _ in list_snapshots(tmp_path)] == [0, 10]


def _logged(batches: list[tuple[int, int, int, int]]) -> tuple[ProducerState, bytes, list[int]]:
    """Append (pid, epoch, seq, count) batches; returns live state, the log bytes and
    the map end offset after each batch."""
    state = ProducerState()
    log = bytearray()
    ends = []
    for pid, epoch, seq, n in batches:
        batch = bytearray(
            encode_batch(
                [(b"k", b"v", None, 5000)] * n,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
            )
        )
        pending = state.begin_append()
        pending.check(pid, epoch, seq, n - 1, 5000, state.map_end_offset)
        set_base_offset(batch, 0, state.map_end_offset)
        state.commit(pending, state.map_end_offset + n)
        log += batch
        ends.append(state.map_end_offset)
    return state, bytes(log), ends


def _restore(
    directory: Path, state: ProducerState, log: bytes, start: int, end: int, now: int
) -> int:
    """Restore `state` from `directory` and the whole `log` (read_headers ignores the offset:
    restore skips what lies before its replay start)."""
    return restore(
        FileIO(),
        directory,
        state,
        log_start_offset=start,
        log_end_offset=end,
        now_ms=now,
        read_headers=lambda _offset: (header for _, header in iter_headers(log)),
    )


def test_restore_from_a_snapshot_plus_the_log_equals_the_live_state(tmp_path: Path) -> None:
    io = FileIO()
    batches = [
        (1, 0, 0, 2),
        (2, 0, 0, 1),
        (1, 0, 2, 3),
        (-1, -1, -1, 4),
        (2, 0, 1, 1),
        (1, 1, 0, 1),
    ]
    live, log, ends = _logged(batches)
    # A snapshot taken mid-log, after the third batch.
    partial, _, _ = _logged(batches[:3])
    write_snapshot(io, tmp_path, ends[2], partial.entries())
    # One beyond the log end (a truncated tail): must be ignored and deleted.
    write_snapshot(io, tmp_path, ends[-1] + 5, {})
    rebuilt = ProducerState()
    start = _restore(tmp_path, rebuilt, log, 0, ends[-1], 5000)
    assert start == ends[2]
    assert rebuilt.entries() == live.entries()
    assert rebuilt.map_end_offset == ends[-1]
    assert [o for o, _ in list_snapshots(tmp_path)] == [ends[2]]


def test_restore_after_a_truncation_forgets_the_cut_batches(tmp_path: Path) -> None:
    batches = [(1, 0, 0, 2), (1, 0, 2, 2), (1, 0, 4, 2)]
    _, log, ends = _logged(batches)
    expected, _, _ = _logged(batches[:2])
    rebuilt = ProducerState()
    _restore(tmp_path, rebuilt, log, 0, ends[1], 0)
    assert rebuilt.entries() == expected.entries()


def test_restore_drops_expired_producers_and_those_below_the_log_start(tmp_path: Path) -> None:
    _, log, ends = _logged([(1, 0, 0, 2), (2, 0, 0, 2)])
    rebuilt = ProducerState(expiration_ms=1000)
    _restore(tmp_path, rebuilt, log, 2, ends[-1], 5000)
    assert set(rebuilt.entries()) == {2}
    _restore(tmp_path, rebuilt, log, 0, ends[-1], 6000)
    assert rebuilt.entries() == {}
