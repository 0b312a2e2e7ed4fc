"""The suite's Kafka Streams 4.4 application (interop/jvm_apps, `StreamsApp`) as a child
process that can be killed outright (SIGKILL: no commit, no clean close) and started
again on the same state directory, as an at-least-once application is after a crash.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from interop.ecosystem.toolchains import jvm_apps_classpath
from interop.jvm import TOOLS_HEAP_MB, TOOLS_LOG4J, java_binary

STREAMS_MAIN = "dev.tidelog.interop.StreamsApp"
WORD_COUNT_MAIN = "dev.tidelog.interop.WordCountApp"
READY_LINE = "STATE RUNNING"
READY_TIMEOUT_S = 120.0


class StreamsApp:
    """One run of the application; `kill()` SIGKILLs exactly the PID it started."""

    def __init__(
        self, work_dir: Path, bootstrap: str, app_id: str, *topics: str,
        main: str = STREAMS_MAIN,
    ) -> None:  # fmt: skip
        """`topics`: the app's own (StreamsApp: orders, customers, out; WordCountApp:
        input, output)."""
        self.work_dir = work_dir
        self.app_id = app_id
        self.argv = [
            java_binary(), f"-Xmx{TOOLS_HEAP_MB}m", f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
            "-cp", jvm_apps_classpath(), main,
            bootstrap, app_id, str(work_dir / "state"), *topics,
        ]  # fmt: skip
        self._proc: subprocess.Popen[bytes] | None = None
        self._runs = 0

    @property
    def log_path(self) -> Path:
        return self.work_dir / f"streams-{self._runs}.log"

    def start(self) -> None:
        """Start and wait until the application reports RUNNING."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self._runs += 1
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"StreamsApp exited {self._proc.returncode}:\n{self.log_tail()}")
            if READY_LINE in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.2)
        self.kill()
        raise RuntimeError(f"StreamsApp not RUNNING in {READY_TIMEOUT_S} s:\n{self.log_tail()}")

    def kill(self) -> None:
        """SIGKILL (a crash), then reap. Idempotent."""
        if self._proc is not None and self._proc.poll() is None:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
