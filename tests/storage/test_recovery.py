from __future__ import annotations

import os
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from protocol.batch import iter_records
from protocol.errors import CorruptMessage
from storage.config import LogConfig
from storage.files import log_path
from tests.storage.helpers import batch, open_test_log, read_all

SMALL = LogConfig(segment_bytes=1000, index_interval_bytes=100, segment_index_bytes=4096)
ZERO = "00000000000000000000"


def filled(directory: Path, count: int = 30, config: LogConfig = SMALL):
    log = open_test_log(directory, config)
    for i in range(count):
        log.append(batch(1, tag=i))
    return log


def crash_reopen(directory: Path, recovery_point: int = 0, **kwargs):
    return open_test_log(directory, SMALL, clean=False, recovery_point=recovery_point, **kwargs)


def test_torn_tail_truncated_at_every_byte_of_last_batch(tmp_path: Path) -> None:
    last = batch(1, tag=99)
    for cut in range(1, len(last)):
        directory = tmp_path / str(cut)
        log = open_test_log(directory)
        log.append(batch(1))
        log.append(batch(1))
        size = log.active_segment.size
        log.append(last)
        del log
        with open(log_path(directory, 0), "r+b") as f:
            f.truncate(size + cut)
        with capture_logs() as events:
            reopened = open_test_log(directory, clean=False, recovery_point=0)
        assert reopened.log_end_offset == 2
        assert log_path(directory, 0).stat().st_size == size
        truncated = [e for e in events if e["event"] == "recovery_truncated"]
        assert truncated and truncated[0]["bytes"] == cut
        assert reopened.append(batch(1)).base_offset == 2


@pytest.mark.parametrize("tail", [b"\x00" * 200, os.urandom(300), b"\xff" * 13])
def test_garbage_after_the_last_batch_is_cut(tmp_path: Path, tail: bytes) -> None:
    log = filled(tmp_path, 5, LogConfig())
    size = log.active_segment.size
    with open(log_path(tmp_path, 0), "ab") as f:
        f.write(tail)
    reopened = open_test_log(tmp_path, clean=False, recovery_point=0)
    assert reopened.log_end_offset == 5 and reopened.active_segment.size == size


def test_damage_past_recovery_point_removes_later_segments(tmp_path: Path) -> None:
    log = filled(tmp_path)
    infos = log.segments_info()
    victim = infos[1]
    with open(log_path(tmp_path, victim.base_offset), "r+b") as f:
        f.seek(100)
        f.write(b"\xde\xad")
    reopened = crash_reopen(tmp_path, recovery_point=victim.base_offset)
    assert reopened.segment_count == 2
    assert reopened.log_end_offset < victim.next_offset
    assert [o for o, _ in read_all(reopened)] == list(range(reopened.log_end_offset))
    assert not log_path(tmp_path, infos[2].base_offset).exists()


def test_damage_below_recovery_point_is_fenced_not_cut(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.flush()
    infos = log.segments_info()
    victim = infos[0]
    path = log_path(tmp_path, victim.base_offset)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(size - 20)  # a closed segment lost its tail
    with capture_logs() as events:
        reopened = crash_reopen(tmp_path, recovery_point=30)
    assert any(e["event"] == "segment_fenced" for e in events)
    assert reopened.log_end_offset == 30
    assert path.stat().st_size == size - 20  # nothing was cut
    with pytest.raises(CorruptMessage):
        reopened.read(victim.next_offset - 1, 1000)
    assert [r.offset for r in iter_records(reopened.read(0, 1).records)] == [0]
    later = read_all(reopened, infos[1].base_offset)
    assert [o for o, _ in later] == list(range(infos[1].base_offset, 30))


def test_fenced_last_segment_gets_a_new_active_segment(tmp_path: Path) -> None:
    log = filled(tmp_path, 5, LogConfig())
    log.flush()
    with open(log_path(tmp_path, 0), "r+b") as f:
        f.seek(len(batch(1)) * 2 + 20)
        f.write(b"\x00" * 8)
    reopened = open_test_log(tmp_path, clean=False, recovery_point=5)
    assert reopened.log_end_offset == 5
    assert reopened.segment_count == 2
    assert next(iter_records(reopened.read(1, 1).records)).offset == 1
    with pytest.raises(CorruptMessage):
        reopened.read(2, 1000)
    assert reopened.append(batch(1)).base_offset == 5
    assert [o for o, _ in read_all(reopened, 5)] == [5]


@pytest.mark.parametrize("damage", ["delete", "truncate", "zero", "garble"])
def test_damaged_indexes_are_rebuilt(tmp_path: Path, damage: str) -> None:
    log = filled(tmp_path, 60)
    expected = read_all(log)
    expected_ts = [log.offset_for_timestamp(log.active_segment.max_timestamp)]
    log.flush()
    index = tmp_path / f"{ZERO}.index"
    if damage == "delete":
        index.unlink()
        (tmp_path / f"{ZERO}.timeindex").unlink()
    elif damage == "truncate":
        index.write_bytes(index.read_bytes()[:3])
    elif damage == "zero":
        index.write_bytes(b"\x00" * 64)
    else:
        index.write_bytes(b"\x7f\xff\xff\xff" * 16)
    with capture_logs() as events:
        reopened = crash_reopen(tmp_path, recovery_point=60)
    assert any(e["event"] == "index_rebuilt" and e["base_offset"] == 0 for e in events)
    assert read_all(reopened) == expected
    for offset in range(60):
        data = reopened.read(offset, 1).records
        assert next(iter_records(data)).offset <= offset
    assert [reopened.offset_for_timestamp(reopened.active_segment.max_timestamp)] == expected_ts


@pytest.mark.parametrize("damage", ["delete", "truncate"])
def test_a_rebuilt_index_of_an_inactive_segment_holds_every_entry(
    tmp_path: Path, damage: str
) -> None:
    """A rebuild writes into an index sized for its entries: rebuilt into the damaged
    file's length (0 for a deleted one), the index stayed empty or cut short, and
    every lookup in that segment scanned it from the start."""
    log = filled(tmp_path, 60)
    assert log.segment_count > 1
    log.close()
    index, time_index = tmp_path / f"{ZERO}.index", tmp_path / f"{ZERO}.timeindex"
    intact = (index.stat().st_size, time_index.stat().st_size)
    assert intact[0] > 0
    if damage == "delete":
        index.unlink()
        time_index.unlink()
    else:
        index.write_bytes(index.read_bytes()[:3])
        time_index.write_bytes(time_index.read_bytes()[:12])
    crash_reopen(tmp_path, recovery_point=60).close()
    assert (index.stat().st_size, time_index.stat().st_size) == intact


def test_clean_open_does_not_rescan(tmp_path: Path) -> None:
    log = filled(tmp_path)
    log.close()
    with capture_logs() as events:
        reopened = open_test_log(tmp_path, SMALL, clean=True)
    assert not [e for e in events if e["event"] in ("index_rebuilt", "recovery_truncated")]
    assert [o for o, _ in read_all(reopened)] == list(range(30))
    assert reopened.recovery_point == 30


def test_leftovers_are_removed(tmp_path: Path) -> None:
    filled(tmp_path).close()
    (tmp_path / "00000000000000000999.index").write_bytes(b"\x00" * 8)
    (tmp_path / "00000000000000000999.timeindex").write_bytes(b"")
    (tmp_path / "00000000000000000500.log.deleted").write_bytes(b"x")
    (tmp_path / "junk.tmp").write_bytes(b"x")
    with capture_logs() as events:
        open_test_log(tmp_path, SMALL)
    names = {p.name for p in tmp_path.iterdir()}
    assert "00000000000000000999.index" not in names
    assert "00000000000000000999.timeindex" not in names
    assert "00000000000000000500.log.deleted" not in names and "junk.tmp" not in names
    assert any(e["event"] == "orphan_index_deleted" for e in events)


def test_interrupted_cleaning_rolls_back(tmp_path: Path) -> None:
    log = filled(tmp_path)
    expected = read_all(log)
    log.close()
    (tmp_path / f"{ZERO}.log.cleaned").write_bytes(b"partial")
    (tmp_path / "00000000000000000020.log.swap").write_bytes(b"also partial")
    reopened = open_test_log(tmp_path, SMALL, clean=False, recovery_point=0)
    assert read_all(reopened) == expected
    assert not list(tmp_path.glob("*.cleaned")) and not list(tmp_path.glob("*.swap"))


def test_complete_swap_is_promoted(tmp_path: Path) -> None:
    log = filled(tmp_path)
    infos = log.segments_info()
    keep = log.read(infos[1].next_offset - 1, 1).records
    log.close()
    (tmp_path / f"{ZERO}.log.swap").write_bytes(keep)
    # Crash after the swap rename, before the originals went: they are in range.
    reopened = open_test_log(tmp_path, SMALL, clean=False, recovery_point=0)
    offsets = [o for o, _ in read_all(reopened, 0)]
    assert offsets[0] == infos[1].next_offset - 1
    assert offsets[1:] == list(range(infos[2].base_offset, 30))
    assert not log_path(tmp_path, infos[1].base_offset).exists()


def test_log_behind_start_checkpoint_is_reset(tmp_path: Path) -> None:
    filled(tmp_path, 5).close()
    reopened = open_test_log(tmp_path, SMALL, log_start_offset=100)
    assert reopened.log_start_offset == reopened.log_end_offset == 100
    assert reopened.append(batch(1)).base_offset == 100


def test_start_offset_checkpoint_inside_log(tmp_path: Path) -> None:
    filled(tmp_path).close()
    reopened = open_test_log(tmp_path, SMALL, log_start_offset=13)
    assert reopened.log_start_offset == 13 and read_all(reopened)[0][0] == 13
