"""Shared fixtures: the real `tidelog serve` process, and an in-process broker for trio tests.

`broker_process` starts the real daemon on free loopback ports (it listens on
port 0 and the fixture reads the bound ports from its `broker_ready` log line),
with a fresh data directory, stdout captured as parsed JSON lines, and stops it
at the end of the test. `broker_factory` does the same with extra `--set`
options, a chosen data directory (for restarts) or a config file.

`inprocess_broker` runs `serve_broker` inside the test's trio run (faster, and
the test can reach the broker's objects through the returned `BrokerHandle`).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio

ROOT = Path(__file__).resolve().parent.parent
# Seconds a broker may take to print `broker_ready` (recovery of a tiny data dir).
BROKER_START_TIMEOUT_S = 30.0
# Seconds a graceful stop may take before the fixture kills the process.
BROKER_STOP_TIMEOUT_S = 30.0


# tests/interop (Apache Kafka and Kafka clients) runs only when asked for: `-m interop`
# (not `-m "not interop"`), or a path inside it. It needs Maven, Java 17, kcat and the
# `interop` extra, which `make test` does not install; ignoring the directory here keeps
# its conftest, which imports those clients, from loading at all.
INTEROP_DIR = Path(__file__).resolve().parent / "interop"
_SELECTS_INTEROP = re.compile(r"(?<!not )\binterop\b")


def _interop_requested(config: pytest.Config) -> bool:
    if _SELECTS_INTEROP.search(config.getoption("markexpr") or ""):
        return True
    for arg in config.args:
        path = (config.invocation_params.dir / arg.split("::")[0]).resolve()
        if path == INTEROP_DIR or INTEROP_DIR in path.parents:
            return True
    return False


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if collection_path == INTEROP_DIR and not _interop_requested(config):
        return True
    return None


def serve_command() -> list[str]:
    """How to start the daemon: the real `tidelog serve` CLI (as `python -m broker serve`)."""
    return [sys.executable, "-m", "broker", "serve"]


@dataclass
class BrokerProcess:
    """A running `tidelog serve` child process."""

    proc: subprocess.Popen[bytes]
    data_dir: Path
    host: str = "127.0.0.1"
    port: int = 0
    metrics_port: int = 0
    lines: list[str] = field(default_factory=list)
    stderr_path: Path | None = None
    _reader: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    @property
    def address(self) -> tuple[str, int]:
        return self.host, self.port

    @property
    def ready(self) -> bool:
        """The broker printed `broker_ready` (its ports are known and it serves)."""
        return self._ready.is_set()

    @property
    def bootstrap(self) -> str:
        """`HOST:PORT` for `--bootstrap-server`."""
        return f"{self.host}:{self.port}"

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        """The JSON log lines printed so far (optionally only those with event `name`)."""
        out = []
        for line in list(self.lines):
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and (name is None or event.get("event") == name):
                out.append(event)
        return out

    def wait_for_event(self, name: str, timeout_s: float = 10.0) -> dict[str, Any]:
        """Block until the broker logs event `name` (returns the first one)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            found = self.events(name)
            if found:
                return found[0]
            if self.proc.poll() is not None and not self._reader_alive():
                break
            time.sleep(0.01)
        raise AssertionError(f"broker never logged {name!r}; output:\n" + self.output())

    def _reader_alive(self) -> bool:
        return self._reader is not None and self._reader.is_alive()

    def output(self) -> str:
        err = ""
        if self.stderr_path is not None and self.stderr_path.exists():
            err = self.stderr_path.read_text(errors="replace")
        return "\n".join(self.lines) + ("\n[stderr]\n" + err if err else "")

    def send_signal(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def stop(self, signum: int = signal.SIGTERM, timeout_s: float = BROKER_STOP_TIMEOUT_S) -> int:
        """Signal the broker and wait for it to exit; returns the exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
            try:
                self.proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("broker did not stop in time:\n" + self.output()) from None
        if self._reader is not None:
            self._reader.join(timeout=5)
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: an unclean stop (no checkpoints, no clean-shutdown marker)."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        if self._reader is not None:
            self._reader.join(timeout=5)


def _pump_stdout(broker: BrokerProcess) -> None:
    assert broker.proc.stdout is not None
    with broker.proc.stdout:
        _pump_lines(broker)


def _pump_lines(broker: BrokerProcess) -> None:
    assert broker.proc.stdout is not None
    for raw in broker.proc.stdout:
        line = raw.decode("utf-8", "replace").rstrip("\n")
        broker.lines.append(line)
        if not broker._ready.is_set() and '"broker_ready"' in line:
            event = json.loads(line)
            broker.host = "127.0.0.1"
            broker.port = int(event["port"])
            broker.metrics_port = int(event["metrics_port"])
            broker._ready.set()


def start_broker(
    data_dir: Path,
    *sets: str,
    config_file: Path | None = None,
    extra_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    wait: bool = True,
) -> BrokerProcess:
    """Start `tidelog serve` on free loopback ports; with `wait`, until it is ready.

    `env` adds environment variables (e.g. `TIDELOG_FAILPOINTS`).
    """
    data_dir.mkdir(parents=True, exist_ok=True)
    cmd = [
        *serve_command(),
        "--data-dir",
        str(data_dir),
        "--listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:0",
        "--log-format",
        "json",
    ]
    if config_file is not None:
        cmd += ["--config", str(config_file)]
    for item in sets:
        cmd += ["--set", item]
    cmd += list(extra_args)
    stderr_path = data_dir.parent / f"{data_dir.name}.stderr.{time.monotonic_ns()}"
    child_env = dict(os.environ, PYTHONUNBUFFERED="1", **(env or {}))
    with open(stderr_path, "wb") as stderr:
        proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env=child_env,
        )
    broker = BrokerProcess(proc=proc, data_dir=data_dir, stderr_path=stderr_path)
    broker._reader = threading.Thread(target=_pump_stdout, args=(broker,), daemon=True)
    broker._reader.start()
    if wait:
        deadline = time.monotonic() + BROKER_START_TIMEOUT_S
        while not broker._ready.wait(0.05):
            if proc.poll() is not None or time.monotonic() > deadline:
                broker.kill()
                raise AssertionError("broker did not become ready:\n" + broker.output())
    return broker


BrokerFactory = Callable[..., BrokerProcess]


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    """`start(*sets, data_dir=None, config_file=None, env=None, wait=True)`; stopped at teardown."""
    started: list[BrokerProcess] = []

    def start(
        *sets: str,
        data_dir: Path | None = None,
        config_file: Path | None = None,
        extra_args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
        wait: bool = True,
    ) -> BrokerProcess:
        broker = start_broker(
            data_dir or tmp_path / "data",
            *sets,
            config_file=config_file,
            extra_args=extra_args,
            env=env,
            wait=wait,
        )
        started.append(broker)
        return broker

    yield start
    for broker in started:
        if broker.proc.poll() is None:
            try:
                broker.stop()
            except AssertionError:
                broker.kill()


@pytest.fixture
def broker_process(broker_factory: BrokerFactory) -> BrokerProcess:
    """A real `tidelog serve` on loopback with a fresh data directory."""
    return broker_factory()


@pytest.fixture
async def inprocess_broker(nursery: trio.Nursery, tmp_path: Path) -> AsyncIterator[Any]:
    """`serve_broker` in this trio run on free loopback ports; yields its `BrokerHandle`."""
    from broker.config import BrokerConfig
    from broker.server import serve_broker

    config = BrokerConfig.from_props(
        {},
        data_dir=tmp_path / "inproc-data",
        listen=("127.0.0.1", 0),
        metrics_listen=("127.0.0.1", 0),
    )
    handle = await nursery.start(serve_broker, config)
    yield handle
