"""Building the offset map: first dirty offset, segment ends, staging and the fill limit."""

from __future__ import annotations

import pytest

from compaction.mapping import MapBuilder, OffsetMapTooSmall
from compaction.offset_map import ENTRY_BYTES, OffsetMap
from protocol.batch import decode_payload, encode_batch, read_header, set_base_offset


def batch(base_offset, keys):
    data = bytearray(encode_batch([(k, b"v", None, 1000) for k in keys]))
    set_base_offset(data, 0, base_offset)
    header = read_header(data)
    return header, decode_payload(bytes(data), header=header)[1]


def test_latest_offsets_and_range_end():
    m = OffsetMap(ENTRY_BYTES * 100, 0.9)
    builder = MapBuilder(m, first_dirty_offset=0)
    assert builder.end_offset == 0
    assert builder.add_batch(*batch(0, [b"a", b"b", b"a"]))
    assert builder.end_offset == 3
    builder.end_segment(10)  # a gap after a cleaned segment is covered
    assert builder.end_offset == 10
    assert builder.add_batch(*batch(10, [b"b", None]))
    builder.finish()
    assert (m.get(b"a"), m.get(b"b")) == (2, 10)
    assert m.size == 2  # the unkeyed record is not mapped
    assert builder.records_mapped == 5


def test_records_below_first_dirty_offset_are_not_mapped():
    m = OffsetMap(ENTRY_BYTES * 100, 0.9)
    builder = MapBuilder(m, first_dirty_offset=5)
    assert builder.add_batch(*batch(0, [b"x", b"y"]))  # entirely clean: skipped
    assert builder.end_offset == 5
    assert builder.add_batch(*batch(4, [b"z", b"w"]))  # straddles: only offset 5
    builder.finish()
    assert (m.get(b"z"), m.get(b"w"), m.get(b"x")) == (-1, 5, -1)
    assert builder.end_offset == 6


def test_stops_before_the_batch_that_does_not_fit():
    m = OffsetMap(ENTRY_BYTES * 5, 1.0)  # 5 slots, 4 entries
    assert m.max_entries == 4
    builder = MapBuilder(m, first_dirty_offset=0)
    assert builder.add_batch(*batch(0, [b"a", b"b", b"c"]))
    # Known keys still fit although the batch is larger than the free space.
    assert builder.add_batch(*batch(3, [b"a", b"b", b"c", b"a"]))
    assert builder.add_batch(*batch(7, [b"d", b"a"]))
    assert not builder.add_batch(*batch(9, [b"e", b"a"]))
    builder.finish()
    assert builder.end_offset == 9
    assert m.get(b"e") == -1
    assert m.get(b"a") == 8


def test_a_map_too_small_for_the_first_batch():
    m = OffsetMap(ENTRY_BYTES * 3, 1.0)  # 2 entries
    builder = MapBuilder(m, first_dirty_offset=0)
    with pytest.raises(OffsetMapTooSmall):
        builder.add_batch(*batch(0, [b"a", b"b", b"c"]))
