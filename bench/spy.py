"""Where a running Python broker spends its CPU: py-spy samples of all its threads.

cProfile sees only the thread it runs in, and the Kafka edge converts large fetches in
worker threads (`broker/kafka/edge.py`), so the benchmark samples the whole process
from outside with py-spy (the `bench` extra) while one phase runs:

    with PySpy(pid, out_dir / "produce-100.folded"):
        phase()
    top_frames(out_dir / "produce-100.folded")

The output is py-spy's folded stacks (`frame;frame;leaf count` lines), one file a phase,
so a flame graph can be drawn from it later; `top_frames` reduces it to the leaf
functions (own time) and the functions on the stack (inclusive time) with their shares.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path
from types import TracebackType
from typing import Any

# Samples a second: py-spy's default; enough for shares of a few seconds' phase.
SAMPLE_RATE_HZ = 100
# py-spy writes its file after SIGINT; a stuck one is killed after this long.
STOP_TIMEOUT_S = 30.0
TOP_FRAMES = 15
# Leaves that are the event loop waiting (py-spy --nonblocking cannot always tell idle
# threads): not work, so not in the shares.
# Frames on every stack (start-up, the trio loop, thread plumbing): they would fill the
# inclusive list and say nothing.
ENTRY_FILES = frozenset(
    {"<frozen runpy>", "__main__.py", "cli.py", "_run.py", "server.py", "threading.py",
     "_impl.py", "_threads.py", "_thread_cache.py"}
)  # fmt: skip
IDLE_LEAVES = frozenset({"_io_epoll.py:EpollIOManager.get_events", "threading.py:Condition.wait"})


def py_spy_path() -> str | None:
    """The py-spy binary of this venv (or on PATH), or None when it is not installed."""
    beside = Path(sys.executable).with_name("py-spy")
    return str(beside) if beside.exists() else shutil.which("py-spy")


class PySpy:
    """`py-spy record` attached to `pid` for the duration of a `with` block.

    Invariant: only the py-spy process this object started is signalled.
    """

    def __init__(self, pid: int, output: Path) -> None:
        binary = py_spy_path()
        if binary is None:
            raise RuntimeError("py-spy is not installed: pip install -e '.[bench]'")
        self.output = output
        self._argv = [
            binary, "record", "--pid", str(pid), "--rate", str(SAMPLE_RATE_HZ),
            "--format", "raw", "--nonblocking", "--output", str(output),
        ]  # fmt: skip
        self._proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PySpy:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self._proc = subprocess.Popen(
            self._argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        assert self._proc is not None
        if self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGINT)
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.kill(self._proc.pid, signal.SIGKILL)
                self._proc.wait()


def _frame_name(frame: str) -> str:
    """`func (path/to/module.py:123)` -> `module.py:func` (lines vary within a function)."""
    name, _, where = frame.partition(" (")
    file = where.rsplit(":", 1)[0].rsplit("/", 1)[-1]
    return f"{file}:{name}" if file else name


def top_frames(folded: Path, limit: int = TOP_FRAMES) -> dict[str, Any]:
    """Own (leaf) and inclusive shares of the samples in one folded-stacks file."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    # A phase shorter than py-spy's start-up leaves no file: no samples, not an error.
    text = folded.read_text(errors="replace") if folded.exists() else ""
    for line in text.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [_frame_name(f) for f in stack.split(";")]
        if frames[-1] in IDLE_LEAVES:
            continue
        total += count
        own[frames[-1]] += count
        for name in set(frames):
            if name.split(":", 1)[0] not in ENTRY_FILES:
                inclusive[name] += count

    def shares(counter: Counter[str]) -> list[dict[str, Any]]:
        return [
            {"function": name, "share": round(n / total, 3)}
            for name, n in counter.most_common(limit)
        ]

    return {"samples": total, "own": shares(own), "inclusive": shares(inclusive)}
