"""Kafka's LogValidator part of storage (storage/validator.py): a produced chunk is
checked whole before a log takes any of it."""

from __future__ import annotations

import pytest

from protocol.batch import MAGIC_OFFSET, TimestampType, encode_batch
from protocol.errors import CorruptMessage, InvalidRecord, InvalidTimestamp, MessageTooLarge
from storage.config import LogConfig
from storage.validator import LogValidator, ValidBatch
from tests.storage.helpers import BASE_TS, batch

VALIDATOR = LogValidator("t", 3)


def test_every_batch_of_a_chunk_with_its_offsets_and_largest_timestamp() -> None:
    first = batch(2, timestamps=[BASE_TS + 5, BASE_TS + 1])
    second = batch(3, ts=BASE_TS + 9)
    got = VALIDATOR.validate(bytearray(first + second), LogConfig(), BASE_TS)
    assert got == [ValidBatch(0, 2, BASE_TS + 5), ValidBatch(len(first), 3, BASE_TS + 9)]


def test_an_empty_chunk_holds_no_batch() -> None:
    assert VALIDATOR.validate(bytearray(), LogConfig(), BASE_TS) == []


def test_a_truncated_batch_is_corrupt_not_large() -> None:
    first = batch(1)
    data = bytearray(first + batch(2))[:-4]
    with pytest.raises(CorruptMessage, match=f"t-3: batch at byte {len(first)} is truncated"):
        VALIDATOR.validate(data, LogConfig(), BASE_TS)
    with pytest.raises(CorruptMessage, match="batch at byte 0 is truncated"):
        VALIDATOR.validate(bytearray(batch(2))[:-4], LogConfig(max_message_bytes=60), BASE_TS)


@pytest.mark.parametrize(("tail", "words"), [(b"\0" * 9, "needs 57 bytes"), (None, "magic 9")])
def test_a_header_that_cannot_be_says_why(tail: bytes | None, words: str) -> None:
    first = batch(1)
    if tail is None:
        second = bytearray(batch(1))
        second[MAGIC_OFFSET] = 9
        tail = bytes(second)
    with pytest.raises(CorruptMessage, match=words):
        VALIDATOR.validate(bytearray(first + tail), LogConfig(), BASE_TS)


def test_a_batch_over_max_message_bytes_is_too_large() -> None:
    data = batch(1, value_bytes=500)
    with pytest.raises(
        MessageTooLarge, match=r"t-3: batch of \d+ bytes exceeds max\.message\.bytes 200"
    ):
        VALIDATOR.validate(bytearray(data), LogConfig(max_message_bytes=200), BASE_TS)


def test_a_compacted_topic_refuses_a_record_without_key() -> None:
    compacted = LogConfig(cleanup_policy=frozenset({"compact"}))
    VALIDATOR.validate(bytearray(batch(1)), compacted, BASE_TS)
    with pytest.raises(InvalidRecord, match="without key"):
        VALIDATOR.validate(bytearray(batch(1, key=None)), compacted, BASE_TS)


def test_log_append_time_batches_only_where_the_topic_stamps_them() -> None:
    data = encode_batch([(b"k", b"v", None, BASE_TS)], timestamp_type=TimestampType.LOG_APPEND_TIME)
    with pytest.raises(InvalidTimestamp, match="LogAppendTime"):
        VALIDATOR.validate(bytearray(data), LogConfig(), BASE_TS)
    stamped = LogConfig(message_timestamp_type="LogAppendTime")
    assert len(VALIDATOR.validate(bytearray(data), stamped, BASE_TS)) == 1


def test_timestamps_outside_the_bounds_are_refused() -> None:
    config = LogConfig(message_timestamp_before_max_ms=1000, message_timestamp_after_max_ms=1000)
    VALIDATOR.validate(bytearray(batch(1, ts=BASE_TS + 999)), config, BASE_TS)
    with pytest.raises(InvalidTimestamp, match="after now"):
        VALIDATOR.validate(bytearray(batch(1, ts=BASE_TS + 1001)), config, BASE_TS)
