"""The object store failing under a real broker process: down (refused), resetting
connections, answering 500s, slow, or cutting bodies short, in front of moto
(tests/tiered/faulty_s3.py).

During uploads: produce and every local read go on being served, local retention
deletes nothing that is not uploaded, the uploader retries, and once the store heals
every acknowledged record is readable across both tiers with a consistent bucket.
During remote reads: only the partitions that need the store fail, with the retriable
REMOTE_STORAGE_ERROR, while the local partitions of the same fetch are answered; after
healing the same offsets read back.
"""

from __future__ import annotations

import os
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import BrokerProcess, start_broker
from tests.reliability.harness import produce_once, wait_until
from tests.reliability.oracle import Ledger
from tests.tiered.faulty_s3 import Fault, FaultyS3
from tests.tiered.tiered_broker import (
    TIERED_TOPIC_CONFIG,
    credentials_file,
    remote_errors,
    tier_state,
    tiered_settings,
    wait_tiered,
)
from tests.tiered.tiered_oracle import check_bucket, verify_records
from tidelog.client import Client

pytestmark = [pytest.mark.tiered, pytest.mark.integration]

KEY, SECRET, PREFIX = "fault-key", "fault-secret", "tidelog"
# `make test` runs the first fault of each kind; `make tiered` (TIDELOG_TIERED_FULL) all.
FULL = bool(os.environ.get("TIDELOG_TIERED_FULL"))
TIERED, LOCAL = "tiered", "local"
TOPICS = {TIERED: 2, LOCAL: 1}
_buckets = iter(range(10_000))


class Setup:
    def __init__(
        self, broker: BrokerProcess, proxy: FaultyS3, s3: Any, bucket: str, settings: tuple
    ) -> None:
        self.broker, self.proxy, self.s3, self.bucket = broker, proxy, s3, bucket
        self.settings = settings
        self.ledger = Ledger()
        self.rng = random.Random(7)
        self.seq = 0

    def produce(self, client: Client, batches: int) -> None:
        """acks=-1 batches into every partition of both topics, all acknowledged."""
        for _ in range(batches):
            for topic, count in TOPICS.items():
                for partition in range(count):
                    self.seq += produce_once(
                        client, self.ledger, topic, partition, "f", self.seq,
                        acks=-1, records=5, value_bytes=200, rng=self.rng,
                    )  # fmt: skip


@pytest.fixture
def setup(moto_server: str, tmp_path: Path) -> Iterator[Setup]:
    bucket = f"faults-{next(_buckets)}"
    s3 = boto3.client(
        "s3", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id=KEY, aws_secret_access_key=SECRET,
    )  # fmt: skip
    s3.create_bucket(Bucket=bucket)
    proxy = FaultyS3(moto_server)
    creds = credentials_file(tmp_path, KEY, SECRET)
    settings = tiered_settings(
        endpoint=proxy.endpoint, bucket=bucket, credentials=creds, prefix=PREFIX
    )
    broker = start_broker(tmp_path / "data", *settings)
    with Client(broker.bootstrap) as client:
        client.create_topic(TIERED, TOPICS[TIERED], TIERED_TOPIC_CONFIG)
        client.create_topic(LOCAL, TOPICS[LOCAL], {"segment.bytes": "16384"})
    setup = Setup(broker, proxy, s3, bucket, settings)
    yield setup
    setup.broker.kill()
    proxy.close()


def _check_all(setup: Setup) -> None:
    with Client(setup.broker.bootstrap) as client:
        problems, _ = verify_records(client, setup.ledger, TOPICS)
    check = check_bucket(setup.s3, setup.bucket, PREFIX, setup.broker.data_dir, {TIERED: 2})
    assert not problems + check.problems, (problems + check.problems)[:20]


UPLOAD_FAULTS = [
    pytest.param(Fault.DOWN, {}, id="down"),
    pytest.param(Fault.RESET, {}, id="reset"),
    pytest.param(Fault.ERROR_500, {}, id="500"),
    pytest.param(Fault.ERROR_500, {"status": 503}, id="503"),
]
READ_FAULTS = [
    pytest.param(Fault.DOWN, {}, id="down"),
    pytest.param(Fault.ERROR_500, {"methods": {"GET"}}, id="500"),
    pytest.param(Fault.TRUNCATE, {"keep_fraction": 0.3, "methods": {"GET"}}, id="truncated"),
]


@pytest.mark.parametrize(("fault", "kw"), UPLOAD_FAULTS if FULL else UPLOAD_FAULTS[:2])
def test_uploads_are_retried_through_a_failing_store_and_nothing_is_lost(
    setup: Setup, fault: Fault, kw: dict[str, Any]
) -> None:
    setup.proxy.set(fault, **kw)
    with Client(setup.broker.bootstrap) as client:
        setup.produce(client, 40)  # several rolled segments per tiered partition
        # The uploader tries, fails and tries again (its own count of failed steps).
        assert wait_until(lambda: remote_errors(setup.broker.metrics_port) >= 2, 30)
        time.sleep(1.0)
        for state in tier_state(client, TIERED, 2).values():
            # Nothing uploaded, so local retention deleted nothing: all still local.
            assert state.local_log_start_offset == state.log_start_offset == 0
            assert not state.segments
        problems, _ = verify_records(client, setup.ledger, TOPICS)  # all served locally
        assert not problems, problems[:10]
        setup.produce(client, 5)  # produce still served
    setup.proxy.heal()
    with Client(setup.broker.bootstrap) as client:
        wait_tiered(client, TIERED, 2, min_remote_fraction=0.5)
    _check_all(setup)


def test_a_slow_store_delays_uploads_only(setup: Setup) -> None:
    setup.proxy.set(Fault.SLOW, slow_s=2.0, methods={"PUT", "POST"})
    with Client(setup.broker.bootstrap) as client:
        setup.produce(client, 40)
        assert wait_until(lambda: setup.proxy.counters.faulted.get("PUT", 0) >= 1, 20)
        # While uploads crawl, every record is served (local reads) and produce goes on.
        problems, _ = verify_records(client, setup.ledger, TOPICS)
        assert not problems, problems[:10]
        setup.produce(client, 5)
    setup.proxy.heal()
    with Client(setup.broker.bootstrap) as client:
        wait_tiered(client, TIERED, 2, min_remote_fraction=0.5)
    _check_all(setup)


def _cold_segments(setup: Setup) -> list[Any]:
    """Produce until the uploader and local retention left tiered-0's older segments in
    the bucket only; those segments (none read yet: the broker's chunk cache is empty)."""
    with Client(setup.broker.bootstrap) as client:
        setup.produce(client, 60)
        segments = wait_tiered(client, TIERED, 2, min_remote_fraction=0.5)[0].segments
    assert len(segments) >= 2, segments
    return list(segments)


def _fetch_two(client: Client, cold_offset: int) -> dict[tuple[str, int], dict[str, Any]]:
    """One fetch: a cold offset of tiered-0 and offset 0 of the local topic."""
    body = {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 1 << 20,
        "topics": [
            {"topic": TIERED, "partitions": [{"partition": 0, "offset": cold_offset,
                                              "max_bytes": 65536}]},
            {"topic": LOCAL, "partitions": [{"partition": 0, "offset": 0, "max_bytes": 65536}]},
        ],
    }  # fmt: skip
    answer = client.request("fetch", body)
    return {(t["topic"], p["partition"]): p for t in answer["topics"] for p in t["partitions"]}


@pytest.mark.parametrize(("fault", "kw"), READ_FAULTS if FULL else READ_FAULTS[::2])
def test_remote_read_faults_fail_only_the_remote_partition(
    setup: Setup, fault: Fault, kw: dict[str, Any]
) -> None:
    segments = _cold_segments(setup)
    cold = segments[len(segments) // 2].base_offset
    with Client(setup.broker.bootstrap) as client:
        setup.proxy.set(fault, **kw)
        answers = _fetch_two(client, cold)
        assert answers[(TIERED, 0)]["error"] == "REMOTE_STORAGE_ERROR", answers[(TIERED, 0)]
        assert answers[(LOCAL, 0)]["error"] is None
        assert answers[(LOCAL, 0)]["records"]
        setup.produce(client, 2)  # produce unaffected
        setup.proxy.heal()
        healed = _fetch_two(client, cold)
        assert healed[(TIERED, 0)]["error"] is None and healed[(TIERED, 0)]["records"]
    _check_all(setup)


def test_a_slow_remote_read_does_not_hold_up_local_reads(setup: Setup) -> None:
    cold = _cold_segments(setup)[1].base_offset
    setup.proxy.set(Fault.SLOW, slow_s=3.0, methods={"GET"})
    done: dict[str, float] = {}

    def cold_read() -> None:
        with Client(setup.broker.bootstrap) as slow:
            slow.fetch(TIERED, 0, cold)
        done["cold"] = time.monotonic()

    thread = threading.Thread(target=cold_read)
    thread.start()
    time.sleep(0.3)
    with Client(setup.broker.bootstrap) as client:
        result = client.fetch(LOCAL, 0, 0)
        assert result.records
        done["local"] = time.monotonic()
    thread.join(30)
    assert done["local"] < done["cold"], "the local read waited for the store"
    setup.proxy.heal()
    _check_all(setup)
