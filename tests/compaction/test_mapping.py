"""Building the offset map: first dirty offset, segment ends, staging and the fill limit."""

from __future__ import annotations

import pytest

from compaction import mapping as mapping_module
from compaction.keys import decode_keys
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


def test_records_from_the_key_decoder_map_like_full_records():
    """The cleaner feeds `decode_keys` records; the map must come out the same."""
    batches = [(0, [b"a", b"b", None, b"a"]), (4, [b"c", b"a"]), (6, [None, b"b"])]
    full, keys_only = OffsetMap(ENTRY_BYTES * 50, 0.9), OffsetMap(ENTRY_BYTES * 50, 0.9)
    by_batch, by_records = MapBuilder(full, 1), MapBuilder(keys_only, 1)
    for base, keys in batches:
        header, records = batch(base, keys)
        data = bytearray(encode_batch([(k, b"v", None, 1000) for k in keys]))
        set_base_offset(data, 0, base)
        assert by_batch.add_batch(header, records)
        records = decode_keys(
            bytes(data),
            compression=header.compression,
            base_offset=base,
            max_decompressed=1 << 20,
        )
        assert by_records.add_records(base, header.last_offset, records)
    by_batch.finish()
    by_records.finish()
    probe = [b"a", b"b", b"c", b"x"]
    assert [full.get(k) for k in probe] == [keys_only.get(k) for k in probe] == [5, 7, 4, -1]
    assert by_batch.records_mapped == by_records.records_mapped == 7
    assert by_batch.end_offset == by_records.end_offset == 8


def test_flush_in_steps_maps_every_staged_key(monkeypatch):
    monkeypatch.setattr(mapping_module, "FLUSH_CHUNK_KEYS", 3)
    m = OffsetMap(ENTRY_BYTES * 100, 0.9)
    builder = MapBuilder(m, first_dirty_offset=0)
    keys = [b"k%d" % i for i in range(10)]
    assert builder.add_batch(*batch(0, keys))
    assert builder.add_batch(*batch(10, keys[::2]))
    builder.finish()
    expected = [10 + i // 2 if i % 2 == 0 else i for i in range(10)]
    assert [m.get(k) for k in keys] == expected
    assert m.size == 10
