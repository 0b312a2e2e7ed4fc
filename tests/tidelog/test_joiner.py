"""ChunkJoiner: a request's batches joined per partition in one reused buffer."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tidelog.joiner import _KEEP_BYTES, ChunkJoiner

_TOPICS = st.dictionaries(
    st.sampled_from(["a", "b", "c"]),
    st.dictionaries(
        st.integers(0, 5), st.lists(st.binary(max_size=3000), min_size=1, max_size=5), min_size=1
    ),
    min_size=1,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(_TOPICS, min_size=1, max_size=4))
def test_each_partition_gets_its_chunks_concatenated_in_order(requests: list[dict]) -> None:
    joiner = ChunkJoiner()  # one joiner across requests, as in a producer
    for topics in requests:
        with joiner.join(topics) as joined:
            got = {t: {p: bytes(data) for p, data in parts} for t, parts in joined}
        assert got == {t: {p: b"".join(c) for p, c in ps.items()} for t, ps in topics.items()}
        assert [t for t, _ in joined] == list(topics)


def test_a_single_chunk_is_passed_through_and_the_buffer_is_reused() -> None:
    joiner = ChunkJoiner()
    only = bytearray(b"x" * 100)
    with joiner.join({"t": {0: [only], 1: [b"a" * 5000, b"b" * 5000]}}) as joined:
        assert joined[0][1][0][1] is only
    kept = joiner._buffer
    with joiner.join({"t": {1: [b"c" * 4000, b"d" * 4000]}}) as joined:
        assert bytes(joined[0][1][0][1]) == b"c" * 4000 + b"d" * 4000
    assert joiner._buffer is kept and len(kept) == 10_000


def test_views_end_with_the_request_and_a_huge_buffer_is_dropped() -> None:
    joiner = ChunkJoiner()
    with joiner.join({"t": {0: [b"a" * _KEEP_BYTES, b"b"]}}) as joined:
        view = joined[0][1][0][1]
    with pytest.raises(ValueError):
        bytes(view)  # released: nothing can read the buffer after the request
    assert len(joiner._buffer) == 0
