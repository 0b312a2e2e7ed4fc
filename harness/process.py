"""Child servers the benchmarks and the interop suite start: stopped by PID, on free ports.

Shared by `bench/` and `interop/` so that neither imports the other's internals.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

# A server that does not accept connections after this long has failed to start.
START_TIMEOUT_S = 60.0
# A server that ignores SIGTERM for this long is killed (and the run says so).
STOP_TIMEOUT_S = 30.0


def note(text: str) -> None:
    """Progress for the person watching; stdout is kept for the JSON."""
    print(text, file=sys.stderr, flush=True)


def free_port() -> int:
    """A TCP port on loopback that nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, proc: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Block until `port` accepts a connection; fail early if `proc` exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with status {proc.returncode} before listening")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing listened on port {port} within {timeout_s} s")


class ServerProcess:
    """A peer server as a child process that this harness alone starts and stops.

    Invariant: `stop()` signals exactly the PID this object started (never a name
    match), waits for it, and only kills it if it ignores SIGTERM.
    """

    def __init__(self, name: str, argv: Sequence[str], port: int, log_path: Path) -> None:
        self.name = name
        self.port = port
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            list(argv), stdout=self._log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
        )
        try:
            wait_for_port(port, self.proc, START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    @property
    def pid(self) -> int:
        return self.proc.pid

    def stop(self) -> None:
        """SIGTERM the PID, wait, SIGKILL only if it hangs. Idempotent."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                note(f"{self.name} (pid {self.proc.pid}) ignored SIGTERM; killing it")
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self._log.close()

    def log_tail(self, lines: int = 20) -> str:
        """The end of the server's own log, for error messages."""
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""
