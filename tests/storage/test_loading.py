"""Opening one segment's files and listing a partition directory (storage/loading.py)."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from protocol.batch import set_base_offset
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import DELETED_SUFFIX, log_path, segment_paths
from storage.loading import load_segment, segment_files, unlink_logged
from storage.segment import Segment
from tests.storage.helpers import BASE_TS, batch


def test_segment_files_lists_parsed_names_in_order(tmp_path: Path) -> None:
    log_path(tmp_path, 7).write_bytes(b"")
    log_path(tmp_path, 3, DELETED_SUFFIX).write_bytes(b"")
    (tmp_path / "notes.txt").write_bytes(b"")
    found = [(p.name, n.base_offset, n.transient) for p, n in segment_files(tmp_path)]
    assert found == [
        (log_path(tmp_path, 3, DELETED_SUFFIX).name, 3, DELETED_SUFFIX),
        (log_path(tmp_path, 7).name, 7, ""),
    ]


def test_unlink_logged_logs_only_what_it_removed(tmp_path: Path) -> None:
    path = tmp_path / "x.log"
    path.write_bytes(b"")
    with capture_logs() as logs:
        unlink_logged(FileIO(), path, "gone", base_offset=1)
        unlink_logged(FileIO(), path, "gone", base_offset=1)
    assert not path.exists()
    assert [(e["event"], e["base_offset"]) for e in logs] == [("gone", 1)]


def test_a_segment_without_its_indexes_needs_a_rebuild(tmp_path: Path) -> None:
    data = bytearray(batch(2))
    set_base_offset(data, 0, 0)
    segment = Segment.create(tmp_path, 0, FileIO(), LogConfig(), now_ms=BASE_TS)
    segment.append(
        bytes(data),
        last_offset=1,
        max_timestamp=BASE_TS,
        offset_of_max_timestamp=1,
        index_interval_bytes=4096,
    )
    segment.become_inactive()
    segment.close()
    loaded, rebuild = load_segment(FileIO(), tmp_path, 0, LogConfig(), BASE_TS, thorough=True)
    loaded.close()
    assert rebuild is False
    segment_paths(tmp_path, 0)[1].unlink()
    with capture_logs() as logs:
        loaded, rebuild = load_segment(FileIO(), tmp_path, 0, LogConfig(), BASE_TS, thorough=True)
    loaded.close()
    assert rebuild is True
    assert [e["event"] for e in logs] == ["index_missing"]
