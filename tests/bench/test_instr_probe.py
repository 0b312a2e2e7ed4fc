"""bench/instr_probe.py runs as a script under another checkout's interpreter: its
append probe must work from a scratch directory with only the installed packages."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from protocol.batch import iter_headers
from tests.conftest import BrokerProcess
from tidelog.client import Client

ROOT = Path(__file__).resolve().parents[2]


def test_the_append_probe_appends_from_a_scratch_directory(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "instr_probe.py"), "append", str(ROOT), "3", "-"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "log_end_offset=3000" in done.stdout.splitlines()  # 3 batches of 1,000 records


@pytest.mark.parametrize(
    "client_probe",
    [
        "produce-client",  # the Producer's send_batch
        "kafka-edge-client",  # Kafka Produce and Fetch requests on a raw socket
    ],
)
def test_a_client_probe_sends_its_batches_to_a_real_broker(
    broker_process: BrokerProcess, tmp_path: Path, client_probe: str
) -> None:
    with Client(broker_process.bootstrap) as client:
        client.create_topic("t", 1)
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "instr_probe.py"), client_probe,
         broker_process.bootstrap, "3"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Client(broker_process.bootstrap) as client:
        answer = client.fetch("t", 0, 0, max_bytes=1 << 20)
    assert sum(header.record_count for _, header in iter_headers(answer.records)) == 3000
