"""A process with a small RLIMIT_NOFILE, for the fd-budget tests (issue 23, finding 1).

Run as `python -m tests.storage.fd_child <scenario> <data_dir> <soft> <hard>`: it sets
the limit, runs the scenario and prints one JSON line of what it saw. Storage errors
are reported in that line (`error`: the wire code and message), never raised.
"""

from __future__ import annotations

import json
import logging
import os
import resource
import sys
from pathlib import Path
from typing import Any

import structlog

from protocol.batch import encode_batch
from protocol.errors import TidelogError
from storage.fdbudget import open_fd_count
from storage.manager import LogManager

NOW_MS = 1_700_000_000_000
# Partitions of `create_big`: three per descriptor of the tests' 300-descriptor limit.
BIG = 900


def _batch(tag: int) -> bytes:
    return encode_batch([(b"k", f"v{tag}".encode(), None, NOW_MS)])


def _manager(data_dir: Path) -> LogManager:
    manager = LogManager(data_dir, clock_ms=lambda: NOW_MS)
    manager.open()
    return manager


def _served(manager: LogManager, topic: str, partitions: int) -> int:
    """How many partitions of `topic` answer their one record."""
    served = 0
    for partition in range(partitions):
        if manager.get_log(topic, partition).read(0, 1 << 20).records:
            served += 1
    return served


def create_big(data_dir: Path, out: dict[str, Any]) -> None:
    """A topic of three partitions per descriptor: one record each, read back, restart."""
    manager = _manager(data_dir)
    manager.create_topic("big", BIG)
    for partition in range(BIG):
        manager.get_log("big", partition).append(_batch(partition))
    out["served"] = _served(manager, "big", BIG)
    out["fds"] = open_fd_count()
    manager.close()
    again = _manager(data_dir)
    out["topics_after_restart"] = again.topics()
    out["served_after_restart"] = _served(again, "big", BIG)
    out["fds_after_restart"] = open_fd_count()
    again.close()


def at_the_limit(data_dir: Path, out: dict[str, Any]) -> None:
    """Everything but a few descriptors taken by someone else (say, connections)."""
    manager = _manager(data_dir)
    manager.create_topic("old", 50)
    for partition in range(50):
        manager.get_log("old", partition).append(_batch(partition))
    hogs = []
    try:
        while True:
            hogs.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    for _ in range(4):
        os.close(hogs.pop())
    try:
        manager.create_topic("new", 2)
        manager.get_log("new", 1).append(_batch(1))
    except TidelogError as exc:
        out["create_error"] = [exc.code, exc.message]
    errors = set()
    served = 0
    for partition in range(50):
        try:
            plog = manager.get_log("old", partition)
            plog.append(_batch(partition))
            served += len(plog.read(0, 1 << 20).records) > 0
        except TidelogError as exc:
            errors.add(exc.code)
    out["served_at_limit"], out["errors_at_limit"] = served, sorted(errors)
    for fd in hogs:
        os.close(fd)
    out["served_after"] = _served(manager, "old", 50)
    out["topics"] = manager.topics()
    manager.close()


def many_rolls(data_dir: Path, out: dict[str, Any]) -> None:
    """segment.index.bytes at its minimum: every append wants a new segment."""
    manager = _manager(data_dir)
    manager.create_topic("rolls", 1, {"segment.index.bytes": 4})
    plog = manager.get_log("rolls", 0)
    appended = 0
    try:
        for i in range(600):
            plog.append(_batch(i))
            appended += 1
    except TidelogError as exc:
        out["error"] = [exc.code, exc.message]
    out["appended"] = appended
    out["high_watermark"] = plog.high_watermark
    out["segments"] = plog.segment_count
    out["fds"] = open_fd_count()
    manager.close()
    again = _manager(data_dir)
    out["high_watermark_after_restart"] = again.get_log("rolls", 0).high_watermark
    again.close()


def open_only(data_dir: Path, out: dict[str, Any]) -> None:
    manager = _manager(data_dir)
    out["topics"] = manager.topics()
    out["soft_limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    out["unloaded_topics"] = manager.statistics().unloaded_topics
    manager.create_topic("fresh", 2)
    manager.get_log("fresh", 1).append(_batch(1))
    out["topics_then"] = manager.topics()
    manager.close()


SCENARIOS = {
    "at_the_limit": at_the_limit,
    "create_big": create_big,
    "many_rolls": many_rolls,
    "open_only": open_only,
}


def main() -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL))
    scenario, data_dir, soft, hard = sys.argv[1], Path(sys.argv[2]), *map(int, sys.argv[3:5])
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    out: dict[str, Any] = {}
    SCENARIOS[scenario](data_dir, out)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
