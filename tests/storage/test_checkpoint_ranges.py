"""Checkpoint offsets are checked against the range they will be used in (issue 23,
the class behind finding 8: load trusts nothing it did not verify). A log start
offset above int64 used to delete every segment and start the log past int64,
where every API then failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from storage.checkpoint import CheckpointFormatError, decode_checkpoint
from storage.files import LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT
from storage.manager import LogManager
from tests.storage.helpers import ManualClock, batch


@pytest.mark.parametrize(
    "line", ["t 0 18446744073709551616", "t 0 -7", "t -1 5", "t 99999999999999999999 5"]
)
def test_out_of_range_entries_make_the_file_malformed(line: str) -> None:
    with pytest.raises(CheckpointFormatError, match="range"):
        decode_checkpoint(f"0\n1\n{line}\n".encode())


@pytest.mark.parametrize("name", [LOG_START_OFFSET_CHECKPOINT, RECOVERY_POINT_CHECKPOINT])
def test_a_huge_checkpoint_offset_costs_no_data(tmp_path: Path, name: str) -> None:
    manager = LogManager(tmp_path, clock_ms=ManualClock())
    manager.open()
    manager.create_topic("t", 1)
    for i in range(5):
        manager.get_log("t", 0).append(batch(1, tag=i))
    manager.close()
    (tmp_path / name).write_text(f"0\n1\nt 0 {2**64}\n")
    manager = LogManager(tmp_path, clock_ms=ManualClock())
    manager.open()
    plog = manager.get_log("t", 0)
    assert (plog.log_start_offset, plog.high_watermark) == (0, 5)
    assert plog.append(batch(1)).base_offset == 5
    manager.close()
