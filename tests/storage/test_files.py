from __future__ import annotations

from pathlib import Path

import pytest

from storage import files


def test_segment_names_are_twenty_digits() -> None:
    assert files.log_path(Path("/d"), 123).name == "00000000000000000123.log"
    assert files.index_path(Path("/d"), 0).name == "00000000000000000000.index"
    assert (
        files.time_index_path(Path("/d"), 5, ".swap").name == "00000000000000000005.timeindex.swap"
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("00000000000000000123.log", (123, ".log", "")),
        ("00000000000000000123.index.deleted", (123, ".index", ".deleted")),
        ("00000000000000000000.timeindex.swap", (0, ".timeindex", ".swap")),
        ("00000000000000000000.log.cleaned", (0, ".log", ".cleaned")),
        ("00000000000000000000.txt", None),
        ("123.log", None),
        ("00000000000000000000.log.bogus", None),
        ("recovery-point-offset-checkpoint", None),
    ],
)
def test_parse_segment_file_name(name: str, expected: tuple | None) -> None:
    parsed = files.parse_segment_file_name(name)
    if expected is None:
        assert parsed is None
    else:
        assert parsed == files.SegmentFileName(*expected)


@pytest.mark.parametrize(
    "name", ["", ".", "..", "a/b", "../x", "a b", "x" * 250, "caf\u00e9", "a\x00b"]
)
def test_illegal_topic_names(name: str) -> None:
    assert files.validate_topic_name(name) is not None


@pytest.mark.parametrize("name", ["a", "orders", "a.b-c_d", "x" * 249, "..."])
def test_legal_topic_names(name: str) -> None:
    assert files.validate_topic_name(name) is None


def test_partition_dir_round_trip_splits_at_last_dash() -> None:
    assert files.parse_partition_dir_name(files.partition_dir_name("a-b", 7)) == ("a-b", 7)
    assert files.parse_partition_dir_name("topics") is None
    assert files.parse_partition_dir_name("a-b.123-delete") is None


def test_deletion_queue_releases_only_due_files(tmp_path: Path) -> None:
    queue = files.DeletionQueue()
    early, late = tmp_path / "a.deleted", tmp_path / "b.deleted"
    early.write_bytes(b"x")
    late.write_bytes(b"y")
    queue.add([early], 100)
    queue.add([late], 200)
    due = queue.take_due(150)
    assert due == [early]
    assert queue.pending() == [(late, 200)]
    assert files.delete_marked_files([*due, tmp_path / "missing"]) == 1
    assert not early.exists() and late.exists()
