"""Brokers that restart in place: same port, same data directory, for the scenarios in
which a client must ride out a broker restart (Kafka Connect, Kafka Streams). Stopping is
SIGTERM to the PID this harness started (a controlled shutdown on both brokers);
`crash_restart()` is SIGKILL to that PID (kill -9: no flush, no clean shutdown) and a start
on the same data directory, which must then recover it.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

from harness.process import ServerProcess, free_port
from interop.jvm import BROKER_LOG4J, java_argv
from interop.kafka_server import KAFKA_MAIN, KafkaServer


class RestartableBroker(Protocol):
    name: str

    @property
    def bootstrap(self) -> str: ...

    def restart(self) -> None: ...

    def crash_restart(self) -> None: ...

    def log_tail(self) -> str: ...


def _sigkill(process: ServerProcess | None) -> None:
    """kill -9 exactly the PID `process` started, reap it, close its log."""
    if process is not None and process.proc.poll() is None:
        os.kill(process.proc.pid, signal.SIGKILL)
        process.proc.wait()
    if process is not None:
        process.stop()  # the process is gone: this only closes the log file


class _Kafka(KafkaServer):
    name = "kafka"

    def restart(self) -> None:
        """Stop, then start on the formatted storage (no second format)."""
        self.stop()
        self._start_again()

    def crash_restart(self) -> None:
        _sigkill(self._process)
        self._start_again()

    def _start_again(self) -> None:
        argv = java_argv(
            KAFKA_MAIN, [str(self.properties_path)], heap_mb=self.heap_mb, log4j=BROKER_LOG4J
        )
        self._process = ServerProcess("kafka", argv, self.port, self.log_path)
        self._wait_ready()

    def log_tail(self) -> str:
        return self._process.log_tail(40) if self._process is not None else ""


class _Tidelog:
    """`python -m broker serve` on a port and data dir kept across restarts."""

    name = "tidelog"

    def __init__(self, work_dir: Path) -> None:
        self.port = free_port()
        self.data_dir = work_dir / "data"
        self.log_path = work_dir / "tidelog.log"
        self._process: ServerProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        argv = [
            sys.executable, "-m", "broker", "serve",
            "--data-dir", str(self.data_dir),
            "--listen", self.bootstrap,
            "--metrics-listen", "127.0.0.1:0",
            "--log-format", "json", "--log-level", "warning",
        ]  # fmt: skip
        self._process = ServerProcess("tidelog", argv, self.port, self.log_path)

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def crash_restart(self) -> None:
        _sigkill(self._process)
        self.start()

    def log_tail(self) -> str:
        return self._process.log_tail(40) if self._process is not None else ""


@contextmanager
def restartable(name: str, work_dir: Path) -> Iterator[RestartableBroker]:
    """Start broker `name` ("kafka" or "tidelog") under `work_dir`; stopped on exit."""
    work_dir.mkdir(parents=True, exist_ok=True)
    broker: _Kafka | _Tidelog
    if name == "kafka":
        broker = _Kafka(work_dir)
    elif name == "tidelog":
        broker = _Tidelog(work_dir)
    else:
        raise ValueError(f"unknown broker {name!r}")
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
