"""Power-loss simulation (docs/reliability.md CC-08): every `acks: -1` record survives.

The broker runs with the test-mode fsync journal; after SIGKILL the data directory is
cut back to what was fsynced, with garbage past the cut, and the restarted broker
must hold every `acks: -1` record (P1) while the log stays a valid, gap-free prefix
(P4). `acks: 1` records may be lost here, which is the documented difference.
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
from tests.reliability.powerloss import Baseline, cut_power, journal_env
from tidelog.client import Client

POWER_CUTS = int(os.environ.get("TIDELOG_SOAK_POWER_CUTS", "4"))
TOPICS = {"power": 2, "rolled": 1}
TOPIC_CONFIGS = {"power": {"segment.bytes": "4096"}, "rolled": {"segment.bytes": "1024"}}
SETTINGS = with_settings(SMALL_SEGMENT_SETTINGS, "log.cleaner.enable=false")
VERIFY_SETTINGS = with_settings(SETTINGS, *QUIET_START_SETTINGS)


def run_power_cuts(tmp_path: Path, *, drop_unsynced_entries: bool) -> dict[str, int]:
    rng = random.Random(7)
    data_dir = tmp_path / "data"
    journal = tmp_path / "fsync.journal"
    ledger = Ledger()
    baseline = Baseline()
    totals = {"truncated": 0, "garbage": 0, "dropped": 0, "indexes_lost": 0}
    broker = start_broker(data_dir, *SETTINGS, env=journal_env(journal))
    with Client(broker.bootstrap) as client:
        for topic, count in TOPICS.items():
            client.create_topic(topic, count, TOPIC_CONFIGS[topic])
    for cycle in range(POWER_CUTS):
        load = start_load(broker.bootstrap, ledger, TOPICS, producers=3, seed=cycle)
        time.sleep(rng.uniform(0.5, 1.5))
        broker.kill()
        load.finish()
        done = cut_power(
            data_dir, journal, baseline, rng, drop_unsynced_entries=drop_unsynced_entries
        )
        totals = {k: totals[k] + done[k] for k in totals}
        baseline = Baseline.take(data_dir)
        broker = start_broker(data_dir, *VERIFY_SETTINGS, env=journal_env(journal))
        with Client(broker.bootstrap) as client:
            problems = verify(client, data_dir, ledger, TOPICS, require_acks_one=False, seed=cycle)
        assert not problems, f"power cut {cycle} ({done}): " + "\n".join(problems[:20])
        assert broker.stop(signal.SIGKILL) == -signal.SIGKILL
        broker = start_broker(data_dir, *SETTINGS, env=journal_env(journal))
    broker.kill()
    assert sum(1 for a in ledger.acks if a.acks == -1) > 20
    return totals


@pytest.mark.timeout(120 + POWER_CUTS * 15)
def test_power_cut_keeps_every_acks_all_record(tmp_path: Path) -> None:
    totals = run_power_cuts(tmp_path, drop_unsynced_entries=False)
    assert totals["truncated"] > 0, "the simulation never cut anything: it proved nothing"
    assert totals["indexes_lost"] > 0, "no active index lost its pages"


@pytest.mark.timeout(120 + POWER_CUTS * 15)
def test_power_cut_that_also_loses_unsynced_directory_entries(tmp_path: Path) -> None:
    totals = run_power_cuts(tmp_path, drop_unsynced_entries=True)
    assert totals["truncated"] + totals["dropped"] > 0
