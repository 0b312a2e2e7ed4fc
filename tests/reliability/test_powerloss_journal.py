"""The power-loss harness's fsync journal reader (tests/reliability/powerloss.py)."""

from __future__ import annotations

from pathlib import Path

from tests.reliability.powerloss import read_journal


def test_a_record_torn_by_the_kill_is_ignored(tmp_path: Path) -> None:
    """A SIGKILL during the write() of a long directory record leaves a short last line
    (seen in `make soak`: a name with no inode); the records before it still count."""
    journal = tmp_path / "fsync.journal"
    journal.write_text("F 11 4096\nD /data/t-0\ta.log/5\tb.index/6\nD /data/t-0\tc.log/7\td.timei")
    synced, entries = read_journal(journal)
    assert synced == {11: 4096}
    assert entries == {("/data/t-0", "a.log", 5), ("/data/t-0", "b.index", 6)}


def test_a_whole_journal_is_read_to_its_last_record(tmp_path: Path) -> None:
    journal = tmp_path / "fsync.journal"
    journal.write_text("F 11 4096\nF 11 8192\nD /d\tx/3\n")
    assert read_journal(journal) == ({11: 8192}, {("/d", "x", 3)})
