"""bench.kafka_peer end to end on a few records: every phase runs and reports its figures."""

from __future__ import annotations

import json

import pytest

from bench import kafka_peer

pytestmark = pytest.mark.interop

RECORDS = 3000


def test_every_phase_reports_throughput_latency_and_broker_cpu(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert kafka_peer.main(["--target", "kafka", "--records", str(RECORDS)]) == 0
    result = json.loads(capsys.readouterr().out)
    rows = result["rows"]
    phases = {(r["client"], r["workload"], r["value_bytes"], r["acks"]) for r in rows}
    assert phases == {
        (client, workload, size, acks)
        for client in ("confluent-kafka", "java-perf")
        for workload in ("produce", "consume")
        for size in kafka_peer.RECORD_BYTES
        for acks in kafka_peer.ACKS
    }
    for row in rows:
        assert row["records"] == RECORDS
        assert row["records_per_s"] > 0
        assert row["mb_per_s"] == pytest.approx(
            row["records_per_s"] * row["value_bytes"] / 1e6, rel=0.01, abs=0.01
        )
        assert row["broker_cpu_s_per_m"] > 0
        if row["workload"] == "produce":
            assert 0 <= row["p50_ms"] <= row["p99_ms"]
    assert len(result["summary"]) == len(phases)
