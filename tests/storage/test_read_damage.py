"""Reads of damaged bytes fail for the damaged range only (issue 23, finding 4).

After a clean stop nothing is rescanned, so damage in a segment is found by the
read that walks into it: the segment is fenced from that byte (logged once,
counted), reads before it are served up to it, reads at or past it get
CORRUPT_MESSAGE, and no read below the high watermark answers "nothing".
"""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs

from protocol.batch import BATCH_LENGTH_OFFSET, MAGIC_OFFSET, iter_headers, iter_records
from protocol.errors import CorruptMessage
from storage.config import LogConfig
from storage.files import log_path
from storage.log import Log
from tests.storage.helpers import BASE_TS, batch, open_test_log
from tidelog.consumer_record import decode_fetched

COUNT = 12
DAMAGED = 5
# Four batches per segment: 0..3, 4..7 (damaged at 5), 8..11 (active); an index entry
# per batch, so a clean open (which scans from the last entry) does not see the damage.
CONFIG = LogConfig(segment_bytes=500, index_interval_bytes=1)


def _damaged_log(directory: Path, how: str, config: LogConfig = CONFIG) -> Log:
    """COUNT single-record batches, a clean stop, then batch DAMAGED's header spoiled."""
    log = open_test_log(directory, config)
    for i in range(COUNT):
        log.append(batch(1, tag=i, value_bytes=40, ts=BASE_TS + i))
    log.close()
    base = max(s.base_offset for s in log.segments_info() if s.base_offset <= DAMAGED)
    assert base == 4 and log.segment_count == 3
    at = (DAMAGED - base) * len(batch(1, value_bytes=40))
    path = log_path(directory, base)
    data = bytearray(path.read_bytes())
    (length,) = struct.unpack_from(">i", data, at + BATCH_LENGTH_OFFSET)
    if how == "shorter":
        struct.pack_into(">i", data, at + BATCH_LENGTH_OFFSET, length - 3)
    elif how == "longer":
        struct.pack_into(">i", data, at + BATCH_LENGTH_OFFSET, length + 7)
    elif how == "past_the_end":
        struct.pack_into(">i", data, at + BATCH_LENGTH_OFFSET, 2**31 - 1)
    elif how == "magic":
        data[at + MAGIC_OFFSET] = 0x7F
    path.write_bytes(bytes(data))
    # As the manager opens it after a clean stop: the checkpoint says all was flushed.
    return open_test_log(directory, config, clean=True, recovery_point=COUNT)


DAMAGE = ["shorter", "longer", "past_the_end", "magic"]


@pytest.mark.parametrize("how", DAMAGE)
def test_offsets_past_the_damage_get_corrupt_message_not_nothing(tmp_path: Path, how: str) -> None:
    log = _damaged_log(tmp_path, how)
    assert log.high_watermark == COUNT
    for offset in range(DAMAGED, 8):
        with pytest.raises(CorruptMessage, match="fenced"):
            log.read(offset, 1 << 20)
    assert [r.offset for r in iter_records(log.read(8, 1 << 20).records)] == [8, 9, 10, 11]


@pytest.mark.parametrize("how", DAMAGE)
def test_a_read_before_the_damage_is_served_up_to_it(tmp_path: Path, how: str) -> None:
    log = _damaged_log(tmp_path, how)
    records = log.read(0, 1 << 20).records
    assert [r.offset for r in iter_records(records)] == [0, 1, 2, 3]
    records = log.read(4, 1 << 20).records
    assert [r.offset for r in iter_records(records)] == [4]


@pytest.mark.parametrize("how", DAMAGE)
def test_damage_found_by_a_read_is_fenced_logged_once_and_counted(tmp_path: Path, how: str) -> None:
    log = _damaged_log(tmp_path, how)
    with capture_logs() as events:
        for _ in range(3):
            log.read(4, 1 << 20)
            with pytest.raises(CorruptMessage):
                log.read(DAMAGED + 1, 1 << 20)
    fenced = [e for e in events if e["event"] == "segment_fenced"]
    assert len(fenced) == 1 and fenced[0]["base_offset"] == 4
    assert log.fenced_segments == 1


def test_a_hole_below_the_high_watermark_is_an_error_not_nothing(tmp_path: Path) -> None:
    """An empty segment file beyond the log end (a clean start trusts it) leaves offsets
    no batch holds below the high watermark: a read there must fail, not stall a
    consumer with empty answers."""
    log = open_test_log(tmp_path)
    for i in range(20):
        log.append(batch(1, tag=i))
    log.close()
    log_path(tmp_path, 45).touch()
    reopened = open_test_log(tmp_path, clean=True, recovery_point=20)
    assert reopened.high_watermark == 45
    assert [r.offset for r in iter_records(reopened.read(19, 1 << 20).records)] == [19]
    with pytest.raises(CorruptMessage, match="no batch holds"):
        reopened.read(25, 1 << 20)
    assert reopened.read(45, 1 << 20).records == b""  # at the high watermark: nothing yet


@pytest.mark.parametrize("how", DAMAGE)
def test_a_time_lookup_into_a_fenced_range_fails_instead_of_answering_a_later_offset(
    tmp_path: Path, how: str
) -> None:
    """Record i has timestamp BASE_TS + i, and segment 4's time index says it holds
    BASE_TS + 6. Once a read found the damage, the lookup must not answer from the
    fenced range (where fetch refuses), nor skip it for offset 8 of the next segment."""
    log = _damaged_log(tmp_path, how)
    log.read(4, 1 << 20)  # finds the damage
    with pytest.raises(CorruptMessage, match="timestamp"):
        log.offset_for_timestamp(BASE_TS + 6)
    assert log.offset_for_timestamp(BASE_TS + 4) == (4, BASE_TS + 4)
    assert log.offset_for_timestamp(BASE_TS + 9) == (9, BASE_TS + 9)


def test_a_range_fenced_at_load_is_skipped_by_time_lookups(tmp_path: Path) -> None:
    """Fenced at load (no index entry let the clean start skip the damage): the
    segment's timestamps are those of its valid batches, so a later time lies in the
    next segment, as the fenced offsets are unreadable anyway."""
    log = _damaged_log(tmp_path, "magic", LogConfig(segment_bytes=500))
    assert log.fenced_segments == 1
    assert log.offset_for_timestamp(BASE_TS + 6) == (8, BASE_TS + 8)
    assert log.offset_for_timestamp(BASE_TS + 4) == (4, BASE_TS + 4)


def test_a_flipped_payload_byte_is_served_and_refused_by_the_consumers_crc_check(
    tmp_path: Path,
) -> None:
    """The chosen split, as Kafka's: fetch does not verify CRCs (per-batch work on the
    hot path, and sendfile never sees the bytes); the consumer does (check_crcs,
    on by default), and recovery does for everything past the recovery point."""
    log = open_test_log(tmp_path, CONFIG)
    for i in range(COUNT):
        log.append(batch(1, tag=i, value_bytes=40, ts=BASE_TS + i))
    log.close()
    path = log_path(tmp_path, 4)
    data = bytearray(path.read_bytes())
    data[len(batch(1, value_bytes=40)) + 70] ^= 0x01  # inside batch 5's payload
    path.write_bytes(bytes(data))
    reopened = open_test_log(tmp_path, CONFIG, clean=True, recovery_point=COUNT)
    served = reopened.read(4, 1 << 20).records
    assert [h.base_offset for _, h in iter_headers(served)] == [4, 5, 6, 7]
    with pytest.raises(CorruptMessage, match="CRC"):
        decode_fetched("t", 0, served, 4, check_crcs=True)
    # After an unclean stop with the recovery point below it, recovery's CRC scan
    # finds the same byte and cuts the unflushed tail there.
    recovered = open_test_log(tmp_path, CONFIG, clean=False, recovery_point=4)
    assert recovered.high_watermark == 5


def test_damage_found_in_the_active_segment_does_not_hide_later_appends(tmp_path: Path) -> None:
    """The fenced range runs to the end of its segment: when that is the active one,
    it is rolled, so what is appended afterwards stays readable."""
    log = open_test_log(tmp_path, CONFIG)
    for i in range(3):
        log.append(batch(1, tag=i, value_bytes=40))
    log.close()
    size = len(batch(1, value_bytes=40))
    path = log_path(tmp_path, 0)
    data = bytearray(path.read_bytes())
    data[size + MAGIC_OFFSET] = 0x7F  # batch 1
    path.write_bytes(bytes(data))
    reopened = open_test_log(tmp_path, CONFIG, clean=True, recovery_point=3)
    assert reopened.segment_count == 1 and reopened.high_watermark == 3
    with pytest.raises(CorruptMessage):
        reopened.read(1, 1 << 20)
    appended = reopened.append(batch(1, tag=7, value_bytes=40)).base_offset
    assert appended == 3
    assert [r.offset for r in iter_records(reopened.read(3, 1 << 20).records)] == [3]
    assert [r.offset for r in iter_records(reopened.read(0, 1 << 20).records)] == [0]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), min_size=1, max_size=4))
def test_any_damage_gives_whole_batches_or_corrupt_message_never_nothing(
    flips: list[tuple[int, int]],
) -> None:
    """Property: whatever bytes are spoiled after a clean stop, every read below the
    high watermark answers whole, well-framed batches or CORRUPT_MESSAGE: never a
    frame the consumer cannot split, never an empty answer."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        log = open_test_log(directory, CONFIG)
        for i in range(COUNT):
            log.append(batch(1, tag=i, value_bytes=40))
        log.close()
        paths = sorted(directory.glob("*.log"))
        blob = [bytearray(p.read_bytes()) for p in paths]
        total = sum(len(b) for b in blob)
        for at, value in flips:
            at %= total
            for data in blob:
                if at < len(data):
                    data[at] = value
                    break
                at -= len(data)
        for path, data in zip(paths, blob, strict=True):
            path.write_bytes(bytes(data))
        reopened = open_test_log(directory, CONFIG, clean=True, recovery_point=COUNT)
        # A spoiled base offset in a last batch can move the high watermark (a clean
        # start trusts the last header, as Kafka's): the offsets that were written.
        for offset in range(reopened.log_start_offset, min(reopened.high_watermark, COUNT)):
            try:
                records = reopened.read(offset, 1 << 20).records
            except CorruptMessage:
                continue
            assert records, f"nothing at {offset} below {reopened.high_watermark}"
            assert sum(1 for _ in iter_headers(records)) >= 1
        reopened.close()
