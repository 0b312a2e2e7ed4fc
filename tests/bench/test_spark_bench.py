"""bench/spark_bench end to end on a tiny workload: a real broker, two Spark sessions
(each in its own JVM), both reads timed under each setting, then Spark's own Kafka
source in the interop venv's Spark when `make interop` created it, one JSON document out.

Timings are not asserted (shared machine); what is checked is that every setting was
measured in its own session with its own configuration and that the report is whole.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.spark_bench import SETTINGS
from interop import spark_env

ROOT = Path(__file__).resolve().parents[2]
RECORDS = 4_000


@pytest.mark.spark
@pytest.mark.timeout(480)
def test_spark_bench_measures_each_setting_in_a_fresh_session() -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.spark_bench",
            "--records",
            str(RECORDS),
            "--repeat",
            "2",
            "--warmup",
            "0",
            "--ceiling",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=460,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(proc.stdout)
    assert report["records"] == RECORDS
    assert (report["warmup_rounds"], report["timed_rounds"]) == (0, 2)
    sessions = report["sessions"]
    assert list(sessions) == list(SETTINGS)
    for name, session in sessions.items():
        assert session["spark_conf"] == SETTINGS[name]
        for read in ("tidelog", "parquet", "arrow_ceiling"):
            assert len(session[read]["runs_s"]) == 2
            assert session[read]["rows_per_s"] > 0
        ratio = session["tidelog"]["rows_per_s"] / session["parquet"]["rows_per_s"]
        assert session["parquet_ratio"] == pytest.approx(ratio, abs=1e-3)
    assert set(report["meets_goal_with"]) <= set(SETTINGS)
    assert report["direct_read_min"]["wall_s"] > 0
    # A fresh JVM per setting: no JIT state carried from one setting into the next.
    pids = [session["jvm_pid"] for session in sessions.values()]
    assert None not in pids and len(set(pids)) == len(pids)
    # Spark's Kafka source: measured whenever its Spark (the interop venv) is installed.
    kafka_source = report["kafka_source"]
    if spark_env.spark_python().exists():
        assert kafka_source["pyspark"] == spark_env.spark_kafka_version()
        for read in ("kafka_source", "parquet"):
            assert len(kafka_source[read]["runs_s"]) == 2
            assert kafka_source[read]["rows_per_s"] > 0
    else:
        assert "make interop" in kafka_source["not_measured"]
