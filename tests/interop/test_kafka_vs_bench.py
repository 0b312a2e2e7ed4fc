"""bench.kafka_vs against both brokers on a few records: every phase runs on each, the
brokers alternate, and every phase has its Tidelog/Kafka ratios (no timing asserted)."""

from __future__ import annotations

import json

import pytest

from bench import kafka_vs

pytestmark = pytest.mark.interop

RECORDS = 3000


def test_both_brokers_every_phase_alternating_with_ratios(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["--sizes", "100", "--acks", "1", "--records", str(RECORDS), "--warmup", "0"]
    assert kafka_vs.main(argv) == 0
    result = json.loads(capsys.readouterr().out)
    assert set(result["versions"]) == {"kafka", "tidelog"}
    rows = result["rows"]
    phases = [(r["client"], r["workload"]) for r in rows]
    expected = [(c, w) for c in kafka_vs.CLIENTS for w in ("produce", "consume")]
    # Each phase on both brokers back to back, the first broker swapping every phase.
    assert phases == [p for p in expected for _ in range(2)]
    firsts = [rows[i]["target"] for i in range(0, len(rows), 2)]
    assert firsts == ["kafka", "tidelog"] * (len(firsts) // 2)
    for row in rows:
        assert row["records"] == RECORDS and row["records_per_s"] > 0
        assert row["broker_cpu_s_per_m"] >= 0
    assert [(r["client"], r["workload"]) for r in result["ratios"]] == expected
    for ratio in result["ratios"]:
        assert set(ratio) >= {"records_per_s", "mb_per_s", "broker_cpu_s_per_m"}
        assert ratio["records_per_s"] > 0
