"""kill -9 at every step of an upload and of a remote deletion (docs/reliability.md).

Each case starts the real broker with one failpoint (`TIDELOG_FAILPOINTS`, the
broker SIGKILLs itself at the n-th hit of that step), produces acks=-1 batches to a
tiered topic whose local and total retention are small, until the kill; then starts
it again without failpoints and waits until every rolled segment is uploaded and
retention has run. Then:

- every acknowledged record at or above the log start offset is in the store's
  readable segments or in a local segment, with its value (nothing acknowledged is
  unreadable), and no offset between the log start and the log end is missing;
- every object in the bucket belongs to a manifest entry that is not yet deleted (the
  orphans of the killed upload were swept; ids are fresh per attempt, so no object is
  referenced twice), and no entry is left COPY_SEGMENT_STARTED or
  DELETE_SEGMENT_STARTED.

`make test` runs one step (QUICK_POINTS); `make tiered` sweeps every step at the 1st
and 3rd hit.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from storage.fileio import FileIO
from storage.remote import SegmentState, parse_segment_key, read_manifest
from storage.remote.partition import COPY_POINTS, DELETE_POINTS
from tests.conftest import start_broker
from tests.tiered.conftest import S3Server
from tests.tiered.tierlog import check_bucket, records_across_tiers
from tidelog.client import Client

pytestmark = pytest.mark.integration

TOPIC = "crash"
FAST = ("remote.log.manager.task.interval.ms=50", "log.initial.task.delay.ms=0",
        "log.retention.check.interval.ms=100")  # fmt: skip
TOPIC_CONFIGS = {"remote.storage.enable": "true", "segment.bytes": "4096",
                 "local.retention.bytes": "4096", "retention.bytes": "24576"}  # fmt: skip
MANIFEST_POINTS = ("remote_manifest.before_rename", "remote_manifest.after_rename")
ALL_POINTS = (*COPY_POINTS, *DELETE_POINTS, *MANIFEST_POINTS)
QUICK_POINTS = ("remote.copy.after_log_put",)
BATCHES_MAX = 120
WAIT_S = 40.0


def _batch(i: int) -> tuple[bytes, list[bytes]]:
    values = [f"r{i}-{j}".encode().ljust(90, b"#") for j in range(10)]
    now = time.time_ns() // 1_000_000
    return encode_batch([(b"k", v, None, now) for v in values]), values


def _produce_until_killed(address: str, proc_alive: object) -> dict[int, bytes]:
    """acks=-1 batches until the broker dies (or BATCHES_MAX); the acknowledged ones."""
    acked: dict[int, bytes] = {}
    try:
        with Client(address) as client:
            for i in range(BATCHES_MAX):
                data, values = _batch(i)
                result = client.produce(TOPIC, 0, data, acks=-1)
                assert result is not None
                acked.update({result.base_offset + j: v for j, v in enumerate(values)})
                time.sleep(0.01)
    except (OSError, ConnectionError, EOFError, TimeoutError):
        pass  # killed mid-request: that batch was not acknowledged
    except Exception as exc:  # the client's own error types for a closed connection
        if "connection" not in str(exc).lower() and "closed" not in str(exc).lower():
            raise
    return acked


def _settled(s3: S3Server, data_dir: Path) -> bool:
    manifest = read_manifest(FileIO(), data_dir / f"{TOPIC}-0")
    if manifest is None:
        return False
    busy = {SegmentState.COPY_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_STARTED}
    if any(s.state in busy for s in manifest.segments):
        return False
    local = sorted((data_dir / f"{TOPIC}-0").glob("*.log"))
    rolled_bases = [int(p.stem) for p in local[:-1]]
    return all(manifest.covers(b, b + 1) for b in rolled_bases)


def _run_case(tmp_path: Path, s3: S3Server, point: str, hit: int) -> None:
    data_dir = tmp_path / "data"
    sets = (*s3.broker_options(), *FAST)
    env = {**s3.env, "TIDELOG_FAILPOINTS": f"{point}=kill@{hit}"}
    broker = start_broker(data_dir, *sets, env=env)
    try:
        with Client(broker.bootstrap) as client:
            client.create_topic(TOPIC, 1, TOPIC_CONFIGS)
        acked = _produce_until_killed(broker.bootstrap, broker)
        deadline = time.monotonic() + WAIT_S
        while broker.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.proc.poll() is not None, f"{point}@{hit} never fired:\n{broker.output()}"
    finally:
        if broker.proc.poll() is None:
            broker.kill()
    again = start_broker(data_dir, *sets, env=s3.env)
    try:
        deadline = time.monotonic() + WAIT_S
        while not _settled(s3, data_dir):
            assert time.monotonic() < deadline, f"never settled:\n{again.output()}"
            time.sleep(0.05)
        with Client(again.bootstrap) as client:
            [meta] = client.metadata([TOPIC])
            start = meta["partitions"][0]["log_start_offset"]
            end = meta["partitions"][0]["log_end_offset"]
        held = records_across_tiers(s3, data_dir, TOPIC)
        missing = [o for o in range(start, end) if o not in held]
        assert not missing, f"{point}@{hit}: offsets {missing[:5]}... in neither tier"
        lost = {o: v for o, v in acked.items() if o >= start and held.get(o) != v}
        assert not lost, f"{point}@{hit}: acknowledged records unreadable: {sorted(lost)[:5]}"
        manifest = check_bucket(s3, data_dir, TOPIC)
        live = {s.segment_id for s in manifest.live()}
        keys = s3.object_keys(f"tidelog/{TOPIC}-0/")
        parsed = [parse_segment_key(k) for k in keys]
        named = {p.segment_id for p in parsed if p is not None}
        assert named <= live, f"{point}@{hit}: objects of deleted entries remain"
    finally:
        again.stop()


@pytest.mark.parametrize("point", QUICK_POINTS)
def test_kill9_during_upload_and_deletion(tmp_path: Path, s3_server: S3Server, point: str) -> None:
    _run_case(tmp_path, s3_server, point, 2)


@pytest.mark.tiered
@pytest.mark.timeout(600)
@pytest.mark.parametrize("hit", [1, 3])
@pytest.mark.parametrize("point", ALL_POINTS)
def test_kill9_at_every_step(tmp_path: Path, s3_server: S3Server, point: str, hit: int) -> None:
    _run_case(tmp_path, s3_server, point, hit)
