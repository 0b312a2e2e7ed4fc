"""`/metrics` of a real broker after produce, fetch, retention and compaction.

One `tidelog serve` with fast retention and cleaner timers: a `ret` topic whose
small segments and `retention.bytes` make the retention task delete segments,
and a compacted `cmp` topic the cleaner compacts. The scrape must carry the
right names, label sets and values, pass `promtool check metrics`, lose a topic's
series when it is deleted, and contain every metric the Grafana dashboard and
the alert rules query.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.batch import encode_batch
from protocol.errors import OffsetOutOfRange
from protocol.offsets_schema import commit_offsets
from tests.conftest import ROOT, BrokerProcess, start_broker
from tests.integration.promserver import Scrape, http_get, parse_scrape, scrape_text
from tidelog.client import Client

pytestmark = pytest.mark.integration

DEPLOY = ROOT / "deploy"
RET, CMP, PLAIN = "ret", "cmp", "plain"
BATCH_RECORDS = 10
RET_BATCHES = 12
CMP_BATCHES = 12
CMP_KEYS = 5
# Small segments so a dozen batches make several of them.
SEGMENT_BYTES = 1024
RETENTION_BYTES = 2048
FAST_TIMERS = (
    "log.retention.check.interval.ms=200",
    "log.initial.task.delay.ms=0",
    "log.segment.delete.delay.ms=0",
    "log.cleaner.backoff.ms=100",
)
# Waits for background work (a retention pass, a cleaning) to show up.
EVENT_TIMEOUT_S = 30.0


def _batch(topic: str, b: int, key_count: int, now_ms: int) -> bytes:
    return encode_batch(
        (f"{topic}-k{(b * BATCH_RECORDS + i) % key_count}".encode(), b"x" * 40, None, now_ms)
        for i in range(BATCH_RECORDS)
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[BrokerProcess, dict]]:
    """The broker, after the workload; also what was produced and fetched."""
    broker = start_broker(tmp_path_factory.mktemp("scrape") / "data", *FAST_TIMERS)
    now_ms = int(time.time() * 1000)
    facts: dict = {"bytes_in": {}, "bytes_out": 0}
    try:
        with Client(broker.bootstrap) as client:
            client.create_topic(
                RET,
                1,
                {"segment.bytes": SEGMENT_BYTES, "retention.bytes": RETENTION_BYTES},
            )
            client.create_topic(
                CMP,
                1,
                {
                    "cleanup.policy": "compact",
                    "segment.bytes": SEGMENT_BYTES,
                    "min.cleanable.dirty.ratio": 0.01,
                },
            )
            client.create_topic(PLAIN, 3)
            for topic, batches, keys in ((RET, RET_BATCHES, 10_000), (CMP, CMP_BATCHES, CMP_KEYS)):
                total = 0
                for b in range(batches):
                    data = _batch(topic, b, keys, now_ms)
                    total += len(data)
                    client.produce(topic, 0, data)
                facts["bytes_in"][topic] = total
            plain = _batch(PLAIN, 0, 10_000, now_ms)
            client.produce(PLAIN, 2, plain)
            facts["bytes_in"][PLAIN] = len(plain)
            facts["bytes_out"] = len(client.fetch(PLAIN, 2, 0).records)
            with pytest.raises(OffsetOutOfRange):
                client.fetch(PLAIN, 2, 10_000)
            # A consumer group's commit, so the group series (lag, members...) exist.
            client.call(commit_offsets("scrape-group", {(PLAIN, 2): 1}))
        facts["retention"] = broker.wait_for_event("retention_deleted_segments", EVENT_TIMEOUT_S)
        facts["cleaned"] = broker.wait_for_event("log_cleaned", EVENT_TIMEOUT_S)
        yield broker, facts
    finally:
        assert broker.stop() == 0


@pytest.fixture(scope="module")
def scraped(run: tuple[BrokerProcess, dict]) -> Scrape:
    broker, _ = run
    return parse_scrape(scrape_text(broker.metrics_port))


def test_partition_gauges_match_the_logs(run: tuple[BrokerProcess, dict], scraped: Scrape) -> None:
    _, facts = run
    for name in ("tidelog_log_start_offset", "tidelog_log_end_offset", "tidelog_log_size_bytes"):
        assert scraped.label_names(name) == {frozenset({"topic", "partition"})}, name
    assert scraped.value("tidelog_log_end_offset", topic=RET, partition="0") == (
        RET_BATCHES * BATCH_RECORDS
    )
    assert scraped.value("tidelog_log_end_offset", topic=PLAIN, partition="2") == BATCH_RECORDS
    assert scraped.value("tidelog_log_end_offset", topic=PLAIN, partition="0") == 0
    assert (
        scraped.value("tidelog_log_size_bytes", topic=PLAIN, partition="2")
        == (facts["bytes_in"][PLAIN])
    )
    # Retention moved the log start offset and kept the log within retention.bytes.
    start = scraped.value("tidelog_log_start_offset", topic=RET, partition="0")
    assert start > 0
    assert start >= facts["retention"]["log_start_offset"]
    assert (
        scraped.value("tidelog_log_size_bytes", topic=RET, partition="0")
        <= (facts["bytes_in"][RET])
    )
    assert scraped.value("tidelog_log_segments", topic=RET, partition="0") >= 1
    # Compaction shrank the compacted log.
    assert (
        scraped.value("tidelog_log_size_bytes", topic=CMP, partition="0") < (facts["bytes_in"][CMP])
    )


def test_traffic_counters_and_requests(run: tuple[BrokerProcess, dict], scraped: Scrape) -> None:
    _, facts = run
    assert scraped.value("tidelog_records_in_total", topic=RET) == RET_BATCHES * BATCH_RECORDS
    assert scraped.value("tidelog_bytes_in_total", topic=CMP) == facts["bytes_in"][CMP]
    assert scraped.value("tidelog_bytes_out_total", topic=PLAIN) == facts["bytes_out"]
    assert scraped.value("tidelog_records_out_total", topic=PLAIN) == BATCH_RECORDS
    assert scraped.value("tidelog_requests_total", api="create_topic", error="none") == 3
    produces = RET_BATCHES + CMP_BATCHES + 1
    assert scraped.value("tidelog_requests_total", api="produce", error="none") == produces
    assert scraped.value("tidelog_requests_total", api="fetch", error="OFFSET_OUT_OF_RANGE") == 1
    assert scraped.label_names("tidelog_requests_total") == {frozenset({"api", "error"})}
    # Latency histogram: sub-millisecond buckets, one observation per request.
    buckets = {
        float(dict(lbl)["le"])
        for lbl in scraped.series("tidelog_request_duration_seconds_bucket")
        if dict(lbl)["api"] == "produce"
    }
    assert min(buckets) < 0.001
    assert scraped.value("tidelog_request_duration_seconds_count", api="produce") == produces
    info = scraped.series("tidelog_build_info")
    assert len(info) == 1 and next(iter(info.values())) == 1


def test_component_statistics_are_exported(
    run: tuple[BrokerProcess, dict], scraped: Scrape
) -> None:
    """Retention, cleaner, long-poll and event-loop series, read from statistics()."""
    _, facts = run
    first = facts["retention"]
    assert first["topic"] == RET and first["reason"] == "size"
    deleted = scraped.value("tidelog_retention_deleted_segments_total", topic=RET, reason="size")
    assert deleted >= first["segments"]
    deleted_bytes = scraped.value("tidelog_retention_deleted_bytes_total", topic=RET, reason="size")
    assert deleted_bytes >= first["bytes"] > 0
    assert scraped.value("tidelog_retention_passes_total") >= 1
    assert scraped.value("tidelog_cleaner_runs_total") >= 1
    assert scraped.value("tidelog_cleaner_records_removed_total") > 0
    assert 0.0 <= scraped.value("tidelog_cleaner_dirty_ratio", topic=CMP, partition="0") <= 1.0
    assert scraped.value("tidelog_cleaner_uncleanable_partitions") == 0
    assert scraped.value("tidelog_longpoll_waiters") == 0
    assert 0.0 < scraped.value("tidelog_cleaner_offset_map_utilization_ratio") <= 1.0
    assert scraped.value("tidelog_ready") == 1
    assert scraped.value("tidelog_recovery_truncated_bytes_total") == 0  # clean first start
    assert scraped.value("tidelog_log_offline", topic=RET, partition="0") == 0
    # The heartbeat has been observing the loop since startup.
    assert scraped.value("tidelog_event_loop_lateness_seconds_count") > 0


def test_every_sample_follows_prometheus_naming(scraped: Scrape) -> None:
    names = {name for name, _ in scraped.samples}
    assert names and all(n.startswith(("tidelog_", "process_")) for n in names), names
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_count", "_sum")}
    for family, kind in scraped.types.items():
        for name in scraped.family_samples[family]:
            allowed = suffixes.get(kind, ("",))
            assert any(name == family + s for s in allowed), (family, kind, name)
        # Base units only: seconds and bytes, never ms or kB.
        assert not re.search(r"_(ms|milliseconds|kb|mb|kilobytes)(_|$)", family), family
        if kind == "histogram":
            assert family.endswith(("_seconds", "_waiters")), family


@pytest.mark.skipif(shutil.which("promtool") is None, reason="needs promtool")
def test_scrape_passes_promtool_check_metrics(run: tuple[BrokerProcess, dict]) -> None:
    broker, _ = run
    text = scrape_text(broker.metrics_port)
    result = subprocess.run(
        ["promtool", "check", "metrics"],
        input=text,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _queried_metrics(exprs: list[str]) -> set[str]:
    """Metric names used in PromQL expressions (tidelog_* plus `up`)."""
    found: set[str] = set()
    for expr in exprs:
        found |= set(re.findall(r"\b(tidelog_[a-z0-9_]+)", expr))
    return found


def _dashboard_exprs() -> list[str]:
    dashboard = json.loads((DEPLOY / "grafana" / "tidelog.json").read_text(encoding="utf-8"))
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["definition"] for v in dashboard["templating"]["list"] if "definition" in v]
    return exprs


def _alert_exprs() -> list[str]:
    text = (DEPLOY / "alerts.yml").read_text(encoding="utf-8")
    return re.findall(r"^\s+expr:\s*(.+)$", text, re.M)


def _sample_names(scraped: Scrape) -> set[str]:
    """Every sample name the broker can export: from the samples and the declared families."""
    names = {name for name, _ in scraped.samples}
    for family, kind in scraped.types.items():
        if kind == "counter":
            names.add(family + "_total")
        elif kind == "histogram":
            names |= {family + s for s in ("_bucket", "_count", "_sum")}
        else:
            names.add(family)
    return names


# Exported only by a broker with tiered storage on (this one has none): checked against a
# tiered broker's scrape by tests/tiered/test_tiered_metrics.py.
TIERED_METRIC_PREFIXES = ("tidelog_remote_", "tidelog_tiered_")


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_queried_metric_exists_in_the_scrape(source: str, scraped: Scrape) -> None:
    exprs = _dashboard_exprs() if source == "dashboard" else _alert_exprs()
    queried = {m for m in _queried_metrics(exprs) if not m.startswith(TIERED_METRIC_PREFIXES)}
    assert queried, f"no tidelog metric found in the {source}"
    missing = queried - _sample_names(scraped)
    assert not missing, f"{source} queries metrics the broker does not export: {sorted(missing)}"


def test_health_endpoints(run: tuple[BrokerProcess, dict]) -> None:
    broker, _ = run
    base = f"http://127.0.0.1:{broker.metrics_port}"
    assert http_get(base + "/healthz") == (200, "ok\n")
    status, body = http_get(base + "/readyz")
    assert status == 200 and json.loads(body)["ready"] is True
    assert http_get(base + "/nope")[0] == 404


def test_deleted_topic_series_disappear(tmp_path: Path) -> None:
    broker = start_broker(tmp_path / "data")
    try:
        now_ms = int(time.time() * 1000)
        with Client(broker.bootstrap) as client:
            client.create_topic("gone", 2)
            client.produce("gone", 0, _batch("gone", 0, 100, now_ms))
            client.fetch("gone", 0, 0)
            before = parse_scrape(scrape_text(broker.metrics_port))
            assert before.value("tidelog_log_end_offset", topic="gone", partition="0") == 10
            assert before.value("tidelog_records_in_total", topic="gone") == 10
            client.delete_topic("gone")
        after = parse_scrape(scrape_text(broker.metrics_port))
        left = [(n, dict(lbl)) for n, lbl in after.samples if ("topic", "gone") in lbl]
        assert left == []
    finally:
        assert broker.stop() == 0
