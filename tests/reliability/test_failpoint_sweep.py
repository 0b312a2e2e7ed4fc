"""Failpoint sweeps through the real broker (docs/reliability.md CC-02..CC-06).

For every named point of storage, retention and compaction, a broker runs a
workload that reaches it with `<point>=kill@k` set, dies there, restarts without
failpoints and must satisfy the oracle. k runs 1..`SWEEP_HITS` (2 in CI; `make
soak` sets `TIDELOG_SOAK_SWEEP_HITS`). A separate test crashes during recovery and
checks that the second start converges to what an uninterrupted recovery gives.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import time
from pathlib import Path

import pytest

from protocol.errors import TidelogError
from storage import failpoints
from tests.conftest import BrokerProcess, start_broker
from tests.reliability.harness import (
    QUIET_START_SETTINGS,
    SMALL_SEGMENT_SETTINGS,
    start_load,
    wait_until,
    with_settings,
)
from tests.reliability.oracle import Ledger, fetch_all, verify
from tidelog.client import Client

SWEEP_HITS = int(os.environ.get("TIDELOG_SOAK_SWEEP_HITS", "2"))
# Seconds of load a point gets to be hit before the sweep calls it unreachable.
REACH_TIMEOUT_S = 15.0

TOPICS = {"sweep": 2, "retained": 1, "compacted": 1}
COMPACTED = frozenset({"compacted"})
TOPIC_CONFIGS = {
    "sweep": {"segment.bytes": "4096"},
    "retained": {"segment.bytes": "2048", "retention.bytes": "4096"},
    "compacted": {
        "segment.bytes": "2048",
        "cleanup.policy": "compact",
        "min.cleanable.dirty.ratio": "0.01",
    },
}
SETTINGS = with_settings(SMALL_SEGMENT_SETTINGS, "log.cleaner.backoff.ms=50")
VERIFY_SETTINGS = with_settings(SETTINGS, *QUIET_START_SETTINGS)

# The compaction package's own point (compaction/cleaner.py), swept with the registered ones.
COMPACTION_POINTS = ("compaction.after_cleaned_fsync",)
# Reached only at startup, after a torn tail: covered by the recovery test below.
RECOVERY_POINTS = ("recovery.after_truncate",)
SWEPT_POINTS = sorted(
    p for p in failpoints.POINTS | set(COMPACTION_POINTS) if p not in RECOVERY_POINTS
)
ROOT = Path(__file__).resolve().parents[2]
HIT_CALL = re.compile(r"failpoints\.hit\(\s*\"([a-z_.]+)\"")


def action_for(point: str) -> str:
    return "partial" if point == "segment.append.write" else "kill"


def start_with_failpoints(data_dir: Path, spec: str) -> BrokerProcess:
    """Start a broker that may die before it is ready (startup points)."""
    broker = start_broker(data_dir, *SETTINGS, env={failpoints.ENV_VAR: spec}, wait=False)
    wait_until(lambda: broker._ready.is_set() or broker.proc.poll() is not None, 30)
    return broker


# The topic_metadata points are hit once per created topic: the sweep's k-th hit needs
# k creations, so topics without load make up the difference.
SPARE_TOPICS = max(0, SWEEP_HITS - len(TOPICS))


def create_topics(client: Client) -> None:
    for topic, count in TOPICS.items():
        client.create_topic(topic, count, TOPIC_CONFIGS[topic])
    for spare in range(SPARE_TOPICS):
        client.create_topic(f"spare-{spare}", 1)


def existing_topics(client: Client) -> dict[str, int]:
    return {t["topic"]: len(t["partitions"]) for t in client.metadata() if t["error"] is None}


def run_until_killed(broker: BrokerProcess, ledger: Ledger, seed: int) -> bool:
    """Create topics and produce until the broker dies; False if it never did."""
    if broker.proc.poll() is not None:
        return True
    try:
        with Client(broker.bootstrap, request_timeout_ms=20_000) as client:
            create_topics(client)
    except (OSError, TidelogError, EOFError):
        broker.kill()
        return broker.proc.returncode == -signal.SIGKILL
    load = start_load(
        broker.bootstrap, ledger, TOPICS, producers=2, seed=seed, keys={"compacted": 8}
    )
    died = wait_until(lambda: broker.proc.poll() is not None, REACH_TIMEOUT_S, 0.05)
    load.finish()
    status = broker.proc.poll()
    broker.kill()
    return died and status == -signal.SIGKILL


def check_after_restart(data_dir: Path, ledger: Ledger, seed: int) -> list[str]:
    broker = start_broker(data_dir, *VERIFY_SETTINGS)
    try:
        with Client(broker.bootstrap) as client:
            topics = existing_topics(client)
            problems = verify(client, data_dir, ledger, topics, compacted=COMPACTED, seed=seed)
            if topics:
                # The log keeps taking writes after the crash.
                client.produce("sweep", 0, _one_batch(), acks=-1)
        return problems
    finally:
        assert broker.stop() == 0, broker.output()


def _one_batch() -> bytes:
    from protocol.batch import encode_batch

    return encode_batch([(b"k", b"after-crash", [], None)], now_ms=int(time.time() * 1000))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("point", SWEPT_POINTS)
def test_kill_at_each_hit_of_each_failpoint(point: str, tmp_path: Path) -> None:
    unreached = []
    for hit in range(1, SWEEP_HITS + 1):
        data_dir = tmp_path / f"hit{hit}" / "data"
        ledger = Ledger()
        broker = start_with_failpoints(data_dir, f"{point}={action_for(point)}@{hit}")
        if not run_until_killed(broker, ledger, seed=hit):
            unreached.append(hit)
            continue
        problems = check_after_restart(data_dir, ledger, seed=hit)
        assert not problems, f"{point}@{hit}: " + "\n".join(problems[:20])
    assert not unreached, f"{point} was never hit {unreached} times"


def dump(data_dir: Path) -> dict[tuple[str, int], list[tuple[int, str]]]:
    """Every partition's (offset, value hash) as served after a plain start."""
    broker = start_broker(data_dir, *SETTINGS, "log.cleaner.enable=false")
    try:
        problems: list[str] = []
        out = {}
        with Client(broker.bootstrap) as client:
            for topic, count in existing_topics(client).items():
                for partition in range(count):
                    _, _, records = fetch_all(client, topic, partition, problems)
                    out[topic, partition] = [(r.offset, r.value_sha) for r in records]
        assert not problems, problems
        return out
    finally:
        assert broker.stop() == 0


@pytest.mark.timeout(300)
def test_crash_during_recovery_then_second_start_converges(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ledger = Ledger()
    # A partial write leaves a torn tail that the next start must truncate.
    broker = start_with_failpoints(data_dir, "segment.append.write=partial@25")
    assert run_until_killed(broker, ledger, seed=1), "partial write never happened"
    reference_dir = tmp_path / "reference" / "data"
    shutil.copytree(data_dir, reference_dir)
    # Die right after the recovery truncation, then start again normally.
    crashed = start_with_failpoints(data_dir, "recovery.after_truncate=kill")
    wait_until(lambda: crashed.proc.poll() is not None, 30)
    assert crashed.proc.poll() == -signal.SIGKILL, "recovery never truncated:\n" + crashed.output()
    converged = dump(data_dir)
    assert converged == dump(reference_dir)
    problems = check_after_restart(data_dir, ledger, seed=2)
    assert not problems, "\n".join(problems[:20])


def test_every_registered_point_is_swept() -> None:
    """Each sweep case asserts its point was reached; this checks no point is left out."""
    named_in_code = {
        match
        for package in ("storage", "retention", "compaction")
        for path in (ROOT / package).glob("*.py")
        for match in HIT_CALL.findall(path.read_text())
    }
    registered = failpoints.POINTS | named_in_code
    covered = set(SWEPT_POINTS) | set(RECOVERY_POINTS)
    assert registered <= covered, sorted(registered - covered)
    assert set(COMPACTION_POINTS) <= named_in_code


# Error actions: the broker must stay up, report the failure and keep the oracle's promises.
ERROR_CASES = [
    ("segment.append.before_write", "eio@5", "produce"),
    ("segment.append.write", "enospc@5", "produce"),
    ("log.roll.before_new_segment", "eio@2", "produce"),
    ("log.flush.before_fsync", "eio@3", "produce"),
    ("checkpoint.before_rename", "enospc@2", "log"),
    ("compaction.after_cleaned_fsync", "enospc@1", "log"),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("point", "action", "seen_by"), ERROR_CASES)
def test_error_at_failpoint_is_reported_and_the_broker_stays_up(
    tmp_path: Path, point: str, action: str, seen_by: str
) -> None:
    data_dir = tmp_path / "data"
    ledger = Ledger()
    broker = start_with_failpoints(data_dir, f"{point}={action}")
    assert broker._ready.is_set(), broker.output()[-3000:]
    with Client(broker.bootstrap) as client:
        create_topics(client)
    load = start_load(broker.bootstrap, ledger, TOPICS, producers=2, seed=3, keys={"compacted": 8})
    reported = wait_until(
        lambda: (
            sum(s.storage_errors for s in load.stats) > 0
            if seen_by == "produce"
            else bool(broker.events("storage_error") or broker.events("cleaning_failed"))
        ),
        REACH_TIMEOUT_S,
        0.05,
    )
    time.sleep(0.5)
    load.finish()
    assert broker.proc.poll() is None, broker.output()[-3000:]
    assert reported, f"{point}={action} was never reported"
    assert not [e for s in load.stats for e in s.other_errors]
    assert not any(s.disconnected for s in load.stats)
    broker.kill()
    problems = check_after_restart(data_dir, ledger, seed=4)
    assert not problems, "\n".join(problems[:20])
