"""The Consumer: batch trimming, compaction gaps, positions, and reading from the fake broker."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from protocol.batch import (
    TIMESTAMP_TYPE_MASK,
    build_batch,
    encode_batch,
    set_log_append_time,
)
from protocol.calls import OffsetAndTimestamp
from protocol.connection import BrokerProtocolError
from protocol.errors import CorruptMessage, UnknownTopicOrPartition
from tests.protocol.fakebroker import FakeBroker, serve_in_thread
from tidelog.client import Client
from tidelog.consumer import (
    Consumer,
    ConsumerRecord,
    NoOffsetForPartitionError,
    TopicPartition,
    decode_fetched,
)

TP = TopicPartition("t", 0)


def stored_batch(base_offset: int, deltas: list[int], *, last_delta: int | None = None) -> bytes:
    """A batch as the broker stores it, possibly with compaction gaps between deltas."""
    return build_batch(
        [(d, 1_000 + d, b"k%d" % d, b"v%d" % d, ()) for d in deltas],
        base_offset=base_offset,
        base_timestamp=1_000,
        attributes=0,
        last_offset_delta=last_delta,
    )


def test_decode_trims_the_first_batch_to_the_position() -> None:
    data = stored_batch(10, [0, 1, 2, 3]) + stored_batch(14, [0, 1])
    records, position = decode_fetched("t", 0, data, 12)
    assert [r.offset for r in records] == [12, 13, 14, 15]
    assert position == 16
    assert records[0] == ConsumerRecord("t", 0, 12, 1_002, 0, b"k2", b"v2", ())


def test_decode_skips_batches_wholly_below_the_position() -> None:
    data = stored_batch(0, [0, 1]) + stored_batch(2, [0, 1])
    records, position = decode_fetched("t", 0, data, 3)
    assert [r.offset for r in records] == [3]
    assert position == 4


def test_compaction_gaps_use_deltas_and_the_header_for_the_next_position() -> None:
    # Offsets 0..9 with only 1, 5 and 7 left; the batch still ends at delta 9.
    data = stored_batch(0, [1, 5, 7], last_delta=9) + stored_batch(10, [0])
    records, position = decode_fetched("t", 0, data, 2)
    assert [r.offset for r in records] == [5, 7, 10]
    assert [r.value for r in records] == [b"v5", b"v7", b"v0"]
    assert position == 11


def test_empty_batch_after_compaction_still_advances() -> None:
    data = build_batch(
        [], base_offset=0, base_timestamp=0, attributes=0, last_offset_delta=4, max_timestamp=0
    )
    records, position = decode_fetched("t", 0, data, 0)
    assert records == [] and position == 5


def test_log_append_time_batches_report_the_broker_time() -> None:
    data = bytearray(encode_batch([(None, b"a", None, 1), (None, b"b", None, 2)]))
    set_log_append_time(data, 0, 5_000)
    records, _ = decode_fetched("t", 0, bytes(data), 0)
    assert [(r.timestamp, r.timestamp_type) for r in records] == [(5_000, 1), (5_000, 1)]
    assert data[18] & TIMESTAMP_TYPE_MASK


def test_partial_trailing_batch_is_left_for_the_next_fetch() -> None:
    second = stored_batch(2, [0, 1])
    data = stored_batch(0, [0, 1]) + second[:-3]
    records, position = decode_fetched("t", 0, data, 0)
    assert [r.offset for r in records] == [0, 1] and position == 2


def test_crc_mismatch_is_corrupt() -> None:
    data = bytearray(stored_batch(0, [0]))
    data[-1] ^= 0xFF
    with pytest.raises(CorruptMessage, match="CRC"):
        decode_fetched("t", 0, bytes(data), 0)


@pytest.fixture
def broker(request: pytest.FixtureRequest) -> FakeBroker:
    """A FakeBroker, or the subclass a test passes with indirect parametrization."""
    return getattr(request, "param", FakeBroker)()


@pytest.fixture
def address(broker: FakeBroker) -> Iterator[str]:
    with serve_in_thread(broker) as address:
        with Client(address) as admin:
            admin.create_topic("t", partitions=2)
            for i in range(5):
                admin.produce("t", 0, encode_batch([(None, b"%d" % i, None, 1_000 * (i + 1))]))
            admin.produce("t", 1, encode_batch([(b"k", b"p1", [("h", b"v")], 42)]))
        yield address


def consumer(address: str, *topics: str, **options: object) -> Consumer:
    options.setdefault("consumer_timeout_ms", 100)
    options.setdefault("fetch_max_wait_ms", 10)
    return Consumer(*topics, bootstrap_servers=address, **options)  # type: ignore[arg-type]


def test_iteration_reads_everything_from_the_beginning(address: str) -> None:
    with consumer(address, auto_offset_reset="earliest") as c:
        c.assign([TP])
        assert [r.value for r in c] == [b"0", b"1", b"2", b"3", b"4"]
        assert c.position(TP) == 5


def test_constructor_topics_assign_every_partition(address: str) -> None:
    with consumer(address, "t", auto_offset_reset="earliest") as c:
        assert c.assignment() == {TP, TopicPartition("t", 1)}
        records = list(c)
    assert sorted(r.value for r in records) == [b"0", b"1", b"2", b"3", b"4", b"p1"]
    [p1] = [r for r in records if r.partition == 1]
    assert (p1.key, p1.headers, p1.timestamp) == (b"k", (("h", b"v"),), 42)


def test_partitions_of_a_topic_come_from_the_broker(address: str) -> None:
    with consumer(address) as c:
        assert c.partitions_for_topic("t") == {0, 1}
        assert c.partitions_for("t") == [0, 1]
        with pytest.raises(UnknownTopicOrPartition):
            c.partitions_for_topic("missing")


def test_latest_reset_starts_at_the_end(address: str) -> None:
    with consumer(address) as c:
        c.assign([TP])
        assert c.position(TP) == 5
        assert c.poll(timeout_ms=0) == {}


def test_seek_and_poll_with_max_records(address: str) -> None:
    with consumer(address) as c:
        c.assign([TP])
        c.seek(TP, 1)
        first = c.poll(timeout_ms=1_000, max_records=2)
        assert [r.offset for r in first[TP]] == [1, 2]
        assert c.position(TP) == 3
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [3, 4]
        c.seek_to_beginning()
        assert c.position(TP) == 0
        c.seek_to_end(TP)
        assert c.position(TP) == 5


def test_position_is_exact_in_the_middle_of_iteration(address: str) -> None:
    with consumer(address, auto_offset_reset="earliest") as c:
        c.assign([TP])
        it = iter(c)
        assert next(it).offset == 0
        assert next(it).offset == 1
        assert c.position(TP) == 2
        assert [r.offset for r in it] == [2, 3, 4]


def test_next_works_on_the_consumer_itself(address: str) -> None:
    with consumer(address, auto_offset_reset="earliest") as c:
        c.assign([TP])
        assert next(c).offset == 0
        c.seek(TP, 4)
        assert next(c).offset == 4
        with pytest.raises(StopIteration):
            next(c)


def test_offsets_queries(address: str) -> None:
    with consumer(address) as c:
        assert c.beginning_offsets([TP]) == {TP: 0}
        assert c.end_offsets([TP, TopicPartition("t", 1)]) == {TP: 5, TopicPartition("t", 1): 1}
        moment = datetime.fromtimestamp(2.5, tz=UTC)
        assert c.offsets_for_times({TP: 2_500}) == {TP: OffsetAndTimestamp(2, 3_000)}
        assert c.offsets_for_times({TP: moment}) == {TP: OffsetAndTimestamp(2, 3_000)}
        assert c.offsets_for_times({TP: 10**9}) == {TP: None}
        with pytest.raises(ValueError, match="ms >= 0"):
            c.offsets_for_times({TP: -5})


def test_out_of_range_position_is_reset_by_policy(address: str, broker: FakeBroker) -> None:
    broker.topics["t"][0].log_start_offset = 3  # as if retention removed 0..2
    with consumer(address, auto_offset_reset="earliest") as c:
        c.assign([TP])
        c.seek(TP, 1)
        assert [r.offset for r in c] == [3, 4]
    with consumer(address, auto_offset_reset="none") as c:
        c.assign([TP])
        c.seek(TP, 1)
        with pytest.raises(NoOffsetForPartitionError, match="out of range"):
            c.poll(timeout_ms=100)


def test_none_policy_without_a_position_refuses(address: str) -> None:
    with consumer(address, auto_offset_reset="none") as c:
        c.assign([TP])
        with pytest.raises(NoOffsetForPartitionError):
            c.position(TP)


def test_unassigned_partition_is_a_key_error(address: str) -> None:
    with consumer(address) as c, pytest.raises(KeyError):
        c.seek(TP, 0)


def test_stored_gaps_are_read_through_the_broker(address: str, broker: FakeBroker) -> None:
    partition = broker.topics["t"][1]
    partition.batches = [stored_batch(0, [1, 5, 7], last_delta=9), stored_batch(10, [0])]
    partition.high_watermark = 11
    with consumer(address, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition("t", 1)])
        assert [r.offset for r in c] == [1, 5, 7, 10]
        assert c.position(TopicPartition("t", 1)) == 11


def test_poll_honours_max_records_across_partitions(address: str) -> None:
    with consumer(address, "t", auto_offset_reset="earliest") as c:
        got: list[ConsumerRecord] = []
        while len(got) < 6:
            polled = c.poll(timeout_ms=1_000, max_records=4)
            assert polled, "records should keep coming"
            assert sum(map(len, polled.values())) <= 4
            got.extend(r for records in polled.values() for r in records)
        assert len(got) == 6 and c.poll(timeout_ms=0) == {}


# -- fetching one ahead ---------------------------------------------------------------


def fetches(broker: FakeBroker) -> list[tuple[int, int]]:
    """(max_wait_ms, offset) of every fetch of partition 0 the broker has answered."""
    return [
        (r["body"]["max_wait_ms"], p["offset"])
        for r in broker.requests
        if r["api"] == "fetch"
        for t in r["body"]["topics"]
        for p in t["partitions"]
        if p["partition"] == 0
    ]


def one_batch_per_fetch(address: str, **options: object) -> Consumer:
    c = consumer(address, auto_offset_reset="earliest", max_partition_fetch_bytes=1, **options)
    c.assign([TP])
    return c


def test_the_next_fetch_goes_out_before_the_records_are_returned(
    address: str, broker: FakeBroker
) -> None:
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        # Another request first receives the answer to the fetch sent ahead, and keeps it.
        assert c.end_offsets([TP]) == {TP: 5}
        assert fetches(broker) == [(10, 0), (0, 1)]
        assert [r.offset for r in c.poll(timeout_ms=0)[TP]] == [1]
        assert c.client.metadata(["t"])[0]["topic"] == "t"  # free for a blocking request
        assert fetches(broker) == [(10, 0), (0, 1), (0, 2)]  # offset 1 was asked once


def test_no_fetch_is_sent_ahead_at_the_end_of_the_log(address: str, broker: FakeBroker) -> None:
    with one_batch_per_fetch(address) as c:
        for offset in range(5):
            assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [offset]
        assert c.end_offsets([TP]) == {TP: 5}
        assert fetches(broker) == [(10, 0), (0, 1), (0, 2), (0, 3), (0, 4)]
        assert c.poll(timeout_ms=0) == {}


def test_seek_makes_the_fetch_sent_ahead_stale(address: str) -> None:
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        c.seek(TP, 3)
        # The answer for offset 1 is dropped; even a poll that does not wait reads from 3.
        assert [r.offset for r in c.poll(timeout_ms=0)[TP]] == [3]
        assert [r.offset for r in c.poll(timeout_ms=0)[TP]] == [4]
        assert c.position(TP) == 5


def test_seek_to_the_position_asked_ahead_uses_its_answer(address: str, broker: FakeBroker) -> None:
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        c.seek(TP, 1)
        assert [r.offset for r in c.poll(timeout_ms=0)[TP]] == [1]
        assert c.end_offsets([TP]) == {TP: 5}  # (received the fetch sent ahead)
        assert [offset for _, offset in fetches(broker)] == [0, 1, 2]


def test_position_and_seek_in_the_middle_of_iteration_with_fetches_ahead(address: str) -> None:
    with one_batch_per_fetch(address) as c:
        it = iter(c)
        assert [next(it).offset, next(it).offset] == [0, 1]
        assert c.position(TP) == 2
        c.seek(TP, 0)
        assert [r.offset for r in it] == [0, 1, 2, 3, 4]


def test_reassigned_partitions_ignore_the_answer_asked_for_the_old_ones(address: str) -> None:
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        c.assign([TopicPartition("t", 1)])
        assert [(r.partition, r.value) for r in c] == [(1, b"p1")]


def test_a_corrupt_batch_is_reported_every_time_without_skipping_it(
    address: str, broker: FakeBroker
) -> None:
    batches = broker.topics["t"][0].batches
    batches[2] = batches[2].replace(b"2", b"9")  # the value; the CRC no longer matches
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [1]
        for _ in range(2):
            with pytest.raises(CorruptMessage, match="CRC"):
                c.poll(timeout_ms=1_000)
            assert c.position(TP) == 2
        c.seek(TP, 3)
        assert [r.value for r in c] == [b"3", b"4"]


class AheadAnswersGarbage(FakeBroker):
    """Answers every fetch sent ahead (max_wait_ms 0) with a body that breaks the contract."""

    def handle(self, obj: object) -> dict[str, Any] | None:
        response = super().handle(obj)
        if is_fetch_ahead(obj) and response is not None:
            return response | {"body": {"topics": "garbage"}}
        return response


class AheadAnswersLate(FakeBroker):
    """Holds every fetch sent ahead until `release` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.release = threading.Event()
        self.answered_ahead = False

    def handle(self, obj: object) -> dict[str, Any] | None:
        if is_fetch_ahead(obj):
            self.release.wait(timeout=30)
            self.answered_ahead = True
        return super().handle(obj)


def is_fetch_ahead(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("api") == "fetch" and obj["body"]["max_wait_ms"] == 0


@pytest.mark.parametrize("broker", [AheadAnswersGarbage], indirect=True)
def test_a_failed_fetch_ahead_is_read_again_before_another_request(address: str) -> None:
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        assert c.end_offsets([TP]) == {TP: 5}  # on a new connection
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [1]


@pytest.mark.parametrize("broker", [AheadAnswersGarbage], indirect=True)
def test_a_failed_fetch_ahead_fails_the_poll_that_needs_it_once(address: str) -> None:
    with one_batch_per_fetch(address) as c:
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        with pytest.raises(BrokerProtocolError, match="malformed fetch response"):
            c.poll(timeout_ms=1_000)
        assert c.position(TP) == 1
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [1]


@pytest.mark.parametrize("broker", [AheadAnswersLate], indirect=True)
def test_close_does_not_wait_for_the_fetch_sent_ahead(
    address: str, broker: AheadAnswersLate
) -> None:
    try:
        c = one_batch_per_fetch(address)
        assert [r.offset for r in c.poll(timeout_ms=1_000)[TP]] == [0]
        assert "tidelog-fetch" in {t.name for t in threading.enumerate()}
        c.close()
        assert "tidelog-fetch" not in {t.name for t in threading.enumerate()}
        assert not broker.answered_ahead
    finally:
        broker.release.set()


def test_a_consumer_dropped_without_close_does_not_leave_its_fetch_thread(address: str) -> None:
    import gc
    import time

    c = one_batch_per_fetch(address)
    assert c.poll(timeout_ms=1_000)[TP]
    reader_threads = [t for t in threading.enumerate() if t.name == "tidelog-fetch"]
    assert reader_threads
    c._client.close()  # what an application's exit would do to its socket
    del c
    gc.collect()
    deadline = time.monotonic() + 10
    while any(t.is_alive() for t in reader_threads) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not any(t.is_alive() for t in reader_threads)
