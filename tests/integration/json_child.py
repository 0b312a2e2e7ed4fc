"""A child process that reports on stdout, one JSON object per line, read in a thread.

Tests start a client in it, then SIGKILL it mid-stream and compare what it reported.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

# How long to wait for the reader after the child is gone.
READER_JOIN_S = 5.0


class JsonChild:
    """`python SCRIPT ARGS...` with its JSON lines collected in `events`."""

    def __init__(self, script: Path, *args: str, cwd: Path) -> None:
        self.events: list[dict[str, Any]] = []
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args], cwd=cwd, stdout=subprocess.PIPE, text=True
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        self.events.extend(json.loads(line) for line in self.proc.stdout)

    def kill(self) -> None:
        """SIGKILL, then wait until every line it wrote has been read."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()
        self._reader.join(timeout=READER_JOIN_S)

    def close(self) -> None:
        self.kill()
        if self.proc.stdout is not None:
            self.proc.stdout.close()

    def __enter__(self) -> JsonChild:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
