"""Regression tests for storage bugs the reliability suite found (fixed with them).

- A crash between the temp write and the rename of a checkpoint or topic metadata
  left `<name>.tmp` forever (found by the failpoint sweep at
  `checkpoint.before_rename` / `topic_metadata.before_rename`); a failed replacement
  (ENOSPC) left it too, holding space on a full disk (found by the tmpfs test).
- After a power cut, an unflushed segment could come back shorter than the next
  segment's base offset: a hole below the high watermark where fetches return
  nothing and consumers stall (found by the power-loss simulation).
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from storage.config import LogConfig
from storage.files import log_path
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO

ROOT = Path(__file__).resolve().parents[2]

TEMP_CHILD = """
import sys
from pathlib import Path
from storage.config import LogConfig
from storage.manager import LogManager
m = LogManager(Path(sys.argv[1]), LogConfig())
m.open()
m.create_topic("t", 1, {})
m.write_checkpoints()
"""


@pytest.mark.parametrize(
    ("spec", "leftover"),
    [
        ("checkpoint.before_rename=kill", "recovery-point-offset-checkpoint.tmp"),
        ("topic_metadata.before_rename=kill", "topics/t.json.tmp"),
    ],
)
def test_open_removes_temp_files_of_interrupted_replacements(
    tmp_path: Path, spec: str, leftover: str
) -> None:
    env = {**os.environ, "TIDELOG_FAILPOINTS": spec, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", TEMP_CHILD, str(tmp_path)], env=env, cwd=ROOT)
    assert done.returncode == -signal.SIGKILL
    assert (tmp_path / leftover).exists()
    manager = LogManager(tmp_path, LogConfig())
    manager.open()
    try:
        assert not (tmp_path / leftover).exists()
    finally:
        manager.close()


HOLE_CONFIG = LogConfig(segment_bytes=1500, segment_index_bytes=64, index_interval_bytes=100)

HOLE_CHILD = """
import os, signal, sys
from pathlib import Path
from protocol.batch import encode_batch
from storage.config import LogConfig
from storage.manager import LogManager
m = LogManager(Path(sys.argv[1]), LogConfig(segment_bytes=1500, segment_index_bytes=64,
               index_interval_bytes=100))
m.open()
m.create_topic("t", 1, {})
log = m.get_log("t", 0)
for i in range(4):
    log.append(encode_batch([(b"k", b"durable", None, 1_700_000_000_000)]))
log.flush()
log.roll()                       # segment 4: acks=1 data, never fsynced
for i in range(2):
    log.append(encode_batch([(b"k", b"lost", None, 1_700_000_000_000)]))
log.roll()                       # segment 6 exists on disk
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_recovery_removes_segments_after_a_power_loss_hole(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", HOLE_CHILD, str(tmp_path)], env=env, cwd=ROOT)
    assert done.returncode == -signal.SIGKILL
    directory = tmp_path / "t-0"
    assert log_path(directory, 6).exists()
    # The power cut: segment 4 was never fsynced, so its bytes are gone.
    os.truncate(log_path(directory, 4), 0)
    manager = LogManager(tmp_path, HOLE_CONFIG)
    manager.open()
    try:
        log = manager.get_log("t", 0)
        assert log.log_end_offset == 4
        assert not log_path(directory, 6).exists()
        info = log.append(encode_batch([(b"k", b"next", None, 1_700_000_000_000)]))
        assert info.base_offset == 4
    finally:
        manager.close()


@pytest.mark.parametrize("op", ["pwrite", "fsync", "rename"])
def test_failed_replacement_removes_its_temp_file(tmp_path: Path, op: str) -> None:
    io = FaultyFileIO()
    target = tmp_path / "checkpoint"
    io.write_atomic(target, b"old")
    io.fail(op, errno.ENOSPC, path_contains=".tmp")
    with pytest.raises(OSError):
        io.write_atomic(target, b"new")
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint"]
