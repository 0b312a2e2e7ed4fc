"""Crashes during a cleaning: every file operation in-process, named failpoints and random
SIGKILLs under load in a real subprocess. After a restart the log must equal the pre-clean
or the post-clean log for every key, with original offsets, and no `.cleaned`/`.swap`
file may remain."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.compaction.crash_child import KEYS, build
from tests.compaction.helpers import (
    Clock,
    latest_by_key,
    make_cleaner,
    make_cleaner_manager,
    open_manager,
    read_all,
)
from tests.compaction.test_model import SnapshotIO

ROOT = Path(__file__).resolve().parents[2]


def leftovers(data_dir: Path) -> list[str]:
    return sorted(
        p.name for p in (data_dir / "t-0").iterdir() if p.name.endswith((".cleaned", ".swap"))
    )


def state(data_dir: Path):
    """(latest per key, every record) of the log, after an unclean or clean open."""
    logs = open_manager(data_dir, Clock())
    try:
        log = logs.get_log("t", 0)
        records = read_all(log)
        return latest_by_key(records), records, log.log_end_offset
    finally:
        logs.close()


@pytest.fixture(params=[pytest.param(80, id="small-log")])
def built(tmp_path, request):
    """A dirty compacted log, plus its pre-clean and post-clean states."""
    build(tmp_path, request.param)
    pristine = tmp_path / "pristine"
    shutil.copytree(tmp_path / "data", pristine)
    pre = state(pristine)
    cleaned = tmp_path / "cleaned"
    shutil.copytree(pristine, cleaned)
    clock = Clock()
    logs = open_manager(cleaned, clock)
    assert make_cleaner_manager(logs, clock).clean_one(make_cleaner()) is not None
    logs.close()
    post = state(cleaned)
    assert len(post[1]) < len(pre[1])
    return tmp_path, pristine, pre, post


def live(latest):
    return {k: v for k, v in latest.items() if v[1] is not None}


def check_recovered(data_dir: Path, pre, post) -> None:
    latest, records, end = state(data_dir)
    assert leftovers(data_dir) == []
    # Per key: the latest value of both states (tombstones may already be gone post-clean).
    assert live(latest) == live(pre[0])
    for key in pre[0].keys() | latest.keys():
        assert latest.get(key) in (pre[0].get(key), post[0].get(key)), key
    by_offset = {r.offset: r for r in pre[1]}
    assert all(by_offset[r.offset] == r for r in records)  # same offsets, same contents
    assert end == pre[2]


def test_crash_before_every_file_operation_of_a_cleaning(built):
    root, pristine, pre, post = built
    step = 1
    while True:
        work = root / "work"
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(pristine, work)
        io = SnapshotIO()
        io.data_dir, io.snapshot_dir, io.snapshot_at = work, root / "snap", step
        shutil.rmtree(io.snapshot_dir, ignore_errors=True)
        clock = Clock()
        logs = open_manager(work, clock, io)
        make_cleaner_manager(logs, clock, io).clean_one(make_cleaner())
        logs.close()
        if not io.taken:
            break
        check_recovered(io.snapshot_dir, pre, post)
        if step % 4:
            step += 1
            continue
        # A following cleaning completes and reaches the post-clean state.
        clock = Clock()
        logs = open_manager(io.snapshot_dir, clock)
        make_cleaner_manager(logs, clock).clean_one(make_cleaner())
        logs.close()
        again = state(io.snapshot_dir)[0]
        assert live(again) == live(post[0])
        # A tombstone whose horizon was set before the crash may be gone by now.
        assert all(post[0][k][1] is None for k in post[0].keys() - again.keys())
        step += 1
    print(f"swept {step - 1} crash points")
    assert step > 30  # the sweep really went through several groups' swap steps


def run_child(mode: str, root: Path, failpoints: str = "") -> subprocess.CompletedProcess:
    env = {**os.environ, "TIDELOG_FAILPOINTS": failpoints, "PYTHONFAULTHANDLER": "1"}
    return subprocess.run(
        [sys.executable, "-m", "tests.compaction.crash_child", mode, str(root)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=60,
    )


@pytest.mark.parametrize(
    "failpoint",
    [
        "replace_segments.after_swap_rename=kill",
        "replace_segments.after_old_deleted=kill",
        "replace_segments.after_swap_rename=kill@2",
        "replace_segments.after_old_deleted=kill@2",
        "checkpoint.before_rename=kill",
        "checkpoint.after_rename=kill",
    ],
)
def test_sigkill_at_named_swap_steps(built, failpoint):
    root, pristine, pre, post = built
    work = root / "data"
    shutil.rmtree(work)
    shutil.copytree(pristine, work)
    proc = run_child("clean", root, failpoint)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]
    check_recovered(work, pre, post)


def test_sigkill_at_random_during_cleanings_under_load(tmp_path):
    rng = random.Random(20261122)
    ledger_path = tmp_path / "ledger"
    for _ in range(3):
        child = subprocess.Popen(
            [sys.executable, "-m", "tests.compaction.crash_child", "load", str(tmp_path)],
            cwd=ROOT,
            env={**os.environ, "TIDELOG_FAILPOINTS": ""},
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        try:
            assert child.stdout is not None
            while child.stdout.readline().strip() != b"ready":
                pass
            time.sleep(rng.uniform(0.3, 1.5))
        finally:
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=30)
            child.stdout.close()
        acked: dict[bytes, tuple[int, bytes]] = {}
        for line in ledger_path.read_text().splitlines():
            parts = line.split()
            if len(parts) == 3:  # a line cut by the kill was never acknowledged
                acked[parts[1].encode()] = (int(parts[0]), parts[2].encode())
        latest, records, _ = state(tmp_path / "data")
        assert leftovers(tmp_path / "data") == []
        assert len(acked) == KEYS
        for key, (offset, value) in acked.items():
            # The last acknowledged write of each key is there, at its offset.
            assert latest[key][0] >= offset
            if latest[key][0] == offset:
                assert latest[key][1] == value
        offsets = [r.offset for r in records]
        assert offsets == sorted(set(offsets))
