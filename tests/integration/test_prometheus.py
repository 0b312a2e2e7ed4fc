"""A real Prometheus server scrapes a real broker on loopback; its HTTP API must agree.

Acceptance of the observability issue: `/usr/bin/prometheus` (Debian package
`prometheus`, installed by .ci/run) scrapes `tidelog serve` every 500 ms with
deploy/alerts.yml loaded, the test produces and fetches through the client, then
asks Prometheus's query API for Tidelog series and checks their values.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.metrics import LATENCY_BUCKETS_S
from protocol.batch import encode_batch
from tests.conftest import ROOT, BrokerProcess
from tests.integration.promserver import (
    PrometheusServer,
    parse_scrape,
    prometheus_available,
    scrape_config,
    scrape_text,
)
from tidelog.client import Client

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        not prometheus_available(), reason="needs /usr/bin/prometheus (installed by .ci/run)"
    ),
]

ALERTS = ROOT / "deploy" / "alerts.yml"
TOPIC = "prom-obs"
PARTITIONS = 2
BATCHES = 3
RECORDS_PER_BATCH = 10


@pytest.fixture
def prometheus(broker_process: BrokerProcess, tmp_path: Path) -> Iterator[PrometheusServer]:
    target = f"127.0.0.1:{broker_process.metrics_port}"
    config = scrape_config([target], rule_files=(ALERTS,))
    with PrometheusServer(tmp_path / "prom", config) as server:
        yield server


def _produce_and_fetch(bootstrap: str) -> tuple[int, int]:
    """Produce BATCHES batches to partition 1 and fetch them back; (bytes in, bytes out)."""
    bytes_in = 0
    now_ms = int(time.time() * 1000)
    with Client(bootstrap) as client:
        client.create_topic(TOPIC, PARTITIONS)
        for b in range(BATCHES):
            batch = encode_batch(
                (f"k{i}".encode(), f"value-{b}-{i}".encode(), None, now_ms)
                for i in range(RECORDS_PER_BATCH)
            )
            bytes_in += len(batch)
            client.produce(TOPIC, 1, batch)
        fetched = client.fetch(TOPIC, 1, 0)
    return bytes_in, len(fetched.records)


def test_prometheus_scrapes_the_broker_and_answers_queries(
    broker_process: BrokerProcess, prometheus: PrometheusServer
) -> None:
    bytes_in, bytes_out = _produce_and_fetch(broker_process.bootstrap)
    assert bytes_out == bytes_in  # the fetch returns the stored batches as they are
    records = BATCHES * RECORDS_PER_BATCH

    prometheus.wait_for('up{job="tidelog"}', 1.0)
    prometheus.wait_for(f'tidelog_records_in_total{{topic="{TOPIC}"}}', records)
    prometheus.wait_for(f'tidelog_bytes_in_total{{topic="{TOPIC}"}}', bytes_in)
    prometheus.wait_for(f'tidelog_bytes_out_total{{topic="{TOPIC}"}}', bytes_out)
    prometheus.wait_for(f'tidelog_log_end_offset{{topic="{TOPIC}",partition="1"}}', records)
    prometheus.wait_for(f'tidelog_log_end_offset{{topic="{TOPIC}",partition="0"}}', 0)
    prometheus.wait_for(f'tidelog_log_segments{{topic="{TOPIC}",partition="1"}}', 1)
    prometheus.wait_for('tidelog_requests_total{api="produce",error="none"}', BATCHES)
    prometheus.wait_for('tidelog_requests_total{api="fetch",error="none"}', 1)
    prometheus.wait_for('tidelog_requests_total{api="create_topic",error="none"}', 1)

    # Prometheus and a direct scrape agree on the per-partition size.
    direct = parse_scrape(scrape_text(broker_process.metrics_port))
    size = direct.value("tidelog_log_size_bytes", topic=TOPIC, partition="1")
    assert size == bytes_in
    prometheus.wait_for(f'tidelog_log_size_bytes{{topic="{TOPIC}",partition="1"}}', size)

    # Every series of a partition gauge carries exactly the topic and partition labels.
    labelled = prometheus.query(f'{{__name__=~"tidelog_log_.*_offset",topic="{TOPIC}"}}')
    assert len(labelled) == 2 * PARTITIONS
    for labels in labelled:
        assert {k for k, _ in labels} == {"__name__", "instance", "job", "topic", "partition"}

    # The latency histogram reaches Prometheus whole: one observation per produce,
    # and a quantile over its buckets is a number inside the bucket range.
    prometheus.wait_for('tidelog_request_duration_seconds_count{api="produce"}', BATCHES)
    p99 = prometheus.query(
        "histogram_quantile(0.99, sum by (le) "
        '(tidelog_request_duration_seconds_bucket{api="produce"}))'
    )
    assert len(p99) == 1
    assert 0 < next(iter(p99.values())) <= max(LATENCY_BUCKETS_S)


def test_prometheus_loads_the_alert_rules(
    broker_process: BrokerProcess, prometheus: PrometheusServer
) -> None:
    prometheus.wait_for('up{job="tidelog"}', 1.0)
    groups = prometheus.api("rules")["groups"]
    rules = [rule for group in groups for rule in group["rules"]]
    assert rules, "deploy/alerts.yml loaded no rules"
    assert all(rule["type"] == "alerting" for rule in rules)
    names = {rule["name"] for rule in rules}
    assert "TidelogDown" in names
    # A healthy broker fires none of them (TidelogDown is `up == 0`).
    firing = [r["name"] for r in rules if r["state"] == "firing"]
    assert firing == []
