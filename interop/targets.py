"""Targets: a bootstrap address plus a way to start it. Scenarios only see the address.

`open_target("kafka", work_dir)` starts Apache Kafka, `open_target("tidelog", work_dir)`
starts `tidelog serve` (Kafka clients use its usual port: the protocol is told from a
connection's first bytes), and every differential test and benchmark runs against both
unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.tidelog_server import TidelogServer
from interop.kafka_server import KafkaServer


@dataclass(frozen=True, slots=True)
class Target:
    """A running Kafka-protocol server: what clients need (`bootstrap`), what benches
    measure (`pid`, for its CPU from /proc), where it keeps its log (`data_dir`, for the
    checks that read what was stored)."""

    name: str
    bootstrap: str
    pid: int
    data_dir: Path


@contextmanager
def _kafka(work_dir: Path) -> Iterator[Target]:
    with KafkaServer(work_dir) as server:
        yield Target("kafka", server.bootstrap, server.pid, server.data_dir)


@contextmanager
def _kafka_tv1(work_dir: Path) -> Iterator[Target]:
    """Kafka formatted at transaction.version=1: transactions as before KIP-890 part 2
    (no epoch bump per transaction, clients send AddPartitionsToTxn), the protocol a client
    speaks to a broker that finalizes no transaction.version, as Tidelog does."""
    with KafkaServer(work_dir, features={"transaction.version": 1}) as server:
        yield Target("kafka-tv1", server.bootstrap, server.pid, server.data_dir)


@contextmanager
def _tidelog(work_dir: Path) -> Iterator[Target]:
    server = TidelogServer(work_dir)
    try:
        yield Target("tidelog", f"127.0.0.1:{server.port}", server.process.pid, work_dir / "data")
    finally:
        server.stop()


TARGETS: dict[str, Callable[[Path], AbstractContextManager[Target]]] = {
    "kafka": _kafka,
    "kafka-tv1": _kafka_tv1,
    "tidelog": _tidelog,
}


def open_target(name: str, work_dir: Path) -> AbstractContextManager[Target]:
    """Start the target `name` with its files under `work_dir`; stopped on exit."""
    try:
        factory = TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}; known: {', '.join(sorted(TARGETS))}") from None
    return factory(work_dir)
