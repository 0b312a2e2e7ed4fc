"""Kafka's own `kafka-dump-log.sh` (DumpLogSegments, Kafka 4.4) reads a Tidelog
partition holding transactions (issue 36): the `.txnindex` entries as Kafka's
AbortedTxn, and the control batches as its end-transaction markers."""

from __future__ import annotations

from pathlib import Path

import pytest

from interop.java_tools import DUMP_LOG_SEGMENTS, run_tool
from tests.storage.helpers import open_test_log
from tests.storage.test_txn_log import marker, put

pytestmark = [pytest.mark.interop, pytest.mark.timeout(300)]


def test_kafka_dump_log_reads_txnindex_and_markers(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    put(log, [b"a1", b"a2"], (10, 0, 0))
    put(log, [b"plain"], (-1, -1, -1), txn=False)
    put(log, [b"b1"], (11, 0, 0))
    marker(log, 10, commit=False, coordinator_epoch=3)
    marker(log, 11, commit=True, coordinator_epoch=3)
    log.roll()
    log.close()
    base = tmp_path / "00000000000000000000"
    out = run_tool(
        DUMP_LOG_SEGMENTS,
        ["--files", f"{base}.txnindex,{base}.log", "--deep-iteration", "--print-data-log"],
    ).stdout
    assert "version: 0 producerId: 10 firstOffset: 0 lastOffset: 4 lastStableOffset: 3" in out
    assert "endTxnMarker: ABORT coordinatorEpoch: 3" in out
    assert "endTxnMarker: COMMIT coordinatorEpoch: 3" in out
    assert out.count("isTransactional: true") == 4 and out.count("isControl: true") == 2
    assert "isvalid: false" not in out
