"""Load and crash tooling shared by the reliability tests: producers that fill the oracle's
ledger, broker (re)starts with failpoints, and /proc readings of a broker process.

Producers never retry: a record whose response never arrived is simply not in the
ledger, so any duplicate the oracle finds is the broker's doing.
"""

from __future__ import annotations

import os
import random
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from protocol.batch import encode_batch
from protocol.errors import StorageError, TidelogError
from tests.conftest import BrokerProcess, start_broker
from tests.reliability.oracle import ID_HEADER, Ack, Ledger, value_hash
from tidelog.client import Client

# Small segments so that every crash cycle crosses several rolls.
SMALL_SEGMENT_SETTINGS = (
    "log.segment.bytes=8192",
    "log.index.size.max.bytes=1024",
    "log.index.interval.bytes=512",
    "log.flush.offset.checkpoint.interval.ms=200",
    "log.flush.start.offset.checkpoint.interval.ms=200",
    "log.initial.task.delay.ms=0",
    "log.retention.check.interval.ms=200",
    "log.segment.delete.delay.ms=0",
    "log.cleaner.backoff.ms=100",
)
# For the start that the oracle inspects: no housekeeping or cleaning for the first
# seconds, so the leftover-file check sees what recovery left, not a write in progress.
QUIET_START_SETTINGS = (
    "log.initial.task.delay.ms=5000",
    "log.cleaner.backoff.ms=5000",
)
# Seconds a producer thread's blocking client waits for one response.
PRODUCE_TIMEOUT_S = 20


def with_settings(base: tuple[str, ...], *overrides: str) -> tuple[str, ...]:
    """`base` with the `key=value` items of `overrides` replacing those of the same key."""
    keys = {item.split("=", 1)[0] for item in overrides}
    return (*(item for item in base if item.split("=", 1)[0] not in keys), *overrides)


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ProducerStats:
    acked: int = 0
    storage_errors: int = 0
    other_errors: list[str] = field(default_factory=list)
    disconnected: bool = False
    latencies_s: list[float] = field(default_factory=list)


def produce_once(
    client: Client,
    ledger: Ledger,
    topic: str,
    partition: int,
    name: str,
    seq: int,
    *,
    acks: int,
    records: int,
    value_bytes: int,
    rng: random.Random,
    keys: int | None = None,
) -> int:
    """Send one batch; record its acks in the ledger only after the success response."""
    rows = []
    ids = []
    for i in range(records):
        record_id = f"{name}-{seq + i}"
        key = f"k{rng.randrange(keys)}".encode() if keys else record_id.encode()
        value = rng.randbytes(value_bytes)
        rows.append((key, value, [(ID_HEADER, record_id.encode())], None))
        ids.append((record_id, key, value))
    batch = encode_batch(rows, now_ms=now_ms())
    result = client.produce(topic, partition, batch, acks=acks)
    assert result is not None
    ledger.record(
        Ack(rid, topic, partition, result.base_offset + i, value_hash(value), acks, key)
        for i, (rid, key, value) in enumerate(ids)
    )
    return records


def producer_loop(
    address: str,
    ledger: Ledger,
    topics: dict[str, int],
    name: str,
    stop: threading.Event,
    stats: ProducerStats,
    *,
    seed: int,
    value_bytes: int = 200,
    keys: dict[str, int] | None = None,
    acks_choices: tuple[int, ...] = (1, -1),
) -> None:
    """Mixed acks=1/acks=-1 produce until `stop` or the broker goes away."""
    rng = random.Random(seed)
    seq = 0
    try:
        client = Client(address, client_id=name, request_timeout_ms=PRODUCE_TIMEOUT_S * 1000)
        client.connect()
    except OSError:
        stats.disconnected = True
        return
    with client:
        while not stop.is_set():
            topic = rng.choice(sorted(topics))
            partition = rng.randrange(topics[topic])
            count = rng.randint(1, 4)
            started = time.perf_counter()
            try:
                produce_once(
                    client,
                    ledger,
                    topic,
                    partition,
                    name,
                    seq,
                    acks=rng.choice(acks_choices),
                    records=count,
                    value_bytes=value_bytes,
                    rng=rng,
                    keys=(keys or {}).get(topic),
                )
                stats.acked += count
                stats.latencies_s.append(time.perf_counter() - started)
            except StorageError:
                stats.storage_errors += 1
            except TidelogError as exc:
                stats.other_errors.append(repr(exc))
            except (OSError, EOFError, ConnectionError):
                stats.disconnected = True
                return
            seq += count


@dataclass
class Load:
    """Producer threads against one broker address."""

    threads: list[threading.Thread]
    stats: list[ProducerStats]
    stop: threading.Event

    def finish(self, timeout_s: float = 30.0) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout_s)
            assert not thread.is_alive(), "producer thread did not finish"


def start_load(
    address: str,
    ledger: Ledger,
    topics: dict[str, int],
    *,
    producers: int = 3,
    seed: int = 0,
    prefix: str = "p",
    **kwargs: object,
) -> Load:
    stop = threading.Event()
    stats = [ProducerStats() for _ in range(producers)]
    threads = [
        threading.Thread(
            target=producer_loop,
            args=(address, ledger, topics, f"{prefix}{seed}.{i}", stop, stats[i]),
            kwargs={"seed": seed * 1000 + i, **kwargs},
            daemon=True,
        )
        for i in range(producers)
    ]
    for thread in threads:
        thread.start()
    return Load(threads, stats, stop)


def wait_until(predicate: Callable[[], bool], timeout_s: float, step_s: float = 0.02) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step_s)
    return predicate()


def restart(data_dir: Path, *sets: str, env: dict[str, str] | None = None) -> BrokerProcess:
    return start_broker(data_dir, *sets, env=env)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def raw_connect(address: tuple[str, int], timeout_s: float = 10.0) -> socket.socket:
    sock = socket.create_connection(address, timeout=timeout_s)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock
