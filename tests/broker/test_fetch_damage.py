"""The sendfile path stops at damage too (issue 23, finding 4); the broker-level
test is tests/integration/test_fetch_damage.py."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from protocol.batch import BATCH_LENGTH_OFFSET, iter_records
from protocol.errors import CorruptMessage
from storage.config import LogConfig
from storage.files import log_path
from storage.read_plan import SENDFILE_MIN_BYTES
from storage.record_source import FileSpan
from tests.storage.helpers import batch as storage_batch
from tests.storage.helpers import open_test_log

BATCHES = 6
DAMAGED = 3


def _spoil_length(path: Path, position: int, delta: int) -> None:
    with open(path, "r+b") as f:
        f.seek(position + BATCH_LENGTH_OFFSET)
        (length,) = struct.unpack(">i", f.read(4))
        f.seek(position + BATCH_LENGTH_OFFSET)
        f.write(struct.pack(">i", length + delta))


def test_a_span_stops_before_the_damage_and_the_damage_is_fenced(tmp_path: Path) -> None:
    """The sendfile path walks headers only: it must stop at the damage too."""
    log = open_test_log(tmp_path, LogConfig())
    one = storage_batch(1, value_bytes=40_000, tag=0)
    for i in range(BATCHES):
        log.append(storage_batch(1, value_bytes=40_000, tag=i))
    _spoil_length(log_path(tmp_path, 0), DAMAGED * len(one), 5)
    located = log.locate(0, 1 << 24)
    assert isinstance(located.records, FileSpan)
    assert located.records.length == DAMAGED * len(one) >= SENDFILE_MIN_BYTES
    assert located.records.record_count == DAMAGED
    assert [r.offset for r in iter_records(located.records.read())] == [0, 1, 2]
    located.records.close()
    for offset in range(DAMAGED, BATCHES):
        with pytest.raises(CorruptMessage):
            log.locate(offset, 1 << 24)
    assert log.fenced_segments == 1
    log.close()
