"""The ANY_LAYOUT walk: Tidelog (§3) and Kafka v2 batches back to back, one raw tuple
shape for both (issue 35, design §3)."""

from __future__ import annotations

import struct

import crc32c
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.batch import (
    ANY_LAYOUT,
    F_ATTRIBUTES,
    F_BASE_OFFSET,
    F_BATCH_LENGTH,
    F_CRC,
    F_LAST_OFFSET_DELTA,
    F_MAGIC,
    F_MAX_TIMESTAMP,
    F_RECORD_COUNT,
    HEADER_SIZE,
    KAFKA_LAYOUT,
    LAYOUT,
    BatchWalk,
    check_crc,
    encode_batch,
    layout_of,
    tally,
)
from protocol.compression import Compression
from protocol.errors import CorruptMessage
from protocol.kafka import records as kafka
from protocol.kafka.convert import tidelog_to_kafka


def _tidelog(count: int, base: int = 0, compression: Compression = Compression.NONE) -> bytes:
    rows = [(b"k", b"v" * i, None, 1_000 + i) for i in range(count)]
    return encode_batch(rows, base_offset=base, compression=compression)


def _kafka(count: int, base: int = 0, epoch: int = 0) -> bytes:
    """The Kafka v2 batch of the same records, with this partition leader epoch."""
    return tidelog_to_kafka(_tidelog(count, base), partition_leader_epoch=epoch)[0]


def test_the_kafka_layout_is_records_own() -> None:
    assert kafka.LAYOUT is KAFKA_LAYOUT
    assert (KAFKA_LAYOUT.size, KAFKA_LAYOUT.crc_start, KAFKA_LAYOUT.offset["magic"]) == (61, 21, 16)


def test_layout_of_gives_each_magic_its_layout() -> None:
    assert layout_of(1) is LAYOUT
    assert layout_of(2) is KAFKA_LAYOUT
    with pytest.raises(CorruptMessage, match="magic 0"):
        layout_of(0)


@pytest.mark.parametrize("epoch", [0, -1, 7])
def test_a_kafka_header_reads_as_tidelogs_tuple(epoch: int) -> None:
    tidelog, batch = _tidelog(3, base=40), _kafka(3, base=40, epoch=epoch)
    ((_, t_fields),) = BatchWalk(tidelog, layout=ANY_LAYOUT)
    ((_, k_fields),) = BatchWalk(batch, layout=ANY_LAYOUT)
    assert k_fields[F_MAGIC] == 2 and t_fields[F_MAGIC] == 1
    # The header fields agree (not the length, the magic or the CRC: the records differ).
    same = [F_BASE_OFFSET, F_ATTRIBUTES, F_LAST_OFFSET_DELTA, F_MAX_TIMESTAMP]
    assert [k_fields[i] for i in same] == [t_fields[i] for i in same]
    assert k_fields[F_RECORD_COUNT] == 3
    assert k_fields[F_BATCH_LENGTH] + 12 == len(batch)
    assert ANY_LAYOUT.unpack_from(batch) == k_fields
    assert ANY_LAYOUT.unpack_from(tidelog) == t_fields
    # The CRC start layout_of gives checks the batch.
    start = layout_of(k_fields[F_MAGIC]).crc_start
    assert crc32c.crc32c(batch[start:]) == k_fields[F_CRC]


def test_a_tidelog_walk_over_tidelog_batches_is_unchanged() -> None:
    data = b"".join(_tidelog(n, base) for n, base in [(1, 0), (3, 1), (2, 4)])
    assert list(BatchWalk(data, layout=ANY_LAYOUT)) == list(BatchWalk(data))
    assert tally(data, layout=ANY_LAYOUT) == tally(data)


@given(st.lists(st.tuples(st.booleans(), st.integers(1, 5)), min_size=1, max_size=8))
def test_mixed_batches_walk_in_order(plan: list[tuple[bool, int]]) -> None:
    batches, base = [], 0
    for is_kafka, count in plan:
        batches.append(_kafka(count, base) if is_kafka else _tidelog(count, base))
        base += count
    data = b"".join(batches)
    walk = BatchWalk(data, layout=ANY_LAYOUT)
    got = list(walk)
    assert (walk.position, walk.problem) == (len(data), None)
    assert [f[F_MAGIC] for _, f in got] == [2 if k else 1 for k, _ in plan]
    assert [f[F_RECORD_COUNT] for _, f in got] == [n for _, n in plan]
    positions = [0]
    for batch in batches[:-1]:
        positions.append(positions[-1] + len(batch))
    assert [pos for pos, _ in got] == positions
    block = tally(data, layout=ANY_LAYOUT, max_batches=100)
    assert (block.records, block.end, block.priced) == (base, len(data), True)


@pytest.mark.parametrize("whole", [True, False])
def test_a_cut_kafka_batch_is_a_stop_or_a_problem(whole: bool) -> None:
    first, second = _tidelog(2), _kafka(2, base=2)
    for cut in (len(second) - 5, HEADER_SIZE + 2, HEADER_SIZE - 3):
        data = first + second[:cut]
        walk = BatchWalk(data, whole=whole, layout=ANY_LAYOUT)
        assert [pos for pos, _ in walk] == [0]
        assert walk.position == len(first)
        assert (walk.problem is not None) == whole, cut


def test_neither_magic_is_a_problem_even_when_cut_is_allowed() -> None:
    first, second = _tidelog(1), bytearray(_kafka(1, base=1))
    second[16] = 3
    walk = BatchWalk(first + bytes(second), whole=False, layout=ANY_LAYOUT)
    assert [pos for pos, _ in walk] == [0]
    assert walk.position == len(first)
    assert walk.problem == "a batch header has magic 0, expected 1 or 2"


def test_a_kafka_length_below_its_header_is_a_problem() -> None:
    batch = bytearray(_kafka(1))
    batch[8:12] = struct.pack(">i", 47)  # 59 bytes: a Tidelog header's worth, not Kafka's
    walk = BatchWalk(bytes(batch) + b"\0" * 100, whole=False, layout=ANY_LAYOUT)
    assert list(walk) == []
    assert walk.problem is not None and "minimum" in walk.problem


def test_a_compressed_kafka_batch_counts_as_compressed() -> None:
    batch = tidelog_to_kafka(_tidelog(4, compression=Compression.GZIP))[0]
    block = tally(_tidelog(1) + batch, layout=ANY_LAYOUT)
    assert (block.records, block.compressed) == (5, True)


def test_check_crc_of_tidelog_fields_is_unchanged() -> None:
    data = _tidelog(2)
    ((pos, fields),) = BatchWalk(data, layout=ANY_LAYOUT)
    assert check_crc(data, pos, fields=fields).record_count == 2
