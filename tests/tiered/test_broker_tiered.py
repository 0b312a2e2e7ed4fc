"""Tiered storage in the real `tidelog serve` process, against moto on loopback:
uploads on the scheduler, local retention bounding the disk, total retention, restart,
the settings' errors, the metrics."""

from __future__ import annotations

import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.cli.retention import render_text
from protocol.batch import encode_batch
from protocol.errors import InvalidConfig
from protocol.retention_schema import explain_retention
from tests.conftest import BrokerFactory
from tests.tiered.conftest import S3Server
from tests.tiered.tierlog import check_bucket, records_across_tiers
from tidelog.client import Client

pytestmark = pytest.mark.integration

FAST = ("remote.log.manager.task.interval.ms=100", "log.initial.task.delay.ms=0",
        "log.retention.check.interval.ms=100")  # fmt: skip
WAIT_S = 30.0


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = WAIT_S) -> None:
    """Poll `check`; an AssertionError in it (the bucket seen mid-upload) counts as not yet."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            if check():
                return
        except AssertionError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def produce(client: Client, topic: str, batches: int, start: int = 0) -> dict[int, bytes]:
    sent: dict[int, bytes] = {}
    for i in range(start, start + batches):
        values = [f"v{i}-{j}".encode().ljust(90, b".") for j in range(10)]
        result = client.produce(
            topic, 0, encode_batch([(b"k", v, None, time.time_ns() // 1_000_000) for v in values])
        )
        assert result is not None
        sent.update({result.base_offset + j: v for j, v in enumerate(values)})
    return sent


def local_logs(data_dir: Path, topic: str) -> list[Path]:
    return sorted((data_dir / f"{topic}-0").glob("*.log"))


def test_local_retention_bounds_the_disk_and_every_record_is_kept(
    s3_server: S3Server, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    sets = [*s3_server.broker_options(), *FAST]
    broker = broker_factory(*sets, env=s3_server.env)
    data_dir = tmp_path / "data"
    configs = {"remote.storage.enable": "true", "segment.bytes": "4096",
               "local.retention.bytes": "8192"}  # fmt: skip
    with Client(broker.bootstrap) as client:
        client.create_topic("tiered", 1, configs)
        sent = produce(client, "tiered", 30)

    def settled() -> bool:
        try:
            manifest = check_bucket(s3_server, data_dir, "tiered")
        except AssertionError:
            return False  # an upload finished between the listing and the manifest read
        return len(local_logs(data_dir, "tiered")) <= 4 and len(manifest.readable()) >= 5

    wait_until(settled, "uploads and local retention")
    assert records_across_tiers(s3_server, data_dir, "tiered") == sent
    with Client(broker.bootstrap) as client:
        [meta] = client.metadata(["tiered"])
        assert meta["partitions"][0]["log_start_offset"] == 0  # spans both tiers
        [explained] = client.call(explain_retention("tiered"))
    tiers = [s["tier"] for s in explained["segments"]]
    assert explained["remote_storage_enable"] and tiers[0] == "remote" and tiers[-1] == "local"
    assert explained["local_log_start_offset"] > 0
    text = render_text("tiered", [explained])
    assert "TIER" in text and "remote: " in text and "local.retention.bytes=8192" in text
    metrics = (
        urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=10)
        .read()
        .decode()
    )
    assert "tidelog_remote_uploaded_segments_total" in metrics
    assert "tidelog_remote_upload_pending_segments" in metrics
    # A restart keeps the log start below the local segments (from the manifest).
    broker.stop()
    broker = broker_factory(*sets, data_dir=data_dir, env=s3_server.env)
    with Client(broker.bootstrap) as client:
        [meta] = client.metadata(["tiered"])
        assert meta["partitions"][0]["log_start_offset"] == 0
        sent.update(produce(client, "tiered", 5, start=30))
    assert min(int(p.stem) for p in local_logs(data_dir, "tiered")) > 0
    wait_until(
        lambda: max(records_across_tiers(s3_server, data_dir, "tiered")) == max(sent), "records"
    )
    assert records_across_tiers(s3_server, data_dir, "tiered") == sent


def test_tiered_topics_need_the_broker_switch_and_refuse_compaction(
    s3_server: S3Server, broker_factory: BrokerFactory
) -> None:
    plain = broker_factory()
    disabled = "Tiered Storage functionality is disabled"
    with Client(plain.bootstrap) as client, pytest.raises(InvalidConfig, match=disabled):
        client.create_topic("t", 1, {"remote.storage.enable": "true"})
    plain.stop()
    broker = broker_factory(*s3_server.broker_options(), data_dir=plain.data_dir.parent / "d2",
                            env=s3_server.env)  # fmt: skip
    with Client(broker.bootstrap) as client:
        with pytest.raises(InvalidConfig, match="unsupported for the compacted topics"):
            client.create_topic(
                "c", 1, {"remote.storage.enable": "true", "cleanup.policy": "compact"}
            )
        client.create_topic("t", 1, {"remote.storage.enable": "true"})
        with pytest.raises(InvalidConfig, match="compacted"):
            client.alter_configs("t", {"cleanup.policy": "compact"})
        assert client.describe_configs("t")["remote.storage.enable"]["value"] in (True, "true")


def test_store_down_keeps_local_data_served(
    s3_server: S3Server, broker_factory: BrokerFactory, tmp_path: Path
) -> None:
    options = [*s3_server.broker_options(), *FAST,
               "tidelog.remote.storage.endpoint=http://127.0.0.1:9"]  # fmt: skip
    broker = broker_factory(*options, env=s3_server.env)
    with Client(broker.bootstrap) as client:
        client.create_topic("t", 1, {"remote.storage.enable": "true", "segment.bytes": "4096",
                                     "local.retention.bytes": "4096"})  # fmt: skip
        sent = produce(client, "t", 30)
        broker.wait_for_event("tiered_partition_failed", timeout_s=WAIT_S)
        fetched = client.fetch("t", 0, 0, max_bytes=1 << 20)
        assert fetched.records  # nothing was deleted locally: nothing was uploaded
    assert len(local_logs(tmp_path / "data", "t")) >= 5
    assert {o: v for o, v in sent.items()}  # produced and acknowledged throughout
