"""The tiered-storage metrics a real broker with a store exports: every one the Grafana
dashboard's "Tiered storage" row and the alert rules query (the plain broker of
tests/integration/test_prometheus_scrape.py has none of them), and they count."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import boto3
import pytest

from tests.conftest import start_broker
from tests.integration.promserver import parse_scrape, scrape_text
from tests.integration.test_prometheus_scrape import (
    TIERED_METRIC_PREFIXES,
    _alert_exprs,
    _dashboard_exprs,
    _queried_metrics,
    _sample_names,
)
from tests.reliability.harness import wait_until
from tests.tiered.faulty_s3 import Fault, FaultyS3
from tests.tiered.tiered_broker import (
    TIERED_TOPIC_CONFIG,
    credentials_file,
    produce,
    remote_errors,
    tiered_settings,
    wait_tiered,
)
from tidelog.client import Client

pytestmark = pytest.mark.integration  # in `make test`: the tiered smoke test

KEY, SECRET, BUCKET = "metrics-key", "metrics-secret", "tiered-metrics"


def test_every_tiered_metric_of_the_dashboard_and_alerts_is_exported(
    moto_server: str, tmp_path: Path
) -> None:
    s3: Any = boto3.client(
        "s3", endpoint_url=moto_server, region_name="us-east-1",
        aws_access_key_id=KEY, aws_secret_access_key=SECRET,
    )  # fmt: skip
    s3.create_bucket(Bucket=BUCKET)
    creds = credentials_file(tmp_path, KEY, SECRET)
    proxy = FaultyS3(moto_server)
    broker = start_broker(
        tmp_path / "data",
        *tiered_settings(endpoint=proxy.endpoint, bucket=BUCKET, credentials=creds),
    )
    try:
        with Client(broker.bootstrap) as client:
            client.create_topic("m", 1, TIERED_TOPIC_CONFIG)
            with proxy.fault(Fault.ERROR_500, methods={"PUT"}):  # an upload error, counted
                produce(client, "m", 0, 2000)
                assert wait_until(lambda: remote_errors(broker.metrics_port) > 0, 30)
            state = wait_tiered(client, "m", 1, min_remote_fraction=0.5)[0]
            client.fetch("m", 0, state.segments[0].base_offset)  # one remote read
        scraped = parse_scrape(scrape_text(broker.metrics_port))
        queried = {
            m
            for m in _queried_metrics(_dashboard_exprs() + _alert_exprs())
            if m.startswith(TIERED_METRIC_PREFIXES)
        }
        assert queried, "the dashboard has no tiered-storage panel"
        missing = queried - _sample_names(scraped)
        assert not missing, f"tiered metrics queried but not exported: {sorted(missing)}"
        assert scraped.value("tidelog_remote_gets_total") >= 1
        assert scraped.value("tidelog_remote_uploaded_segments_total") >= len(state.segments)
        assert sum(scraped.series("tidelog_remote_errors_total").values()) > 0
        assert scraped.value("tidelog_remote_read_duration_seconds_count") >= 1
    finally:
        broker.kill()
        proxy.close()
