"""A batch whose length runs past the bytes sent is corrupt, whatever the size limit
says (issue 23, minor finding): CORRUPT_MESSAGE, not MESSAGE_TOO_LARGE."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from protocol.batch import BATCH_LENGTH_OFFSET
from protocol.errors import CorruptMessage, MessageTooLarge
from storage.config import LogConfig
from tests.storage.helpers import batch, open_test_log


@pytest.mark.parametrize("length", [2**31 - 1, 1_000_000], ids=["int32-max", "past-the-end"])
def test_a_length_past_the_bytes_present_is_corrupt(tmp_path: Path, length: int) -> None:
    data = bytearray(batch(1, value_bytes=1))
    assert len(data) < 80
    struct.pack_into(">i", data, BATCH_LENGTH_OFFSET, length)
    log = open_test_log(tmp_path, LogConfig(max_message_bytes=1000))
    with pytest.raises(CorruptMessage, match="truncated"):
        log.append(bytes(data))
    assert log.high_watermark == 0


def test_a_whole_batch_over_the_limit_is_still_too_large(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, LogConfig(max_message_bytes=1000))
    with pytest.raises(MessageTooLarge):
        log.append(batch(1, value_bytes=2000))
