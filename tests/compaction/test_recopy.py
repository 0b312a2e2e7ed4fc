"""Recopy rules for one batch: duplicates, tombstones and their horizon, unkeyed and
empty batches, and what a rewritten batch keeps; the decision by surviving offsets
agrees with the decision by key."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction.recopy import UNKEYED, recopy_batch, recopy_survivors
from protocol.batch import (
    DELETE_HORIZON_MASK,
    Compression,
    TimestampType,
    build_batch,
    decode_payload,
    decode_records,
    encode_batch,
    read_header,
    set_base_offset,
    validate_batch,
)

NOW_MS = 5_000_000
RETENTION_MS = 1000


def make_batch(
    rows,
    *,
    base_offset=100,
    compression=Compression.NONE,
    timestamp_type=TimestampType.CREATE_TIME,
    producer=(-1, -1, -1),
):
    """rows: (key, value) pairs; timestamps 1000, 1001, ..."""
    data = bytearray(
        encode_batch(
            [(k, v, [("h", b"x")], 1000 + i) for i, (k, v) in enumerate(rows)],
            compression=compression,
            timestamp_type=timestamp_type,
            producer_id=producer[0],
            producer_epoch=producer[1],
            base_sequence=producer[2],
            now_ms=NOW_MS,
        )
    )
    set_base_offset(data, 0, base_offset)
    return bytes(data)


def run(batch, latest, *, map_end=10**9, now_ms=NOW_MS):
    """Recopy with `latest` completed as the cleaner does: unmapped keys -1, None UNKEYED."""
    header = read_header(batch)
    _, records = decode_payload(batch, header=header)
    latest = {**{r[2]: -1 for r in records}, None: UNKEYED, **latest}
    return recopy_batch(
        batch,
        header,
        records,
        latest,
        map_end_offset=map_end,
        now_ms=now_ms,
        delete_retention_ms=RETENTION_MS,
    )


def kept(outcome):
    return [(r.offset, r.key, r.value) for r in decode_records(outcome.data)]


def test_all_latest_copied_verbatim():
    batch = make_batch([(b"a", b"1"), (b"b", b"2")])
    out = run(batch, {b"a": 100, b"b": 101})
    assert out.data == batch
    assert (out.records_kept, out.records_removed, out.rewritten) == (2, 0, False)


def test_keys_absent_from_map_are_kept():
    batch = make_batch([(b"a", b"1")])
    assert run(batch, {}).data == batch


def test_duplicates_dropped_offsets_and_identity_kept():
    batch = make_batch(
        [(b"a", b"1"), (b"b", b"2"), (b"a", b"3"), (b"c", b"4")],
        compression=Compression.ZSTD,
        producer=(7, 2, 40),
    )
    out = run(batch, {b"a": 102, b"b": 500, b"c": 103})
    assert kept(out) == [(102, b"a", b"3"), (103, b"c", b"4")]
    old, new = read_header(batch), read_header(out.data)
    validate_batch(out.data)
    assert new.base_offset == old.base_offset == 100
    assert new.last_offset_delta == old.last_offset_delta == 3
    assert new.compression == Compression.ZSTD
    assert (new.producer_id, new.producer_epoch, new.base_sequence) == (7, 2, 40)
    assert new.record_count == 2
    assert new.base_timestamp == 1002  # the first surviving record's timestamp
    assert new.max_timestamp == 1003
    assert [r.timestamp for r in decode_records(out.data)] == [1002, 1003]
    assert decode_records(out.data)[0].headers == (("h", b"x"),)


def test_last_record_removed_keeps_last_offset_delta():
    batch = make_batch([(b"a", b"1"), (b"b", b"2")])
    out = run(batch, {b"a": 100, b"b": 900})
    assert kept(out) == [(100, b"a", b"1")]
    assert read_header(out.data).last_offset == 101


def test_nothing_survives_batch_dropped():
    batch = make_batch([(b"a", b"1"), (b"a", b"2")])
    out = run(batch, {b"a": 200})
    assert out.data is None
    assert (out.records_kept, out.records_removed) == (0, 2)


def test_unkeyed_records_dropped_inside_mapped_range():
    batch = make_batch([(None, b"1"), (b"a", b"2")])
    out = run(batch, {})
    assert kept(out) == [(101, b"a", b"2")]


def test_records_past_the_mapped_range_are_kept_even_unkeyed():
    batch = make_batch([(b"a", b"1"), (None, b"2"), (b"a", b"3")])
    out = run(batch, {b"a": 102}, map_end=101)
    assert kept(out) == [(101, None, b"2"), (102, b"a", b"3")]


def test_first_kept_tombstone_gets_the_delete_horizon():
    batch = make_batch([(b"a", None), (b"b", b"2")])
    out = run(batch, {b"a": 100, b"b": 101})
    assert out.rewritten
    header = read_header(out.data)
    assert header.has_delete_horizon
    assert header.base_timestamp == NOW_MS + RETENTION_MS
    validate_batch(out.data)
    records = decode_records(out.data)
    assert [(r.offset, r.timestamp, r.value) for r in records] == [
        (100, 1000, None),
        (101, 1001, b"2"),
    ]
    assert header.max_timestamp == 1001


@pytest.mark.parametrize(
    ("now_ms", "survives"),
    [
        pytest.param(NOW_MS + RETENTION_MS - 1, True, id="before-horizon"),
        pytest.param(NOW_MS + RETENTION_MS, False, id="at-horizon"),
        pytest.param(NOW_MS + RETENTION_MS + 1, False, id="after-horizon"),
    ],
)
def test_tombstone_dropped_once_horizon_passed(now_ms, survives):
    first = run(make_batch([(b"a", None), (b"b", b"2")]), {})
    second = run(first.data, {}, now_ms=now_ms)
    if survives:
        assert second.data == first.data  # horizon already set: verbatim
    else:
        assert kept(second) == [(101, b"b", b"2")]
        header = read_header(second.data)
        # No tombstone left: the rebuilt batch keeps bit 6 and its base timestamp.
        assert header.attributes & DELETE_HORIZON_MASK
        validate_batch(second.data)


def test_tombstone_superseded_by_later_value_is_dropped():
    out = run(make_batch([(b"a", None)]), {b"a": 150})
    assert out.data is None


def test_log_append_time_keeps_type_and_max_timestamp():
    batch = bytearray(
        make_batch([(b"a", b"1"), (b"a", b"2")], timestamp_type=TimestampType.LOG_APPEND_TIME)
    )
    out = run(bytes(batch), {b"a": 101})
    header = read_header(out.data)
    assert header.timestamp_type == TimestampType.LOG_APPEND_TIME
    assert header.max_timestamp == read_header(batch).max_timestamp


def test_empty_batch_dropped():
    empty = build_batch([], base_offset=50, base_timestamp=0, attributes=0, last_offset_delta=3)
    out = run(empty, {})
    assert out.data is None
    assert (out.records_kept, out.records_removed) == (0, 0)


def test_gapped_batch_from_an_earlier_cleaning():
    first = run(make_batch([(b"a", b"1"), (b"b", b"2"), (b"c", b"3")]), {b"a": 999})
    assert kept(first) == [(101, b"b", b"2"), (102, b"c", b"3")]
    second = run(first.data, {b"b": 101, b"c": 999})
    assert kept(second) == [(101, b"b", b"2")]
    assert read_header(second.data).last_offset == 102


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.tuples(st.sampled_from([b"a", b"b", b"c", None]), st.sampled_from([b"v", None])),
        max_size=12,
    ),
    later=st.sets(st.sampled_from([b"a", b"b", b"c"])),
    end_delta=st.integers(min_value=0, max_value=14),
    tombstones_seen=st.sampled_from([None, NOW_MS - 1, NOW_MS + 1]),
)
def test_survivors_by_offset_agree_with_lookups_by_key(rows, later, end_delta, tombstones_seen):
    """What the cleaner does past the first dirty offset (`recopy_survivors`, from the map's
    offsets) decides exactly as the key lookups of `recopy_batch` for a mapped batch."""
    base = 100
    if rows:
        batch = make_batch(rows, base_offset=base)
    else:
        batch = build_batch([], base_offset=base, base_timestamp=0, attributes=0)
    if tombstones_seen is not None:  # a batch kept before: horizon set at `tombstones_seen`
        batch = run(batch, {}, now_ms=tombstones_seen - RETENTION_MS).data or batch
    header = read_header(batch)
    _, records = decode_payload(batch, header=header)
    map_end = base + end_delta
    # The map as the builder leaves it: each key's last record below the end, unless the
    # key has a later record past this batch (still below the end).
    latest = {}
    for delta, _, key, _, _ in records:
        if key is not None and base + delta < map_end:
            latest[key] = base + delta
    for key in later & set(latest):
        if map_end > header.next_offset:
            latest[key] = map_end - 1
    surviving = frozenset(o for o in latest.values() if o <= header.last_offset)
    by_key = run(batch, latest, map_end=map_end)
    by_offset = recopy_survivors(
        batch,
        header,
        records,
        surviving,
        map_end_offset=map_end,
        now_ms=NOW_MS,
        delete_retention_ms=RETENTION_MS,
    )
    assert by_offset == by_key
