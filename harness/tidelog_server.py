"""A Tidelog broker as a child process: `python -m broker serve` on free loopback ports."""

from __future__ import annotations

import sys
from pathlib import Path

from harness.process import ServerProcess, free_port


def tidelog_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tidelog")
    except PackageNotFoundError:
        return "unknown"


class TidelogServer:
    """`python -m broker serve` with its own data directory and free loopback ports."""

    def __init__(self, data_dir: Path) -> None:
        self.version = tidelog_version()
        data_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        argv = [
            sys.executable, "-m", "broker", "serve",
            "--data-dir", str(data_dir / "data"),
            "--listen", f"127.0.0.1:{port}",
            "--metrics-listen", "127.0.0.1:0",
            "--log-format", "json", "--log-level", "warning",
        ]  # fmt: skip
        self.process = ServerProcess("tidelog", argv, port, data_dir / "tidelog.log")
        self.port = port

    def stop(self) -> None:
        self.process.stop()
