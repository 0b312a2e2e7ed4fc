"""The real Apache Kafka 4.x broker on loopback: single node, KRaft combined mode.

`KafkaServer(work_dir).start()` writes a `server.properties` (free loopback ports for
the PLAINTEXT and CONTROLLER listeners, a data dir under `work_dir`), formats the
storage with Kafka's own `kafka.tools.StorageTool format` (what `kafka-storage.sh`
runs), starts `kafka.Kafka` (what `kafka-server-start.sh` runs) and returns once the
broker has logged "Kafka Server started". `stop()` sends SIGTERM to that one PID (a
controlled shutdown) and kills it only if it hangs. Use it as a context manager, from
pytest fixtures and from bench scripts alike:

    with KafkaServer(tmp_path) as kafka:
        scenario(kafka.bootstrap)
"""

from __future__ import annotations

import base64
import subprocess
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from harness.process import ServerProcess, free_port
from interop.jvm import BROKER_HEAP_MB, BROKER_LOG4J, TOOLS_HEAP_MB, TOOLS_LOG4J, java_argv

KAFKA_MAIN = "kafka.Kafka"
STORAGE_TOOL_MAIN = "kafka.tools.StorageTool"
READY_LINE = "Kafka Server started"
# A cold JVM on a busy 2-core machine: ~3 s alone, far more while others compile and test.
READY_TIMEOUT_S = 180.0
FORMAT_TIMEOUT_S = 120.0
NODE_ID = 1

# A single-node cluster: every internal topic with one replica, no rebalance delay (the
# default 3 s would only slow the group scenarios), one partition unless a test asks.
BASE_PROPERTIES: dict[str, str] = {
    "process.roles": "broker,controller",
    "node.id": str(NODE_ID),
    "controller.listener.names": "CONTROLLER",
    "inter.broker.listener.name": "PLAINTEXT",
    "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
    "offsets.topic.replication.factor": "1",
    "offsets.topic.num.partitions": "1",
    "transaction.state.log.replication.factor": "1",
    "transaction.state.log.min.isr": "1",
    "share.coordinator.state.topic.replication.factor": "1",
    "share.coordinator.state.topic.min.isr": "1",
    "group.initial.rebalance.delay.ms": "0",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}


class KafkaServerError(RuntimeError):
    """The broker could not be formatted or did not become ready; carries its log tail."""


def new_cluster_id() -> str:
    """A cluster id as `kafka-storage.sh random-uuid` prints it: base64url, 22 chars."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def render_properties(props: Mapping[str, str]) -> str:
    return "".join(f"{key}={value}\n" for key, value in props.items())


class KafkaServer:
    """One Apache Kafka broker child process (see the module doc).

    Invariant: only the PID this object started is ever signalled; `stop()` is idempotent
    and leaves no JVM behind.
    """

    def __init__(
        self,
        work_dir: Path,
        *,
        overrides: Mapping[str, str] | None = None,
        heap_mb: int = BROKER_HEAP_MB,
        features: Mapping[str, int] | None = None,
    ) -> None:
        self.work_dir = work_dir
        # `kafka-storage.sh format --feature name=level`: e.g. transaction.version=1
        self.features = dict(features or {})
        self.heap_mb = heap_mb
        self.port = free_port()
        self.controller_port = free_port()
        self.data_dir = work_dir / "kafka-data"
        self.log_path = work_dir / "kafka.log"
        self.properties_path = work_dir / "server.properties"
        self.properties = {
            **BASE_PROPERTIES,
            "listeners": (
                f"PLAINTEXT://127.0.0.1:{self.port},CONTROLLER://127.0.0.1:{self.controller_port}"
            ),
            "advertised.listeners": f"PLAINTEXT://127.0.0.1:{self.port}",
            "controller.quorum.voters": f"{NODE_ID}@127.0.0.1:{self.controller_port}",
            "log.dirs": str(self.data_dir),
            **(overrides or {}),
        }
        self._process: ServerProcess | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        if self._process is None:
            raise RuntimeError("the Kafka broker is not running")
        return self._process.pid

    def start(self) -> KafkaServer:
        """Format the storage, start the broker and wait for its readiness line."""
        self.work_dir.mkdir(parents=True, exist_ok=True)
        self.properties_path.write_text(render_properties(self.properties))
        self._format_storage()
        argv = java_argv(
            KAFKA_MAIN, [str(self.properties_path)], heap_mb=self.heap_mb, log4j=BROKER_LOG4J
        )
        self._process = ServerProcess("kafka", argv, self.port, self.log_path)
        try:
            self._wait_ready()
        except BaseException:
            self.stop()
            raise
        return self

    def _format_storage(self) -> None:
        argv = java_argv(
            STORAGE_TOOL_MAIN,
            # `--cluster-id=`: an id may start with "-", which argparse would read as a flag
            ["format", f"--cluster-id={new_cluster_id()}", "-c", str(self.properties_path)]
            + [f"--feature={name}={level}" for name, level in self.features.items()],
            heap_mb=TOOLS_HEAP_MB,
            log4j=TOOLS_LOG4J,
        )
        result = subprocess.run(
            argv, capture_output=True, text=True, timeout=FORMAT_TIMEOUT_S, check=False
        )
        if result.returncode != 0:
            raise KafkaServerError(
                f"{STORAGE_TOOL_MAIN} format of {self.data_dir} failed "
                f"(exit {result.returncode}): {(result.stdout + result.stderr)[-2000:]}"
            )

    def _wait_ready(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process.proc.poll() is not None:
                raise KafkaServerError(
                    f"Kafka exited with status {self._process.proc.returncode} before ready:\n"
                    f"{self._process.log_tail()}"
                )
            if READY_LINE in self.log_path.read_text(errors="replace"):
                return
            time.sleep(0.1)
        raise KafkaServerError(
            f"Kafka did not log {READY_LINE!r} within {READY_TIMEOUT_S} s:\n"
            f"{self._process.log_tail()}"
        )

    def stop(self) -> None:
        """SIGTERM the broker (controlled shutdown), SIGKILL only if it hangs."""
        if self._process is not None:
            self._process.stop()

    def __enter__(self) -> KafkaServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    """`python -m interop.kafka_server [--dir DIR]`: one broker for manual runs.

    Prints the bootstrap address, then serves until SIGINT or SIGTERM, and always stops
    the JVM on the way out.
    """
    import argparse
    import signal
    import tempfile

    parser = argparse.ArgumentParser(description="Run Apache Kafka on loopback (KRaft).")
    parser.add_argument("--dir", type=Path, help="work directory (default: a temporary one)")
    args = parser.parse_args(argv)

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    tmp = tempfile.TemporaryDirectory(prefix="kafka-")
    with tmp, KafkaServer(args.dir or Path(tmp.name)) as server:
        print(f"{server.bootstrap} pid={server.pid} data={server.data_dir}", flush=True)
        signal.pause()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
