"""Random kill -9 cycles under mixed acks=1/acks=-1 load (docs/reliability.md CC-01).

Each cycle restarts the broker on the same data directory, asks the oracle about
everything acknowledged so far, produces for a random moment and SIGKILLs the
broker mid-flight. CI runs `KILL_CYCLES` cycles; `make soak` sets
`TIDELOG_SOAK_KILL_CYCLES` (200+).
"""

from __future__ import annotations

import os
import random
import signal
import time
from pathlib import Path

import pytest

from tests.conftest import start_broker
from tests.reliability.harness import (
    QUIET_START_SETTINGS,
    SMALL_SEGMENT_SETTINGS,
    start_load,
    with_settings,
)
from tests.reliability.oracle import Ledger, verify
from tidelog.client import Client

# Cycles in CI (each one a restart, ~2 s here); the soak raises it.
KILL_CYCLES = int(os.environ.get("TIDELOG_SOAK_KILL_CYCLES", "20"))
# Longest a cycle produces before the kill (a random moment below this).
MAX_LOAD_S = 0.8

TOPICS = {"crash": 3, "retained": 1, "compacted": 1}
COMPACTED = frozenset({"compacted"})
TOPIC_CONFIGS = {
    "crash": {"segment.bytes": "4096"},
    "retained": {"segment.bytes": "4096", "retention.bytes": "16384"},
    "compacted": {
        "segment.bytes": "4096",
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
    },
}
SETTINGS = with_settings(SMALL_SEGMENT_SETTINGS, "log.cleaner.backoff.ms=200")
# The start the oracle inspects right away: housekeeping and cleaning begin seconds later.
VERIFY_SETTINGS = with_settings(SETTINGS, *QUIET_START_SETTINGS)


def create_topics(address: str) -> None:
    with Client(address) as client:
        for topic, count in TOPICS.items():
            client.create_topic(topic, count, TOPIC_CONFIGS[topic])


@pytest.mark.timeout(max(120, KILL_CYCLES * 8))
def test_random_kill9_cycles_lose_nothing_acknowledged(tmp_path: Path) -> None:
    rng = random.Random(int(os.environ.get("TIDELOG_SOAK_SEED", "10")))
    data_dir = tmp_path / "data"
    ledger = Ledger()
    broker = start_broker(data_dir, *SETTINGS)
    try:
        create_topics(broker.bootstrap)
        for cycle in range(KILL_CYCLES):
            load = start_load(
                broker.bootstrap, ledger, TOPICS, producers=3, seed=cycle, keys={"compacted": 16}
            )
            time.sleep(rng.uniform(0.05, MAX_LOAD_S))
            broker.kill()
            load.finish()
            assert not [e for s in load.stats for e in s.other_errors]
            broker = start_broker(data_dir, *VERIFY_SETTINGS)
            with Client(broker.bootstrap) as client:
                problems = verify(client, data_dir, ledger, TOPICS, compacted=COMPACTED, seed=cycle)
            assert not problems, f"cycle {cycle}: " + "\n".join(problems[:20])
            # Recovery reports every partition it loaded after the unclean stop.
            loaded = [e for e in broker.events("log_loaded") if e["clean"] is False]
            assert len(loaded) == sum(TOPICS.values()), loaded
            # The next cycle's load runs with housekeeping and the cleaner active.
            assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
            broker = start_broker(data_dir, *SETTINGS)
        assert len(ledger) > KILL_CYCLES * 10, "the load barely produced anything"
        assert sum(1 for a in ledger.acks if a.acks == -1) > 0
    finally:
        broker.kill()
