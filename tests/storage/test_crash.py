"""SIGKILL a real process at each named failpoint, reopen, and check every acknowledged
batch is intact and nothing torn is visible (docs/reliability.md CC-02, CC-03)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from protocol.batch import iter_headers, iter_records, validate_batch
from storage import failpoints
from storage.config import LogConfig
from storage.files import log_path
from storage.manager import LogManager

ROOT = Path(__file__).resolve().parents[2]
CONFIG = LogConfig(segment_bytes=1500, segment_index_bytes=64, index_interval_bytes=100)

SWEEP = [
    ("segment.append.before_write", "kill", 3, "acks-one"),
    ("segment.append.write", "partial", 1, "acks-one"),
    ("segment.append.write", "partial", 4, "acks-all"),
    ("segment.append.after_write", "kill", 1, "acks-one"),
    ("segment.append.after_write", "kill", 5, "acks-all"),
    ("log.append.after_index", "kill", 2, "acks-one"),
    ("log.flush.before_fsync", "kill", 3, "acks-all"),
    ("log.flush.after_fsync", "kill", 3, "acks-all"),
    ("log.roll.before_new_segment", "kill", 2, "acks-one"),
    ("log.roll.after_old_trimmed", "kill", 2, "acks-one"),
    ("log.roll.after_new_log", "kill", 3, "acks-one"),
    ("log.delete_segments.after_rename", "kill", 1, "acks-one"),
    ("checkpoint.before_write", "kill", 2, "acks-one"),
    ("checkpoint.before_rename", "kill", 2, "acks-one"),
    ("checkpoint.after_rename", "kill", 2, "acks-one"),
    ("replace_segments.after_swap_rename", "kill", 1, "acks-one"),
    ("replace_segments.after_old_deleted", "kill", 1, "acks-one"),
    ("topic_metadata.before_write", "kill", 1, "acks-one"),
    ("topic_metadata.before_rename", "kill", 1, "acks-one"),
    ("topic_metadata.after_rename", "kill", 1, "acks-one"),
]


def run_child(data_dir: Path, mode: str, spec: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, failpoints.ENV_VAR: spec, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "tests.storage.crash_child", str(data_dir), mode],
        env=env,
        cwd=ROOT,
        capture_output=True,
        timeout=100,
    )


def acknowledged(stdout: bytes) -> list[tuple[int, int, bytes]]:
    acks = []
    for line in stdout.decode().splitlines():
        _, offset, count, value = line.split()
        acks.append((int(offset), int(count), value.encode()))
    return acks


def verify(data_dir: Path, acks: list[tuple[int, int, bytes]]) -> None:
    """Every acked batch at its offset with its bytes; every stored batch valid; appends go on."""
    manager = LogManager(data_dir, CONFIG)
    manager.open()
    try:
        if "t" not in manager.topics():
            assert not acks
            return
        log = manager.get_log("t", 0)
        stored: dict[int, bytes | None] = {}
        offset = log.log_start_offset
        while offset < log.high_watermark:
            data = log.read(offset, 1 << 20).records
            for pos, _ in iter_headers(data):
                validate_batch(data, pos)  # whole and CRC-valid: nothing torn is visible
            records = [r for r in iter_records(data) if r.offset >= offset]
            assert records, f"no records at {offset} below the high watermark"
            stored.update((r.offset, r.value) for r in records)
            offset = records[-1].offset + 1
        assert sorted(stored) == list(range(log.log_start_offset, log.high_watermark))
        for base, count, value in acks:
            for offset in range(base, base + count):
                if offset >= log.log_start_offset:
                    assert stored.get(offset) == value, f"acknowledged offset {offset} lost"
        end = log.log_end_offset
        from tests.storage.helpers import batch

        assert log.append(batch(1)).base_offset == end
        leftovers = [p.name for p in log.directory.iterdir() if p.suffix in (".swap", ".cleaned")]
        assert not leftovers
    finally:
        manager.close()


@pytest.mark.parametrize(
    ("point", "action", "hit", "mode"), SWEEP, ids=[f"{p}={a}@{h}-{m}" for p, a, h, m in SWEEP]
)
def test_kill_at_failpoint_then_recover(
    tmp_path: Path, point: str, action: str, hit: int, mode: str
) -> None:
    done = run_child(tmp_path, mode, f"{point}={action}@{hit}")
    assert done.returncode == -signal.SIGKILL, done.stderr.decode()[-2000:]
    verify(tmp_path, acknowledged(done.stdout))
    # A second crash-free run on top of the recovered directory keeps everything too.
    again = run_child(tmp_path, "acks-one")
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    verify(tmp_path, acknowledged(done.stdout) + acknowledged(again.stdout))


def test_crash_during_recovery_converges(tmp_path: Path) -> None:
    done = run_child(tmp_path, "acks-one")
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    acks = acknowledged(done.stdout)
    manager = LogManager(tmp_path, CONFIG)
    manager.open()
    active = manager.get_log("t", 0).active_segment.base_offset
    manager.close()
    (tmp_path / ".tidelog_cleanshutdown").unlink()
    with open(log_path(tmp_path / "t-0", active), "ab") as f:
        f.write(b"\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x90torn")
    crashed = run_child(tmp_path, "open-only", "recovery.after_truncate=kill")
    assert crashed.returncode == -signal.SIGKILL, crashed.stderr.decode()[-2000:]
    verify(tmp_path, acks)


def test_every_failpoint_is_exercised() -> None:
    swept = {point for point, *_ in SWEEP} | {"recovery.after_truncate"}
    assert swept == failpoints.POINTS
