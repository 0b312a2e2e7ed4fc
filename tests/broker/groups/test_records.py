"""The `__consumer_offsets` group records: round trips, compatibility, damage."""

from __future__ import annotations

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from broker.groups import CommittedOffset, GroupMetadata, MemberMetadata, load_records
from broker.groups.records import (
    MalformedRecord,
    decode_group_value,
    group_record,
    group_value,
    offset_record,
)
from protocol.offsets_schema import OffsetAndMetadata, parse_offset_record

MEMBER = MemberMetadata("m-1", "i-1", "client", "/10.0.0.1", 30_000, 10_000, b"\x00sub", b"\x00as")
STABLE = GroupMetadata("consumer", 4, "range", "m-1", 1_700_000_000_000, (MEMBER,))
EMPTY = GroupMetadata("consumer", 5, None, None, 1_700_000_100_000, ())
SIMPLE_OFFSET = CommittedOffset(42, "note", 1_700_000_000_000)


@pytest.mark.parametrize("metadata", [STABLE, EMPTY], ids=["stable", "empty"])
def test_group_metadata_round_trip(metadata):
    assert decode_group_value(group_value(metadata)) == metadata


def test_offset_records_keep_the_existing_format():
    key, value = offset_record("g", ("t", 3), SIMPLE_OFFSET)
    assert parse_offset_record(key, value) == (("g", "t", 3), OffsetAndMetadata(42, "note"))
    assert msgpack.unpackb(value) == {
        "offset": 42,
        "metadata": "note",
        "commit_timestamp": SIMPLE_OFFSET[2],
    }


def test_existing_offset_reader_skips_group_records():
    key, value = group_record("g", STABLE)
    assert parse_offset_record(key, value) is None


def test_replay_takes_the_latest_record_and_honours_tombstones():
    log = [
        group_record("g", STABLE),
        offset_record("g", ("t", 0), CommittedOffset(1, "", 5)),
        offset_record("g", ("t", 0), CommittedOffset(2, "", 6)),
        offset_record("g", ("t", 1), CommittedOffset(9, "", 6)),
        offset_record("g", ("t", 1), None),
        group_record("h", EMPTY),
        group_record("h", None),
        group_record("g", EMPTY),
    ]
    state = load_records(log)
    assert state.groups == {"g": EMPTY}
    assert state.offsets == {"g": {("t", 0): CommittedOffset(2, "", 6)}}
    assert (state.records, state.malformed) == (8, 0)


@pytest.mark.parametrize(
    "record",
    [
        (None, b"x"),
        (b"\xc1", b""),  # not msgpack
        (msgpack.packb(["g", "t"]), b""),  # two-field key
        (msgpack.packb(["g", "t", -1]), msgpack.packb({"offset": 1, "commit_timestamp": 1})),
        (msgpack.packb(["g", "t", 0]), msgpack.packb({"offset": "1", "commit_timestamp": 1})),
        (msgpack.packb(["g", "t", 0]), msgpack.packb([1, 2])),
        (msgpack.packb(["g"]), msgpack.packb({"version": 9})),
        (msgpack.packb(["g"]), group_value(STABLE)[:-3]),  # truncated
        (msgpack.packb([7]), group_value(STABLE)),  # group id not a string
    ],
    ids=[
        "no-key",
        "garbage-key",
        "short-key",
        "negative-partition",
        "offset-type",
        "value-list",
        "future-version",
        "truncated",
        "key-type",
    ],
)
def test_malformed_records_are_skipped_and_counted(record):
    good = offset_record("g", ("t", 0), SIMPLE_OFFSET)
    state = load_records([good, record])
    assert state.malformed == 1 and state.offsets == {"g": {("t", 0): SIMPLE_OFFSET}}


def test_decode_chains_the_cause():
    with pytest.raises(MalformedRecord) as caught:
        decode_group_value(b"\xc1")
    assert caught.value.__cause__ is not None


@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.binary(max_size=40)),
            st.one_of(st.none(), st.binary(max_size=60)),
        )
    )
)
def test_loader_accepts_any_bytes(records):
    state = load_records(records)
    assert state.records == len(records) and 0 <= state.malformed <= len(records)


@given(st.binary(max_size=200), st.integers(0, 200))
def test_mutated_group_values_never_raise_anything_but_malformed(noise, cut):
    value = group_value(STABLE)
    damaged = value[:cut] + noise
    try:
        decode_group_value(damaged)
    except MalformedRecord:
        pass


def _compacted(log):
    """What the log cleaner leaves: the latest record of each key, in log order."""
    last = {key: i for i, (key, _) in enumerate(log)}
    return [record for i, record in enumerate(log) if last[record[0]] == i]


group_ids = st.sampled_from(["g", "h"])
log_records = st.one_of(
    st.builds(
        offset_record,
        group_ids,
        st.tuples(st.sampled_from(["t", "u"]), st.integers(0, 3)),
        st.one_of(
            st.none(),
            st.builds(CommittedOffset, st.integers(0, 99), st.just(""), st.integers(0, 9)),
        ),
    ),
    st.builds(group_record, group_ids, st.sampled_from([STABLE, EMPTY, None])),
)


@given(st.lists(log_records, max_size=30))
def test_compaction_does_not_change_what_is_loaded(log):
    full, compacted = load_records(log), load_records(_compacted(log))
    assert (full.groups, full.offsets) == (compacted.groups, compacted.offsets)
