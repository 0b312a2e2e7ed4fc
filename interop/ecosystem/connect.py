"""A Kafka Connect 4.3.1 distributed worker (`connect-distributed.sh`) whose config,
offset and status topics live on the broker under test, driven through its REST API.

4.3.1 throughout (interop/connect/pom.xml): the FileStream and MirrorMaker 2 plugins are
not served for 4.4, and 4.3.1 plugins do not load on a 4.4.0 runtime (issue 37).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

from harness.process import ServerProcess, free_port
from interop.ecosystem.toolchains import INTEROP_DIR, connect_classpath
from interop.jvm import java_binary

CONNECT_DISTRIBUTED_MAIN = "org.apache.kafka.connect.cli.ConnectDistributed"
CONNECT_LOG4J = INTEROP_DIR / "connect" / "log4j2-connect.properties"
# connect-distributed.sh gives the worker 2 GB; the shared machine affords far less.
WORKER_HEAP_MB = 256
# A cold worker scans its plugins and joins its group: ~15 s here, more under load.
READY_TIMEOUT_S = 120.0
FILE_SOURCE = "org.apache.kafka.connect.file.FileStreamSourceConnector"
FILE_SINK = "org.apache.kafka.connect.file.FileStreamSinkConnector"


class ConnectError(RuntimeError):
    """The worker did not come up, or its REST API refused a request."""


def render_properties(props: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in props.items())


class ConnectWorker:
    """One distributed worker process; `restart()` stops it (SIGTERM, which commits its
    source offsets and sink consumer offsets) and starts it again on the same port."""

    def __init__(self, work_dir: Path, bootstrap: str, group_id: str) -> None:
        self.work_dir = work_dir
        self.rest_port = free_port()
        self.log_path = work_dir / "connect.log"
        self.properties_path = work_dir / "worker.properties"
        self.topics = {
            "config": f"{group_id}-configs",
            "offset": f"{group_id}-offsets",
            "status": f"{group_id}-status",
        }
        self.properties = {
            "bootstrap.servers": bootstrap,
            "group.id": group_id,
            "config.storage.topic": self.topics["config"],
            "offset.storage.topic": self.topics["offset"],
            "status.storage.topic": self.topics["status"],
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "1",
            "status.storage.partitions": "1",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": "1000",
            "scheduled.rebalance.max.delay.ms": "1000",
            "listeners": f"http://127.0.0.1:{self.rest_port}",
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.rest_port),
        }
        self._process: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.rest_port}"

    def start(self) -> ConnectWorker:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(render_properties(self.properties))
        argv = [
            java_binary(), f"-Xmx{WORKER_HEAP_MB}m", "-XX:+UseG1GC", "-Djava.awt.headless=true",
            f"-Dlog4j2.configurationFile={CONNECT_LOG4J}", "-cp", connect_classpath(),
            CONNECT_DISTRIBUTED_MAIN, str(self.properties_path),
        ]  # fmt: skip
        # Keep the earlier runs' logs: a restart appends a numbered file.
        if self.log_path.exists():
            self.log_path.rename(self.log_path.with_suffix(f".{time.monotonic_ns()}.log"))
        self._process = ServerProcess("connect", argv, self.rest_port, self.log_path)
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        """The REST API answers only once the worker has joined its group and read its
        config topic; until then it says 503 or not at all."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        last = ""
        while time.monotonic() < deadline:
            try:
                self.request("GET", "/connectors")
                return
            except (ConnectError, OSError) as exc:
                last = str(exc)
            time.sleep(0.5)
        raise ConnectError(f"worker not ready in {READY_TIMEOUT_S} s ({last}):\n{self.log_tail()}")

    def stop(self) -> None:
        if self._process is not None:
            self._process.stop()

    def restart(self) -> None:
        self.stop()
        self.start()

    def log_tail(self, lines: int = 40) -> str:
        return self._process.log_tail(lines) if self._process is not None else ""

    def request(self, method: str, path: str, body: object | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=30) as response:
                text = response.read().decode()
        except urllib.error.HTTPError as exc:
            raise ConnectError(f"{method} {path}: {exc.code} {exc.read().decode()}") from None
        return json.loads(text) if text else None

    def put_connector(self, name: str, config: Mapping[str, str]) -> None:
        self.request("PUT", f"/connectors/{name}/config", dict(config))

    def running(self, name: str) -> bool:
        """The connector and every one of its tasks report RUNNING."""
        try:
            status = self.request("GET", f"/connectors/{name}/status")
        except ConnectError:
            return False
        tasks = status.get("tasks", [])
        return (
            status["connector"]["state"] == "RUNNING"
            and bool(tasks)
            and all(task["state"] == "RUNNING" for task in tasks)
        )

    def __enter__(self) -> ConnectWorker:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
