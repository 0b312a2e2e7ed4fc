"""`tidelog serve` refuses an out-of-range server.properties value: exit 2, one clear line.

Issue 23 finding 3, at startup: a value the broker could store but not describe
must stop the broker before it touches the disk, naming the key and the valid range.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.conftest import serve_command

pytestmark = pytest.mark.integration

LONG_MAX = 2**63 - 1


@pytest.mark.parametrize(
    "line",
    [
        f"log.retention.bytes={LONG_MAX + 1}",
        f"log.flush.interval.messages={2**70}",
        f"log.cleaner.max.compaction.lag.ms={LONG_MAX + 1}",
        f"log.roll.hours={LONG_MAX // 3_600_000 + 1}",  # in range as hours, not as segment.ms
    ],
    ids=["retention-bytes", "flush-messages", "max-compaction-lag", "scaled-synonym"],
)
def test_out_of_range_property_exits_2_naming_key_and_range(tmp_path: Path, line: str) -> None:
    conf = tmp_path / "server.properties"
    conf.write_text(line + "\n", encoding="utf-8")
    done = subprocess.run(
        [*serve_command(), "--config", str(conf), "--data-dir", str(tmp_path / "d"),
         "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done
    key = line.partition("=")[0]
    assert key in done.stderr and str(LONG_MAX) in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "d").exists()  # refused before touching the disk
