"""Grouping limits: segment.bytes, segment.index.bytes (both indexes) and offset span."""

from __future__ import annotations

from compaction.grouping import (
    MAX_RELATIVE_OFFSET,
    GroupableSegment,
    group_segments,
    index_bytes_estimate,
)


def seg(base, nxt, size=100, oi=8, ti=12):
    return GroupableSegment(base, nxt, size, oi, ti)


def bases(groups):
    return [[s.base_offset for s in g] for g in groups]


def test_log_size_limit_inclusive():
    segments = [seg(0, 10), seg(10, 20), seg(20, 30), seg(30, 40)]
    assert bases(group_segments(segments, max_segment_bytes=200, max_index_bytes=10**6)) == [
        [0, 10],
        [20, 30],
    ]
    assert bases(group_segments(segments, max_segment_bytes=199, max_index_bytes=10**6)) == [
        [0],
        [10],
        [20],
        [30],
    ]


def test_oversized_segment_is_a_group_of_one():
    segments = [seg(0, 10, size=500), seg(10, 20)]
    assert bases(group_segments(segments, max_segment_bytes=200, max_index_bytes=10**6)) == [
        [0],
        [10],
    ]


def test_offset_index_limit():
    segments = [seg(0, 10, oi=40, ti=0), seg(10, 20, oi=40, ti=0), seg(20, 30, oi=40, ti=0)]
    got = group_segments(segments, max_segment_bytes=10**9, max_index_bytes=80)
    assert bases(got) == [[0, 10], [20]]


def test_time_index_limit():
    segments = [seg(0, 10, oi=0, ti=60), seg(10, 20, oi=0, ti=60)]
    got = group_segments(segments, max_segment_bytes=10**9, max_index_bytes=119)
    assert bases(got) == [[0], [10]]
    got = group_segments(segments, max_segment_bytes=10**9, max_index_bytes=120)
    assert bases(got) == [[0, 10]]


def test_relative_offset_limit():
    segments = [seg(0, 10), seg(10, MAX_RELATIVE_OFFSET + 1), seg(MAX_RELATIVE_OFFSET + 1, 2**32)]
    got = group_segments(segments, max_segment_bytes=10**9, max_index_bytes=10**9)
    assert bases(got) == [[0, 10], [MAX_RELATIVE_OFFSET + 1]]


def test_empty_input():
    assert group_segments([], max_segment_bytes=1, max_index_bytes=1) == []


def test_index_estimate():
    assert index_bytes_estimate(0, 4096) == (0, 0)
    assert index_bytes_estimate(4096, 4096) == (16, 24)
    assert index_bytes_estimate(100, 0) == (808, 1212)
