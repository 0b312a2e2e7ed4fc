"""Benchmark: 20,000 partitions on a 20,000-descriptor limit (issue 34, item 7).

Starts the real broker (`python -m broker serve`) with RLIMIT_NOFILE set to
`--nofile` (soft and hard, so the broker cannot raise it), creates `--topics`
topics of `--partitions` partitions each over the msgpack protocol, produces
one record to every partition and fetches it back (calls pipelined on one
connection), stops the broker cleanly and starts it again. Prints JSON:

- `restart_to_listening_s`: from the restart's exec to its `broker_ready` event;
- `metadata_all_ms`: one Metadata request for every topic, after the restart;
- the broker's descriptors (`/proc/<pid>/fd`), memory maps and RSS, before and
  after the restart (after a fetch of every partition again);
- `served_after_restart`: partitions that answered their record after it.

    .venv/bin/python -m bench.partitions_bench [--topics 20] [--partitions 1000]
        [--nofile 20000] [--data-dir DIR] [--quick]

`--quick` is 4 topics x 500 partitions under a 1,000-descriptor limit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from protocol import calls
from protocol.batch import encode_batch
from tidelog.client import Client

ROOT = Path(__file__).resolve().parents[1]
# Requests in flight on the one connection (below the broker's per-connection cap).
WINDOW = 64
START_TIMEOUT_S = 1800.0


class Broker:
    """A `tidelog serve` child with a fixed RLIMIT_NOFILE; `ready_s` is exec to listening."""

    def __init__(self, data_dir: Path, nofile: int) -> None:
        cmd = [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--data-dir",
            str(data_dir),
            "--listen",
            "127.0.0.1:0",
            "--metrics-listen",
            "127.0.0.1:0",
            "--log-format",
            "json",
            "--set",
            f"max.connections={min(1000, nofile // 10)}",
        ]
        started = time.monotonic()
        self.proc = subprocess.Popen(
            cmd,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile)),
        )
        self.port = self._wait_ready()
        self.ready_s = time.monotonic() - started
        self._drain = threading.Thread(target=self._discard_output, daemon=True)
        self._drain.start()

    def _wait_ready(self) -> int:
        assert self.proc.stdout is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        for line in self.proc.stdout:
            if b'"broker_ready"' in line:
                return int(json.loads(line)["port"])
            if time.monotonic() > deadline:
                break
        self.proc.kill()
        raise RuntimeError(f"broker did not become ready (exit {self.proc.wait()})")

    def _discard_output(self) -> None:
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass

    def resources(self) -> dict[str, int]:
        """Descriptors, memory maps and RSS of the broker process now."""
        proc = Path(f"/proc/{self.proc.pid}")
        rss_kb = 0
        for line in (proc / "status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                rss_kb = int(line.split()[1])
        with (proc / "maps").open("rb") as maps:
            map_count = sum(1 for _ in maps)
        return {
            "fds": len(os.listdir(proc / "fd")),
            "maps": map_count,
            "rss_mb": rss_kb // 1024,
        }

    def stop(self) -> float:
        """SIGTERM and wait; returns the seconds the clean stop took."""
        started = time.monotonic()
        self.proc.terminate()
        self.proc.wait(timeout=START_TIMEOUT_S)
        stopped = time.monotonic() - started
        self._drain.join()
        assert self.proc.stdout is not None
        self.proc.stdout.close()
        return stopped


def pipelined(client: Client, requests: Iterable[calls.Call[Any]]) -> Iterator[Any]:
    """Each call's result, in order, with up to WINDOW requests in flight."""
    waiting: list[calls.Call[Any]] = []
    for call in requests:
        client.send(call.api, call.body)
        waiting.append(call)
        if len(waiting) >= WINDOW:
            yield waiting.pop(0).extract(client.receive().result())
    for call in waiting:
        yield call.extract(client.receive().result())


def partitions_of(topics: int, partitions: int) -> list[tuple[str, int]]:
    return [(f"p{t:02d}", p) for t in range(topics) for p in range(partitions)]


def produce_all(client: Client, targets: list[tuple[str, int]]) -> int:
    """One record to each partition; returns how many were acknowledged."""
    now = int(time.time() * 1000)

    def requests() -> Iterator[calls.Call[Any]]:
        for topic, partition in targets:
            record = encode_batch([(b"k", f"{topic}-{partition}".encode(), None, now)])
            yield calls.produce(topic, partition, record, acks=-1)

    return sum(1 for result in pipelined(client, requests()) if result is not None)


def fetch_all(client: Client, targets: list[tuple[str, int]]) -> int:
    """How many partitions answer a fetch from offset 0 with their record."""
    requests = (calls.fetch(topic, partition, 0, max_bytes=1 << 16) for topic, partition in targets)
    return sum(1 for result in pipelined(client, requests) if result.records)


def timed(action: Callable[[], Any]) -> tuple[Any, float]:
    started = time.monotonic()
    value = action()
    return value, time.monotonic() - started


def run(topics: int, partitions: int, nofile: int, data_dir: Path) -> dict[str, Any]:
    targets = partitions_of(topics, partitions)
    out: dict[str, Any] = {
        "benchmark": "partitions",
        "topics": topics,
        "partitions_per_topic": partitions,
        "partitions": len(targets),
        "rlimit_nofile": nofile,
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
    }
    broker = Broker(data_dir, nofile)
    out["first_start_to_listening_s"] = round(broker.ready_s, 3)
    try:
        with Client(f"127.0.0.1:{broker.port}", request_timeout_ms=600_000) as client:
            created = 0
            started = time.monotonic()
            for topic in sorted({t for t, _ in targets}):
                client.create_topic(topic, partitions)
                created += partitions
            out["create_s"] = round(time.monotonic() - started, 3)
            out["created"] = created
            out["produced"], seconds = timed(lambda: produce_all(client, targets))
            out["produce_s"] = round(seconds, 3)
            out["served"], seconds = timed(lambda: fetch_all(client, targets))
            out["fetch_s"] = round(seconds, 3)
        out["before_restart"] = broker.resources()
    finally:
        out["clean_stop_s"] = round(broker.stop(), 3)
    broker = Broker(data_dir, nofile)
    out["restart_to_listening_s"] = round(broker.ready_s, 3)
    try:
        out["after_restart_idle"] = broker.resources()
        with Client(f"127.0.0.1:{broker.port}", request_timeout_ms=600_000) as client:
            client.metadata()  # the connection's first request pays for its setup
            answer, seconds = timed(client.metadata)
            out["metadata_all_ms"] = round(seconds * 1000, 1)
            out["metadata_partitions"] = sum(len(topic["partitions"]) for topic in answer)
            out["served_after_restart"], seconds = timed(lambda: fetch_all(client, targets))
            out["fetch_after_restart_s"] = round(seconds, 3)
            out["produced_after_restart"] = produce_all(client, targets)
        out["after_restart_all_touched"] = broker.resources()
    finally:
        out["clean_stop_after_s"] = round(broker.stop(), 3)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--topics", type=int, default=20)
    parser.add_argument("--partitions", type=int, default=1000)
    parser.add_argument("--nofile", type=int, default=20_000)
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.quick:
        args.topics, args.partitions, args.nofile = 4, 500, 1000
    data_dir = args.data_dir or Path(tempfile.mkdtemp(prefix="partitions-bench-"))
    try:
        print(json.dumps(run(args.topics, args.partitions, args.nofile, data_dir), indent=2))
    finally:
        if args.data_dir is None:
            shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
