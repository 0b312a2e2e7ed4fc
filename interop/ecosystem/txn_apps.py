"""The suite's kafka-clients transactional programs (interop/jvm_apps, `TxnApp`) as child
processes: the interleaved commit/abort/fencing scenario, which pauses while its last
transaction is open so the caller can look at the partitions, and a producer that leaves a
transaction hanging until it is SIGKILLed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from interop.ecosystem.toolchains import jvm_apps_classpath
from interop.jvm import TOOLS_HEAP_MB, TOOLS_LOG4J, java_binary

TXN_MAIN = "dev.tidelog.interop.TxnApp"
# A cold JVM plus three producers' initTransactions and two consumers' reads on a busy machine.
SCENARIO_TIMEOUT_S = 240.0
HANG_READY_TIMEOUT_S = 120.0


def _argv(*args: str) -> list[str]:
    return [
        java_binary(), f"-Xmx{TOOLS_HEAP_MB}m", f"-Dlog4j2.configurationFile={TOOLS_LOG4J}",
        "-cp", jvm_apps_classpath(), TXN_MAIN, *args,
    ]  # fmt: skip


def run_scenario(
    bootstrap: str, topic: str, txn_prefix: str, while_open: Callable[[], Any], log: Path
) -> tuple[dict[str, Any], Any]:
    """Run `TxnApp scenario`; call `while_open()` while A's last transaction is open.

    Returns the app's JSON document and what `while_open` returned. The app's stderr
    (its log) goes to `log`; a non-zero exit raises with its tail.
    """
    with (
        log.open("w") as err,
        subprocess.Popen(
            _argv("scenario", bootstrap, topic, txn_prefix),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, text=True,
        ) as proc,
    ):  # fmt: skip
        assert proc.stdin is not None and proc.stdout is not None
        timer = _Killer(proc, SCENARIO_TIMEOUT_S)
        seen_open: Any = None
        lines: list[str] = []
        try:
            for line in proc.stdout:
                lines.append(line)
                if line.strip() == "OPEN":
                    seen_open = while_open()
                    proc.stdin.write("go\n")
                    proc.stdin.flush()
            code = proc.wait()
        finally:
            timer.cancel()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    if code != 0:
        raise RuntimeError(
            f"TxnApp scenario exited {code}{' (killed: timeout)' if timer.fired else ''}:\n"
            f"{''.join(lines)[-2000:]}\n{_tail(log)}"
        )
    document: dict[str, Any] = json.loads(lines[-1])
    return document, seen_open


class HangingProducer:
    """`TxnApp hang`: a transaction begun on partitions 0 and 1 whose producer is then
    SIGKILLed, so nobody ends it (its transaction.timeout.ms is 15 minutes)."""

    def __init__(self, bootstrap: str, topic: str, txn_id: str, log: Path) -> None:
        self._log = log.open("w")
        self.proc = subprocess.Popen(
            _argv("hang", bootstrap, topic, txn_id),
            stdout=subprocess.PIPE, stderr=self._log, stdin=subprocess.DEVNULL, text=True,
        )  # fmt: skip
        self.log_path = log

    def wait_sent(self) -> str:
        """Block until the records are acknowledged; the app's SENT line."""
        assert self.proc.stdout is not None
        timer = _Killer(self.proc, HANG_READY_TIMEOUT_S)
        try:
            line = self.proc.stdout.readline()
        finally:
            timer.cancel()
        if not line.startswith("SENT"):
            self.kill()
            raise RuntimeError(f"TxnApp hang did not send: {line!r}\n{_tail(self.log_path)}")
        return line.strip()

    def kill(self) -> None:
        """SIGKILL exactly the PID started here. Idempotent."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        self._log.close()


class _Killer:
    """SIGKILL `proc` if it is still running after `timeout_s` (a stuck JVM)."""

    def __init__(self, proc: subprocess.Popen[str], timeout_s: float) -> None:
        import threading

        self.fired = False
        self._proc = proc
        self._timer = threading.Timer(timeout_s, self._fire)
        self._timer.daemon = True
        self._timer.start()

    def _fire(self) -> None:
        if self._proc.poll() is None:
            self.fired = True
            os.kill(self._proc.pid, signal.SIGKILL)

    def cancel(self) -> None:
        self._timer.cancel()


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def wait_until(check: Callable[[], bool], timeout_s: float, interval_s: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(interval_s)
    return check()
