"""kill -9 during uploads and remote deletions, cycle after cycle (issue 39 item 6; the
tiered counterpart of tests/reliability/test_crash_kill.py).

Each cycle restarts the broker on the same data directory, checks with the tiered
oracle (tests/tiered/tiered_oracle.py) that everything acknowledged so far is readable
through the broker across both tiers and that the bucket agrees with the manifests,
then produces for a random moment and SIGKILLs the broker mid-flight. The store is
moto behind the fault proxy, slowed a little per PUT and DELETE so that kills land
inside uploads and deletions, not only between them. Two topics: `keep` (everything
retained, local retention far below its size: uploads, then local deletions) and
`expire` (remote retention by size: deletions from the bucket). At the end, with the
broker left running, orphaned objects are swept and every object left in the bucket is
named by exactly one readable manifest entry.

`make test` runs KILL_CYCLES cycles; `make tiered` sets TIDELOG_TIERED_KILL_CYCLES (40).
"""

from __future__ import annotations

import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import start_broker
from tests.reliability.harness import start_load, wait_until
from tests.reliability.oracle import Ledger
from tests.tiered.faulty_s3 import Fault, FaultyS3
from tests.tiered.tiered_broker import credentials_file, tier_state, tiered_settings
from tests.tiered.tiered_oracle import check_bucket, read_manifest, verify_records
from tidelog.client import Client

pytestmark = [pytest.mark.tiered, pytest.mark.integration]

# After the loop, a broker runs with this failpoint: it dies right after writing
# DELETE_SEGMENT_STARTED, so one restart must provably finish a deletion.
DELETE_FAILPOINT = "remote.delete.after_started=kill@1"
DELETE_KILL_WAIT_S = 60.0
KILL_CYCLES = int(os.environ.get("TIDELOG_TIERED_KILL_CYCLES", "3"))
# Longest a cycle produces before the kill (a random moment below this): long enough
# for segments to roll, upload and be deleted within one cycle.
MAX_LOAD_S = 2.5
# Seconds added to every PUT and DELETE by the proxy: widens the windows kills land in.
STORE_DELAY_S = 0.05
BUCKET, KEY, SECRET, PREFIX = "kill-loop", "kill-key", "kill-secret", "tidelog"
TOPICS = {"keep": 2, "expire": 1}
SEGMENT = {"segment.bytes": "8192", "remote.storage.enable": "true", "retention.ms": "-1"}
TOPIC_CONFIGS = {
    "keep": {**SEGMENT, "local.retention.bytes": "8192", "retention.bytes": "-1"},
    "expire": {**SEGMENT, "local.retention.bytes": "8192", "retention.bytes": "65536"},
}
SWEEP_TIMEOUT_S = 60.0
# From this many cycles on, kills must have landed inside an upload (deletions are a
# smaller window: their count is printed).
MANY_CYCLES = 20


@pytest.fixture
def store(moto_server: str) -> Iterator[tuple[FaultyS3, Any]]:
    s3 = boto3.client(
        "s3", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id=KEY, aws_secret_access_key=SECRET,
    )  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    proxy = FaultyS3(moto_server)
    proxy.set(Fault.SLOW, slow_s=STORE_DELAY_S, methods={"PUT", "DELETE", "POST"})
    yield proxy, s3
    proxy.close()


@pytest.mark.timeout(max(240, KILL_CYCLES * 30))
def test_kill9_during_uploads_and_remote_deletions_loses_nothing(
    tmp_path: Path, store: tuple[FaultyS3, Any]
) -> None:
    proxy, s3 = store
    rng = random.Random(int(os.environ.get("TIDELOG_SOAK_SEED", "39")))
    creds = credentials_file(tmp_path, KEY, SECRET)
    settings = tiered_settings(
        endpoint=proxy.endpoint,
        bucket=BUCKET,
        credentials=creds,
        prefix=PREFIX,
        extra=("log.segment.bytes=8192", "log.flush.offset.checkpoint.interval.ms=200"),
    )
    data_dir = tmp_path / "data"
    ledger = Ledger()
    broker = start_broker(data_dir, *settings)
    uploaded_before_kill = 0
    caught: dict[str, int] = {}  # manifest entries mid-step when the broker died
    try:
        with Client(broker.bootstrap) as client:
            for topic, count in TOPICS.items():
                client.create_topic(topic, count, TOPIC_CONFIGS[topic])
        for cycle in range(KILL_CYCLES):
            load = start_load(
                broker.bootstrap, ledger, TOPICS, producers=2, seed=cycle, value_bytes=300
            )
            time.sleep(rng.uniform(0.3, MAX_LOAD_S))
            broker.kill()
            load.finish()
            assert not [e for s in load.stats for e in s.other_errors]
            uploaded_before_kill = max(uploaded_before_kill, proxy.counters.total("PUT"))
            for state in _states_at_kill(data_dir):
                caught[state] = caught.get(state, 0) + 1
            broker = start_broker(data_dir, *settings)
            with Client(broker.bootstrap) as client:
                problems, _ = verify_records(client, ledger, TOPICS)
            bucket = check_bucket(s3, BUCKET, PREFIX, data_dir, TOPICS)
            problems += bucket.problems
            assert not problems, f"cycle {cycle}: " + "\n".join(problems[:20])
        assert len(ledger) > KILL_CYCLES * 50, "the load barely produced anything"
        assert uploaded_before_kill > 0, "no upload ever started: the loop tested nothing"
        print(f"kills caught entries mid-step: {caught}")
        broker.kill()
        broker, landed = _kill_mid_deletion(data_dir, settings, ledger)
        assert landed, "the failpoint kill did not leave DELETE_SEGMENT_STARTED on disk"
        assert wait_until(
            lambda: "DELETE_SEGMENT_STARTED" not in _states_at_kill(data_dir),
            SWEEP_TIMEOUT_S,
            step_s=0.2,
        ), "deletion not resumed"
        with Client(broker.bootstrap) as client:
            problems, _ = verify_records(client, ledger, TOPICS)
        problems += check_bucket(s3, BUCKET, PREFIX, data_dir, TOPICS).problems
        assert not problems, "after the mid-deletion kill: " + "\n".join(problems[:20])
        if KILL_CYCLES >= MANY_CYCLES:  # enough cycles to land inside an upload
            assert caught.get("COPY_SEGMENT_STARTED"), caught
        _check_swept_and_tiered(broker.bootstrap, s3, data_dir)
    finally:
        broker.kill()


def _kill_mid_deletion(
    data_dir: Path, settings: tuple[str, ...], ledger: Ledger
) -> tuple[Any, bool]:
    """Kill the broker deterministically mid-deletion: a failpoint ends it right after
    it wrote DELETE_SEGMENT_STARTED for a remote segment, before deleting its objects
    (the random kills above rarely land there). Then restart it; returns the broker and
    whether the kill left a deletion in flight on disk."""
    env = {"TIDELOG_FAILPOINTS": DELETE_FAILPOINT}
    broker = start_broker(data_dir, *settings, env=env, wait=False)
    load = None
    deadline = time.monotonic() + DELETE_KILL_WAIT_S
    while broker.proc.poll() is None and time.monotonic() < deadline:
        if load is None and broker.ready:  # more load: retention gets work
            load = start_load(broker.bootstrap, ledger, TOPICS, producers=2, seed=99)
        time.sleep(0.05)
    if load is not None:
        load.finish()
    assert broker.proc.poll() is not None, "the deletion failpoint never fired"
    landed = "DELETE_SEGMENT_STARTED" in _states_at_kill(data_dir)
    return start_broker(data_dir, *settings), landed


def _states_at_kill(data_dir: Path) -> list[str]:
    """The in-flight states (copy or delete started) in the manifests a kill left."""
    found = []
    for topic, count in TOPICS.items():
        for partition in range(count):
            manifest = read_manifest(data_dir, topic, partition) or {"segments": []}
            found += [
                e["state"]
                for e in manifest["segments"]
                if e["state"] in ("COPY_SEGMENT_STARTED", "DELETE_SEGMENT_STARTED")
            ]
    return found


def _check_swept_and_tiered(bootstrap: str, s3: Any, data_dir: Path) -> None:
    """With the broker running on: orphans go, and both topics really use the store."""
    last = check_bucket(s3, BUCKET, PREFIX, data_dir, TOPICS)

    def swept() -> bool:
        nonlocal last
        last = check_bucket(s3, BUCKET, PREFIX, data_dir, TOPICS)
        return not last.orphans and not last.problems

    assert wait_until(swept, SWEEP_TIMEOUT_S, step_s=0.5), (last.problems, last.orphans[:10])
    assert last.readable_segments > 0
    with Client(bootstrap) as client:

        def tiered() -> bool:
            # Below the local log start, `keep`'s records are only in the bucket; remote
            # retention moved the log start of `expire` (whose remote tier it may empty
            # while a backlog of uploads waits: total retention never deletes those).
            keep = tier_state(client, "keep", TOPICS["keep"]).values()
            expire = tier_state(client, "expire", 1)[0]
            return (
                all(s.local_log_start_offset > s.log_start_offset for s in keep)
                and expire.log_start_offset > 0
            )

        assert wait_until(tiered, SWEEP_TIMEOUT_S, step_s=0.5), [
            (t, p, s.log_start_offset, s.local_log_start_offset, s.high_watermark)
            for t, n in TOPICS.items()
            for p, s in tier_state(client, t, n).items()
        ]
