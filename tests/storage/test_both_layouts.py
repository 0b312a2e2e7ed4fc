"""Tidelog (§3) and Kafka v2 batches in one partition (issue 35, docs/storage.md "Both
layouts in one log"): appended, stamped as Kafka stamps them, read back, recovered,
indexed and searched by time across layouts."""

from __future__ import annotations

import struct
from pathlib import Path

import crc32c
import pytest

from protocol.batch import (
    ANY_LAYOUT,
    BOTH_LAYOUTS,
    F_MAGIC,
    KAFKA_BATCHES,
    KAFKA_LAYOUT,
    KAFKA_MAGIC,
    LAYOUT,
    MAGIC,
    TIDELOG_BATCHES,
    TIMESTAMP_TYPE_MASK,
    BatchWalk,
    encode_batch,
    iter_records,
)
from protocol.errors import CorruptMessage, InvalidRecord
from protocol.kafka import records as kafka
from protocol.kafka.convert import tidelog_to_kafka
from protocol.layouts import to_layout
from storage.config import LogConfig
from storage.log import Log
from tests.storage.helpers import BASE_TS, ManualClock, open_test_log

_INT64 = struct.Struct(">q")
_INT32 = struct.Struct(">i")
SMALL = LogConfig(segment_bytes=600, index_interval_bytes=1)


def _rows(count: int, tag: str, ts: int, key: bytes | None = b"k") -> list[tuple]:
    return [(key, f"{tag}{i}".encode(), [("h", b"x")], ts + i) for i in range(count)]


def tidelog_batch(count: int, tag: str = "t", ts: int = BASE_TS, **kw: int) -> bytes:
    return encode_batch(_rows(count, tag, ts), **kw)


def kafka_batch(
    count: int, tag: str = "k", ts: int = BASE_TS, *, epoch: int = -1, key: bytes | None = b"k",
    **kw: int,
) -> bytes:  # fmt: skip
    """A Kafka v2 batch as a producer sends it (base offset 0, leader epoch -1)."""
    source = encode_batch(_rows(count, tag, ts, key), **kw)
    return tidelog_to_kafka(source, partition_leader_epoch=epoch)[0]


def stored(log: Log) -> bytes:
    """Every byte of the log's segments, in order."""
    return b"".join(s.log_path.read_bytes() for s in log._local.segments)


def records_of(log: Log) -> list[tuple[int, int, bytes | None]]:
    """(offset, timestamp, value) of every record, read as a msgpack reader converts."""
    data = log.read(log.log_start_offset, 1 << 24).records
    out, offset = [], log.log_start_offset
    while data:
        records = list(iter_records(to_layout(data, MAGIC)))
        out += [(r.offset, r.timestamp, r.value) for r in records]
        offset = records[-1].offset + 1
        data = log.read(offset, 1 << 24).records if offset < log.log_end_offset else b""
    return out


def mixed(log: Log) -> list[tuple[int, int, bytes | None]]:
    """Append Tidelog, Kafka, Kafka, Tidelog batches; the records they hold."""
    log.append(tidelog_batch(3, "a", BASE_TS))
    log.append(kafka_batch(2, "b", BASE_TS + 10), layout=KAFKA_LAYOUT)
    log.append(kafka_batch(4, "c", BASE_TS + 20) + kafka_batch(1, "d", BASE_TS + 30),
               layout=KAFKA_LAYOUT)  # fmt: skip
    log.append(tidelog_batch(2, "e", BASE_TS + 40))
    values = [f"a{i}" for i in range(3)] + [f"b{i}" for i in range(2)]
    values += [f"c{i}" for i in range(4)] + ["d0"] + [f"e{i}" for i in range(2)]
    stamps = [BASE_TS + i for i in range(3)] + [BASE_TS + 10 + i for i in range(2)]
    stamps += [BASE_TS + 20 + i for i in range(4)] + [BASE_TS + 30]
    stamps += [BASE_TS + 40 + i for i in range(2)]
    return [(o, t, v.encode()) for o, (t, v) in enumerate(zip(stamps, values, strict=True))]


def test_both_layouts_append_in_one_log_and_read_back(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    expected = mixed(log)
    assert records_of(log) == expected
    walk = BatchWalk(stored(log), layout=ANY_LAYOUT)
    assert [f[F_MAGIC] for _, f in walk] == [MAGIC, KAFKA_MAGIC, KAFKA_MAGIC, KAFKA_MAGIC, MAGIC]
    assert walk.problem is None
    assert log.read(0, 1 << 20).layouts == BOTH_LAYOUTS
    assert log.read(3, 1 << 20, min_one=True).layouts == BOTH_LAYOUTS


def test_a_read_of_one_layout_says_so(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(kafka_batch(2), layout=KAFKA_LAYOUT)
    assert log.read(0, 1 << 20).layouts == KAFKA_BATCHES
    other = open_test_log(tmp_path / "other")
    other.append(tidelog_batch(2))
    assert other.read(0, 1 << 20).layouts == TIDELOG_BATCHES


def test_a_kafka_batch_is_stored_as_sent_but_for_what_kafka_stamps(tmp_path: Path) -> None:
    """Base offset and leader epoch (outside the CRC) rewritten, nothing else."""
    log = open_test_log(tmp_path)
    log.append(tidelog_batch(5))
    sent = kafka_batch(3, epoch=-1)
    info = log.append(sent, layout=KAFKA_LAYOUT)
    assert info.base_offset == 5
    data = log.read(5, 1 << 20).records
    assert data[kafka.CRC_OFFSET :] == sent[kafka.CRC_OFFSET :]
    assert _INT64.unpack_from(data, 0)[0] == 5
    assert _INT32.unpack_from(data, kafka.PARTITION_LEADER_EPOCH_OFFSET)[0] == 0
    assert data[12] == 0 and data[16] == KAFKA_MAGIC


def test_a_wrong_max_timestamp_is_rewritten_with_a_fresh_crc(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    sent = bytearray(kafka_batch(3, ts=BASE_TS))
    max_at = KAFKA_LAYOUT.offset["max_timestamp"]
    _INT64.pack_into(sent, max_at, BASE_TS - 5)  # the producer's header lies
    _crc(sent)
    log.append(bytes(sent), layout=KAFKA_LAYOUT)
    data = log.read(0, 1 << 20).records
    assert _INT64.unpack_from(data, max_at)[0] == BASE_TS + 2
    assert crc32c.crc32c(data[kafka.CRC_START :]) == struct.unpack_from(">I", data, 17)[0]
    assert log.max_timestamp() == (2, BASE_TS + 2)


def _crc(batch: bytearray) -> None:
    struct.pack_into(">I", batch, kafka.CRC_OFFSET, crc32c.crc32c(batch[kafka.CRC_START :]))


def test_log_append_time_stamps_kafka_batches_as_kafka_does(tmp_path: Path) -> None:
    clock = ManualClock(BASE_TS + 1_000)
    log = open_test_log(tmp_path, LogConfig(message_timestamp_type="LogAppendTime"), clock=clock)
    info = log.append(kafka_batch(3), layout=KAFKA_LAYOUT)
    assert info.log_append_time == BASE_TS + 1_000
    data = log.read(0, 1 << 20).records
    attributes = struct.unpack_from(">h", data, KAFKA_LAYOUT.offset["attributes"])[0]
    assert attributes & TIMESTAMP_TYPE_MASK
    assert _INT64.unpack_from(data, KAFKA_LAYOUT.offset["max_timestamp"])[0] == BASE_TS + 1_000
    assert crc32c.crc32c(data[kafka.CRC_START :]) == struct.unpack_from(">I", data, 17)[0]
    assert [r.timestamp for r in iter_records(to_layout(data, MAGIC))] == [BASE_TS + 1_000] * 3


def test_recovery_rescans_a_mixed_segment_and_cuts_a_torn_kafka_tail(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    expected = mixed(log)
    log.append(kafka_batch(3, "z"), layout=KAFKA_LAYOUT)
    path = log.active_segment.log_path
    log.close()
    data = path.read_bytes()
    path.write_bytes(data[:-7])  # a crash tore the last (Kafka) batch
    reopened = open_test_log(tmp_path, clean=False, recovery_point=0)
    assert reopened.log_end_offset == len(expected)
    assert records_of(reopened) == expected
    assert reopened.append(kafka_batch(1, "y"), layout=KAFKA_LAYOUT).base_offset == len(expected)
    assert reopened.active_segment.layouts == BOTH_LAYOUTS


def test_recovery_checks_the_crc_of_kafka_batches(tmp_path: Path) -> None:
    """A Kafka batch with a flipped byte in its records is damage, not a Tidelog batch."""
    log = open_test_log(tmp_path)
    log.append(tidelog_batch(2))
    log.append(kafka_batch(2), layout=KAFKA_LAYOUT)
    path = log.active_segment.log_path
    log.close()
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    reopened = open_test_log(tmp_path, clean=False, recovery_point=0)
    assert reopened.log_end_offset == 2


def test_index_lookups_and_time_search_cross_layouts(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, SMALL)
    expected = []
    for round_ in range(12):
        ts = BASE_TS + 100 * round_
        if round_ % 2:
            log.append(kafka_batch(3, f"k{round_}-", ts), layout=KAFKA_LAYOUT)
        else:
            log.append(tidelog_batch(3, f"t{round_}-", ts))
        expected += [ts, ts + 1, ts + 2]
    assert log.segment_count > 1
    for offset in range(log.log_end_offset):
        data = log.read(offset, 1)  # min_one: the batch holding it
        first = next(iter_records(to_layout(data.records, MAGIC)))
        assert first.offset <= offset < first.offset + 3
    for offset, ts in enumerate(expected):
        assert log.offset_for_timestamp(ts) == (offset, ts)
    assert log.offset_for_timestamp(BASE_TS + 150) == (6, BASE_TS + 200)
    assert log.max_timestamp() == (len(expected) - 1, expected[-1])
    log.close()
    reopened = open_test_log(tmp_path, SMALL, clean=False, recovery_point=0)  # rebuilt indexes
    for offset, ts in enumerate(expected):
        assert reopened.offset_for_timestamp(ts) == (offset, ts)


def test_a_retried_kafka_batch_is_answered_with_its_offsets(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    log.append(tidelog_batch(2))
    sent = kafka_batch(3, producer_id=7, producer_epoch=0, base_sequence=0)
    first = log.append(sent, layout=KAFKA_LAYOUT)
    again = log.append(sent, layout=KAFKA_LAYOUT)
    assert (again.base_offset, again.last_offset, again.duplicate) == (2, 4, True)
    assert (first.base_offset, first.last_offset) == (2, 4)
    assert log.log_end_offset == 5
    entry = log.producer_entry(7)
    assert entry is not None


def test_a_compacted_topic_refuses_a_keyless_kafka_record(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, LogConfig(cleanup_policy=frozenset({"compact"})))
    with pytest.raises(InvalidRecord, match="without key"):
        log.append(kafka_batch(2, key=None), layout=KAFKA_LAYOUT)
    assert log.append(kafka_batch(2), layout=KAFKA_LAYOUT).base_offset == 0


def test_each_path_takes_its_own_layout_only(tmp_path: Path) -> None:
    log = open_test_log(tmp_path)
    with pytest.raises(CorruptMessage):
        log.append(kafka_batch(1))  # a msgpack produce carries §3 batches
    with pytest.raises(CorruptMessage, match="magic 1"):
        log.append(kafka_batch(1) + tidelog_batch(1), layout=KAFKA_LAYOUT)
    assert log.log_end_offset == 0
    assert log.append(tidelog_batch(1), layout=LAYOUT).base_offset == 0
