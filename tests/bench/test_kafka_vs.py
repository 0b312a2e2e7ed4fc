"""bench.kafka_vs in a tiny configuration against Tidelog alone (Apache Kafka's side runs
under `make interop`): the JSON it prints has every key and a row per phase. No timing
is asserted; the machine is shared."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import kafka_vs, kafka_vs_report

RECORDS = 2000


def test_tidelog_only_run_prints_rows_ratios_and_profiles(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    argv = ["--targets", "tidelog", "--clients", "confluent-kafka", "--sizes", "100"]
    argv += ["--acks", "1", "--records", str(RECORDS), "--profile", str(tmp_path / "spy")]
    argv += ["--warmup", "500"]
    assert kafka_vs.main(argv) == 0
    result = json.loads(capsys.readouterr().out)

    assert result["benchmark"] == "kafka_vs"
    assert set(result) >= {"versions", "machine", "records", "rows", "ratios", "ratio_summary"}
    assert result["records"] == {"100": RECORDS}
    assert result["warmup_records"] == 500
    rows = result["rows"]
    assert [(r["target"], r["client"], r["workload"]) for r in rows] == [
        ("tidelog", "confluent-kafka", "produce"),
        ("tidelog", "confluent-kafka", "consume"),
    ]
    for row in rows:
        assert set(row) >= set(kafka_vs.ROW_KEYS)
        assert row["records"] == RECORDS
        assert row["mb_per_s"] == pytest.approx(
            row["records_per_s"] * 100 / 1e6, rel=0.01, abs=0.01
        )
    assert rows[0]["p50_ms"] <= rows[0]["p99_ms"]
    # One target: nothing to divide by.
    assert result["ratios"] == [] and result["ratio_summary"] == []
    assert [p["phase"] for p in result["profiles"]] == [
        "confluent-kafka-produce-100-1-0",
        "confluent-kafka-consume-100-1-0",
    ]
    for profile in result["profiles"]:
        assert set(profile) >= {"samples", "own", "inclusive"}

    # The report renders the same JSON: one table line per row.
    table = kafka_vs_report.figures_table(rows).splitlines()
    assert len(table) == 2 + len(rows)
    assert table[2].startswith("| confluent-kafka | produce | 100 B | 1 | tidelog |")


def test_ratios_pair_the_two_brokers_of_one_run() -> None:
    def row(target: str, run: int, rate: int, cpu: float) -> dict[str, object]:
        return {
            "target": target, "client": "confluent-kafka", "workload": "produce",
            "value_bytes": 100, "acks": "1", "run": run, "records_per_s": rate,
            "mb_per_s": rate * 100 / 1e6, "broker_cpu_s_per_m": cpu,
        }  # fmt: skip

    rows = [
        row("kafka", 0, 200_000, 0.5),
        row("tidelog", 0, 100_000, 2.0),
        row("tidelog", 1, 300_000, 1.0),
        row("kafka", 1, 200_000, 0.5),
        row("tidelog", 2, 50_000, 1.0),  # no Kafka twin in run 2: no ratio
    ]
    per_run = kafka_vs.ratios(rows)
    assert [(r["run"], r["records_per_s"], r["broker_cpu_s_per_m"]) for r in per_run] == [
        (0, 0.5, 4.0),
        (1, 1.5, 2.0),
    ]
    (summary,) = kafka_vs.summarise_ratios(per_run)
    assert summary["records_per_s"] == {"median": 1.0, "min": 0.5, "max": 1.5, "runs": 2}


def test_report_plots_the_ratio_summary(tmp_path: Path) -> None:
    summary = [
        {"client": "confluent-kafka", "workload": w, "value_bytes": 100, "acks": "1",
         "records_per_s": {"median": m, "min": m * 0.9, "max": m * 1.1, "runs": 2}}
        for w, m in (("produce", 0.8), ("consume", 1.3))
    ]  # fmt: skip
    table = kafka_vs_report.ratio_table(summary).splitlines()
    assert table[2].startswith("| confluent-kafka | produce | 100 B | 1 | 0.80x (0.72-0.88) |")
    out = tmp_path / "ratios.png"
    kafka_vs_report.plot(summary, out)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
