"""The offset map: latest offset per key, fill limit, probe collisions, digest handling."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compaction import offset_map as offset_map_module
from compaction.offset_map import ENTRY_BYTES, OffsetMap, OffsetMapFull


def test_sizing_from_memory_and_load_factor():
    m = OffsetMap(ENTRY_BYTES * 100, 0.9)
    assert m.slots == 97  # largest prime <= 100
    assert m.max_entries == 87
    assert m.memory_bytes == 97 * ENTRY_BYTES
    with pytest.raises(ValueError):
        OffsetMap(ENTRY_BYTES * 2, 0.9)
    with pytest.raises(ValueError):
        OffsetMap(ENTRY_BYTES * 100, 0.0)


def test_put_get_latest_wins():
    m = OffsetMap(ENTRY_BYTES * 1000, 0.9)
    m.put(b"a", 5)
    m.put(b"b", 6)
    m.put(b"a", 9)
    assert m.get(b"a") == 9
    assert m.get(b"b") == 6
    assert m.get(b"c") == -1
    assert m.get(b"") == -1
    m.put(b"", 3)  # the empty key is a key like any other
    assert m.get(b"") == 3
    assert m.size == 3


def test_repeated_digests_in_one_call_keep_the_largest_offset():
    m = OffsetMap(ENTRY_BYTES * 1000, 0.9)
    d = m.digest_keys([b"k", b"k", b"j", b"k"])
    assert m.put_digests(d, np.array([4, 9, 1, 7])) == 2
    assert m.get(b"k") == 9
    assert m.get(b"j") == 1


def test_fill_limit_refuses_without_changing_anything():
    m = OffsetMap(ENTRY_BYTES * 11, 0.5)  # 11 slots, 5 entries
    assert m.max_entries == 5
    keys = [b"k%d" % i for i in range(5)]
    m.put_digests(m.digest_keys(keys), np.arange(5))
    assert m.free_entries == 0
    # Updating existing keys is fine even when full.
    m.put_digests(m.digest_keys(keys[:2]), np.array([10, 11]))
    assert m.get(b"k0") == 10
    with pytest.raises(OffsetMapFull):
        m.put_digests(m.digest_keys([b"new", b"k1"]), np.array([20, 21]))
    assert m.get(b"k1") == 11
    assert m.get(b"new") == -1
    assert m.size == 5


def test_full_load_factor_still_terminates():
    m = OffsetMap(ENTRY_BYTES * 7, 1.0)
    assert m.max_entries == m.slots - 1
    keys = [bytes([i]) for i in range(m.max_entries)]
    m.put_digests(m.digest_keys(keys), np.arange(len(keys)))
    assert [m.get(k) for k in keys] == list(range(len(keys)))
    assert m.get(b"absent") == -1  # probes until the one empty slot


def test_probe_collisions_keep_every_key():
    """Digests that start on the same slot and share a step are still told apart."""
    m = OffsetMap(ENTRY_BYTES * 13, 0.9)
    slots = np.uint64(m.slots)
    # Hand-made digests: same start slot (hi % slots) and same step, different words.
    hi = np.array([5, 5 + 13, 5 + 26, 5 + 39], dtype=np.uint64)
    lo = np.array([1, 1 + 2 * 12, 1 + 4 * 12, 1 + 6 * 12], dtype=np.uint64)
    assert len(set((hi % slots).tolist())) == 1
    assert len(set((lo % (slots - np.uint64(1))).tolist())) == 1
    digests = np.stack([hi, lo], axis=1)
    assert m.put_digests(digests, np.array([10, 20, 30, 40])) == 4
    assert m.get_digests(digests).tolist() == [10, 20, 30, 40]
    m.put_digests(digests[2:3], np.array([99]))
    assert m.get_digests(digests).tolist() == [10, 20, 99, 40]
    other = np.array([[5 + 52, 1 + 8 * 12]], dtype=np.uint64)
    assert m.get_digests(other).tolist() == [-1]


def test_digest_never_looks_empty_and_depends_on_salt():
    a = OffsetMap(ENTRY_BYTES * 10, 0.9, salt=b"1" * 16)
    b = OffsetMap(ENTRY_BYTES * 10, 0.9, salt=b"2" * 16)
    da, db = a.digest_keys([b"x", b""]), b.digest_keys([b"x", b""])
    assert (da[:, 1] & np.uint64(1)).all()
    assert not np.array_equal(da, db)
    assert da.shape == (2, 2)


def test_clear_forgets_everything():
    m = OffsetMap(ENTRY_BYTES * 100, 0.9)
    m.put(b"a", 1)
    m.latest_offset = 7
    m.clear()
    assert (m.size, m.latest_offset, m.get(b"a")) == (0, -1, -1)


@settings(max_examples=40, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.binary(max_size=4), st.integers(min_value=0, max_value=10**12)),
        max_size=120,
    ),
    chunk=st.integers(min_value=1, max_value=40),
)
def test_matches_a_dict_model(ops, chunk):
    m = OffsetMap(ENTRY_BYTES * 400, 0.9)
    model: dict[bytes, int] = {}
    for i in range(0, len(ops), chunk):
        part = ops[i : i + chunk]
        keys = [k for k, _ in part]
        offsets = np.array([o for _, o in part], dtype=np.int64)
        m.put_digests(m.digest_keys(keys), offsets)
        for k, o in part:
            model[k] = max(model.get(k, -1), o)
    assert m.size == len(model)
    probe = [*model, b"never-put-key"]
    got = m.get_digests(m.digest_keys(probe)).tolist()
    assert got == [*model.values(), -1]


def test_take_sorted_offsets_gives_every_latest_offset_then_refuses_lookups():
    m = OffsetMap(ENTRY_BYTES * 100, 0.9)
    for key, offset in [(b"a", 7), (b"b", 0), (b"a", 9), (b"c", 3)]:
        m.put(key, offset)
    slots, memory = m.slots, m.memory_bytes
    taken = m.take_sorted_offsets()
    # Offset 0 is a real entry, not mistaken for an empty slot; a's older offset is gone.
    assert taken.tolist() == [0, 3, 9]
    assert (m.size, m.slots, m.memory_bytes) == (3, slots, memory)
    with pytest.raises(RuntimeError):
        m.get(b"a")
    with pytest.raises(RuntimeError):
        m.put(b"d", 1)
    m.clear()
    m.put(b"d", 1)
    assert (m.get(b"d"), m.get(b"a"), m.size) == (1, -1, 1)


def test_take_sorted_offsets_of_an_empty_map():
    m = OffsetMap(ENTRY_BYTES * 10, 0.9)
    assert m.take_sorted_offsets().tolist() == []


@settings(max_examples=30, deadline=None)
@given(
    ops=st.lists(
        st.tuples(st.binary(max_size=3), st.integers(min_value=0, max_value=10**12)),
        max_size=150,
    )
)
def test_take_sorted_offsets_matches_a_dict_model(ops):
    m = OffsetMap(ENTRY_BYTES * 400, 0.9)
    model: dict[bytes, int] = {}
    for key, offset in ops:
        model[key] = max(model.get(key, -1), offset)
    if ops:
        keys = [k for k, _ in ops]
        m.put_digests(m.digest_keys(keys), np.array([o for _, o in ops], dtype=np.int64))
    assert m.take_sorted_offsets().tolist() == sorted(model.values())


def test_take_sorted_offsets_scans_in_spans(monkeypatch):
    monkeypatch.setattr(offset_map_module, "_SCAN_SLOTS", 7)
    m = OffsetMap(ENTRY_BYTES * 200, 0.9)
    keys = [b"key-%d" % i for i in range(150)]
    offsets = np.arange(1000, 1150, dtype=np.int64)[::-1].copy()
    m.put_digests(m.digest_keys(keys), offsets)
    assert m.take_sorted_offsets().tolist() == list(range(1000, 1150))
