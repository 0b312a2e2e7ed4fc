"""`tidelog dump-log` reports a bad `.timeindex` entry and goes on (issue 23, minor):
a timestamp no calendar can show used to end the dump with "year ... out of range"."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from broker.cli.main import main

TIME_ENTRY = struct.Struct(">qi")


def test_a_timestamp_out_of_the_calendar_is_a_problem_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    timeindex = tmp_path / "00000000000000000100.timeindex"
    entries = [(1_000, 1), (2**62, 2), (3_000, 3)]
    timeindex.write_bytes(b"".join(TIME_ENTRY.pack(*entry) for entry in entries))
    assert main(["dump-log", str(timeindex)]) == 1
    captured = capsys.readouterr()
    lines = captured.out.splitlines()
    assert f"timestamp: {2**62} (out of range) offset: 102" in lines
    assert "timestamp: 3000 (1970-01-01T00:00:03.000+00:00) offset: 103" in lines
    assert "3 entries" in lines
    problems = [line for line in lines if line.startswith("PROBLEM")]
    assert any(f"timestamp {2**62} at entry 1 is not a valid time" in p for p in problems)
    assert "error: CORRUPT_MESSAGE" in captured.err
