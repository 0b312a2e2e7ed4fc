"""MirrorMaker 2 4.3.1 in dedicated mode (`connect-mirror-maker.sh mm2.properties`): one
direction, source alias -> target alias, with its Connect topics on the target cluster.

Aliases are per run: MirrorMaker 2 keeps its connectors' configs in
`mm2-configs.<source>.internal` on the target, so a reused alias would bring back an
earlier run's topic and group filters.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from interop.ecosystem.connect import CONNECT_LOG4J, WORKER_HEAP_MB, render_properties
from interop.ecosystem.toolchains import connect_classpath
from interop.jvm import java_binary

MIRROR_MAKER_MAIN = "org.apache.kafka.connect.mirror.MirrorMaker"
STOP_TIMEOUT_S = 30.0

# One broker per cluster: one replica for everything MirrorMaker 2 creates, and short
# intervals so a scenario sees topics, configs, partitions and groups follow in seconds.
SINGLE_NODE_PROPERTIES: dict[str, str] = {
    "replication.factor": "1",
    "checkpoints.topic.replication.factor": "1",
    "heartbeats.topic.replication.factor": "1",
    "offset-syncs.topic.replication.factor": "1",
    "offset.storage.replication.factor": "1",
    "status.storage.replication.factor": "1",
    "config.storage.replication.factor": "1",
    "tasks.max": "1",
    "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": "1",
    "emit.checkpoints.interval.seconds": "1",
    "emit.heartbeats.interval.seconds": "1",
    "refresh.topics.interval.seconds": "2",
    "refresh.groups.interval.seconds": "2",
    "sync.topic.configs.interval.seconds": "2",
    "offset.lag.max": "0",
}


def mm2_properties(
    source: str, source_bootstrap: str, target: str, target_bootstrap: str,
    topics: str, groups: str,
) -> dict[str, str]:  # fmt: skip
    """The mm2.properties of one replication flow `source->target` of `topics` (a regex)
    and the committed offsets of `groups` (a regex)."""
    return {
        "clusters": f"{source}, {target}",
        f"{source}.bootstrap.servers": source_bootstrap,
        f"{target}.bootstrap.servers": target_bootstrap,
        f"{source}->{target}.enabled": "true",
        f"{source}->{target}.topics": topics,
        f"{source}->{target}.groups": groups,
        f"{target}->{source}.enabled": "false",
        **SINGLE_NODE_PROPERTIES,
    }


def exact(name: str) -> str:
    """A MirrorMaker 2 topic/group filter (a regex) that matches `name` only."""
    return re.escape(name)


class MirrorMaker:
    """The dedicated MirrorMaker 2 process, stopped by SIGTERM to the PID it started."""

    def __init__(self, work_dir: Path, properties: Mapping[str, str], target: str) -> None:
        self.work_dir = work_dir
        self.properties_path = work_dir / "mm2.properties"
        self.log_path = work_dir / "mm2.log"
        self.properties = dict(properties)
        self.target = target
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> MirrorMaker:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(render_properties(self.properties))
        argv = [
            java_binary(), f"-Xmx{WORKER_HEAP_MB}m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={CONNECT_LOG4J}", "-cp", connect_classpath(),
            MIRROR_MAKER_MAIN, str(self.properties_path), "--clusters", self.target,
        ]  # fmt: skip
        with self.log_path.open("wb") as log:
            self._proc = subprocess.Popen(
                argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL
            )
        return self

    def stop(self) -> None:
        if self._proc is None or self._proc.poll() is not None:
            return
        os.kill(self._proc.pid, signal.SIGTERM)
        try:
            self._proc.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.kill(self._proc.pid, signal.SIGKILL)
            self._proc.wait()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_lines(self, pattern: str) -> list[str]:
        """The log lines matching `pattern` (e.g. errors MirrorMaker 2 keeps retrying)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return []
        return [line for line in text.splitlines() if re.search(pattern, line)]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def __enter__(self) -> MirrorMaker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
