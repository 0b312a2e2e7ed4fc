"""Sustained produce + fetch with retention and compaction running (docs/reliability.md LD-01,
LD-03).

`LOAD_S` seconds in CI (60), 30 minutes under `make soak` (`TIDELOG_SOAK_LOAD_S=1800`).
Asserted: zero errors, every acknowledged record verified by the oracle, broker RSS
growth < 10% after the warm-up, open descriptors flat. Recorded (one JSON line, not
asserted, since tests never assert on timings): produce/fetch p50/p99/max latency
and the event-loop lateness seen by a heartbeat request every 50 ms.
"""

from __future__ import annotations

import json
import os
import statistics
import threading
import time
from pathlib import Path

import pytest

from protocol.errors import OffsetOutOfRange
from tests.conftest import start_broker
from tests.reliability.harness import (
    QUIET_START_SETTINGS,
    SMALL_SEGMENT_SETTINGS,
    open_fds,
    rss_bytes,
    start_load,
    with_settings,
)
from tests.reliability.oracle import Ledger, decode_stream, verify
from tidelog.client import Client

LOAD_S = float(os.environ.get("TIDELOG_SOAK_LOAD_S", "60"))
# Memory and descriptors are compared from the end of the warm-up on.
WARMUP_S = min(15.0, LOAD_S / 4)
RSS_GROWTH_LIMIT = 0.10
# Descriptors swing by tens as segments roll and retention deletes them; a leak shows as
# a trend, so the median of the last third of the samples is compared with the first's.
FD_SLACK = 16
# Period of the heartbeat whose lateness stands for the event loop's.
HEARTBEAT_S = 0.05

TOPICS = {"load": 4, "compacted": 1}
TOPIC_CONFIGS = {
    "load": {"segment.bytes": "131072", "retention.bytes": "524288"},
    "compacted": {
        "segment.bytes": "65536",
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.1",
    },
}
SETTINGS = with_settings(
    SMALL_SEGMENT_SETTINGS,
    "log.index.size.max.bytes=65536",
    "log.index.interval.bytes=4096",
    "log.retention.check.interval.ms=1000",
    "log.cleaner.backoff.ms=1000",
)


def percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)
    pick = lambda q: ordered[min(len(ordered) - 1, int(len(ordered) * q))]  # noqa: E731
    return {
        "p50_ms": round(pick(0.5) * 1000, 2),
        "p99_ms": round(pick(0.99) * 1000, 2),
        "max_ms": round(ordered[-1] * 1000, 2),
    }


class Consumers:
    """Fetch every partition in a loop, following retention's moving log start."""

    def __init__(self, bootstrap: str, stop: threading.Event) -> None:
        self.bootstrap = bootstrap
        self.stop = stop
        self.errors: list[str] = []
        self.latencies_s: list[float] = []
        self.records = 0
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        positions = {(t, p): 0 for t, n in TOPICS.items() for p in range(n)}
        with Client(self.bootstrap, request_timeout_ms=30_000) as client:
            while not self.stop.is_set():
                for (topic, partition), position in positions.items():
                    started = time.perf_counter()
                    try:
                        result = client.fetch(topic, partition, position, max_bytes=256 * 1024)
                    except OffsetOutOfRange:
                        start = client.list_offsets(topic, partition, "earliest")
                        positions[topic, partition] = start.offset if start else 0
                        continue
                    except Exception as exc:
                        self.errors.append(repr(exc))
                        return
                    self.latencies_s.append(time.perf_counter() - started)
                    problems: list[str] = []
                    got = decode_stream(result.records, topic, problems)
                    self.errors += problems
                    got = [r for r in got if r.offset >= position]
                    if got:
                        self.records += len(got)
                        positions[topic, partition] = got[-1].offset + 1


class Heartbeat:
    """api_versions every HEARTBEAT_S: how late the answers come is the loop's lateness."""

    def __init__(self, bootstrap: str, stop: threading.Event) -> None:
        self.bootstrap = bootstrap
        self.stop = stop
        self.latencies_s: list[float] = []
        self.errors: list[str] = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        with Client(self.bootstrap) as client:
            while not self.stop.wait(HEARTBEAT_S):
                started = time.perf_counter()
                try:
                    client.api_versions()
                except Exception as exc:
                    self.errors.append(repr(exc))
                    return
                self.latencies_s.append(time.perf_counter() - started)


@pytest.mark.timeout(int(LOAD_S) + 180)
def test_sustained_load_with_retention_and_compaction(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    broker = start_broker(data_dir, *SETTINGS)
    ledger = Ledger()
    try:
        with Client(broker.bootstrap) as client:
            for topic, count in TOPICS.items():
                client.create_topic(topic, count, TOPIC_CONFIGS[topic])
        stop = threading.Event()
        consumers = Consumers(broker.bootstrap, stop)
        heartbeat = Heartbeat(broker.bootstrap, stop)
        load = start_load(
            broker.bootstrap, ledger, TOPICS, producers=4, value_bytes=1024, keys={"compacted": 50}
        )
        consumers.thread.start()
        heartbeat.thread.start()
        pid = broker.proc.pid
        samples: list[tuple[float, int, int]] = []
        started = time.monotonic()
        while time.monotonic() - started < LOAD_S:
            time.sleep(1.0)
            samples.append((time.monotonic() - started, rss_bytes(pid), open_fds(pid)))
        load.finish()
        stop.set()
        consumers.thread.join(30)
        heartbeat.thread.join(30)
        assert broker.proc.poll() is None, broker.output()[-3000:]
        errors = [e for s in load.stats for e in s.other_errors] + consumers.errors
        errors += heartbeat.errors
        assert not errors, errors[:10]
        assert not any(s.storage_errors or s.disconnected for s in load.stats)
        # A clean stop under the cleaner and retention, then the oracle on a quiet restart
        # (a running cleaner legitimately has `.cleaned` files open).
        assert broker.stop() == 0, broker.output()[-3000:]
        broker = start_broker(data_dir, *with_settings(SETTINGS, *QUIET_START_SETTINGS))
        with Client(broker.bootstrap) as client:
            problems = verify(client, data_dir, ledger, TOPICS, compacted=frozenset({"compacted"}))
        assert not problems, "\n".join(problems[:20])
        after_warmup = [s for s in samples if s[0] >= WARMUP_S]
        rss_start = after_warmup[0][1]
        rss_max = max(s[1] for s in after_warmup)
        fds = [s[2] for s in after_warmup]
        report = {
            "load_s": LOAD_S,
            "acked_records": len(ledger),
            "fetched_records": consumers.records,
            "produce": percentiles([x for s in load.stats for x in s.latencies_s]),
            "fetch": percentiles(consumers.latencies_s),
            "loop_lateness": percentiles(heartbeat.latencies_s),
            "rss_after_warmup_bytes": rss_start,
            "rss_max_bytes": rss_max,
            "fds_min_max": [min(fds), max(fds)],
            "fds": fds,
        }
        print(json.dumps(report))
        assert rss_max <= rss_start * (1 + RSS_GROWTH_LIMIT), report
        # Flat: the median of the last third is no higher than that of the first (+ slack).
        third = max(1, len(fds) // 3)
        assert statistics.median(fds[-third:]) <= statistics.median(fds[:third]) + FD_SLACK, report
        assert consumers.records > 0 and len(ledger) > 0
    finally:
        broker.kill()
