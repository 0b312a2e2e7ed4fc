"""bench/instr_probe.py runs as a script under another checkout's interpreter: its
append probe must work from a scratch directory with only the installed packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_append_probe_appends_from_a_scratch_directory(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "instr_probe.py"), "append", str(ROOT), "3", "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "log_end_offset=3000" in done.stdout.splitlines()  # 3 batches of 1,000 records
