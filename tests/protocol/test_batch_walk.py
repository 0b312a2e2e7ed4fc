"""The one batch walker and the layout its offsets come from (issue 18, item 2)."""

from __future__ import annotations

import struct

import pytest

from protocol.batch import (
    BATCH_LENGTH_OFFSET,
    CRC_OFFSET,
    CRC_START,
    F_BASE_OFFSET,
    F_RECORD_COUNT,
    HEADER_SIZE,
    LAYOUT,
    LOG_OVERHEAD,
    MAGIC_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    UNPRICED_NS,
    BatchLayout,
    BatchWalk,
    encode_batch,
    read_header,
    tally,
)
from protocol.compression import Compression
from protocol.kafka import records as kafka
from protocol.kafka.convert import conversion_cost_ns, tidelog_to_kafka_all


def _batches(counts: list[int]) -> list[bytes]:
    out, base = [], 0
    for count in counts:
        rows = [(b"k", b"v" * i, None, 1_000 + i) for i in range(count)]
        out.append(encode_batch(rows, base_offset=base))
        base += count
    return out


def test_offsets_are_derived_from_the_format() -> None:
    assert (BATCH_LENGTH_OFFSET, MAGIC_OFFSET, CRC_OFFSET, CRC_START) == (8, 12, 13, 17)
    assert (MAX_TIMESTAMP_OFFSET, LAYOUT.offset["record_count"]) == (31, 53)
    assert (LOG_OVERHEAD, HEADER_SIZE, LAYOUT.min_batch_length) == (12, 57, 45)


def test_a_layout_whose_names_do_not_match_its_format_is_refused() -> None:
    with pytest.raises(ValueError, match="2 fields, 1 named"):
        BatchLayout(">qi", ("base_offset",), magic=1, crc_from="base_offset")


def test_walk_yields_every_batch_with_its_fields() -> None:
    batches = _batches([1, 3, 2])
    data = b"".join(batches)
    walk = BatchWalk(data)
    got = list(walk)
    assert [pos for pos, _ in got] == [0, len(batches[0]), len(batches[0]) + len(batches[1])]
    assert [f[F_RECORD_COUNT] for _, f in got] == [1, 3, 2]
    assert [f[F_BASE_OFFSET] for _, f in got] == [0, 1, 4]
    assert (walk.position, walk.problem) == (len(data), None)


@pytest.mark.parametrize("whole", [True, False])
def test_a_cut_batch_is_a_stop_or_a_problem(whole: bool) -> None:
    batches = _batches([2, 2])
    data = b"".join(batches)[:-5]
    walk = BatchWalk(data, whole=whole)
    assert [pos for pos, _ in walk] == [0]
    assert walk.position == len(batches[0])
    assert (walk.problem is not None) == whole
    short = BatchWalk(b"".join(batches) + b"\0" * 10, whole=whole)
    assert len(list(short)) == 2
    assert (short.problem == "a batch header is cut by the end of the bytes") == whole


@pytest.mark.parametrize(
    ("at", "value", "words"),
    [(MAGIC_OFFSET, b"\x07", "magic 7"), (BATCH_LENGTH_OFFSET, struct.pack(">i", 3), "minimum")],
)
def test_an_impossible_header_is_a_problem_even_when_cut_is_allowed(
    at: int, value: bytes, words: str
) -> None:
    batches = _batches([1, 1, 1])
    data = bytearray(b"".join(batches))
    second = len(batches[0])
    data[second + at : second + at + len(value)] = value
    walk = BatchWalk(data, whole=False)
    assert [pos for pos, _ in walk] == [0]
    assert walk.position == second
    assert walk.problem is not None and words in walk.problem


def test_the_walk_respects_start_and_end() -> None:
    batches = _batches([1, 2, 3])
    data = b"".join(batches)
    first = len(batches[0])
    walk = BatchWalk(data, first, first + len(batches[1]))
    assert [pos for pos, _ in walk] == [first]
    assert (walk.position, walk.problem) == (first + len(batches[1]), None)


def test_a_second_layout_is_chosen_at_the_walker() -> None:
    """Kafka's RecordBatch v2 walks with the same code, given its layout."""
    batches = _batches([2, 1, 4])
    kafka_bytes = tidelog_to_kafka_all(b"".join(batches))
    kafka_layout = kafka.LAYOUT
    assert kafka_layout.crc_start == kafka.CRC_START == 21
    assert kafka_layout.offset["record_count"] == LAYOUT.offset["record_count"] + 4
    walk = BatchWalk(kafka_bytes, layout=kafka_layout)
    got = list(walk)
    assert [f[kafka_layout.index["record_count"]] for _, f in got] == [2, 1, 4]
    assert [f[kafka_layout.index["base_offset"]] for _, f in got] == [0, 2, 3]
    assert (walk.position, walk.problem) == (len(kafka_bytes), None)
    # The Tidelog layout sees magic 2 where it expects its own: not a batch of its kind.
    tidelog_walk = BatchWalk(kafka_bytes)
    assert list(tidelog_walk) == [] and tidelog_walk.problem is not None


def test_fields_match_read_header() -> None:
    batch = _batches([5])[0]
    ((_, fields),) = list(BatchWalk(batch))
    header = read_header(batch)
    assert fields[LAYOUT.index["max_timestamp"]] == header.max_timestamp == 1_004


def test_both_layouts_are_declared_once_and_share_a_tail() -> None:
    assert LAYOUT.header.format == ">qibIhiqqqhii"
    assert kafka.LAYOUT.header.format == ">qiibIhiqqqhii"
    assert kafka.LAYOUT.fields_from("attributes") == LAYOUT.fields_from("attributes")
    assert (kafka.MAGIC_OFFSET, kafka.CRC_OFFSET, kafka.CRC_START) == (16, 17, 21)
    assert kafka.LAYOUT.head_before("crc").format == ">qiib"


def test_a_tally_counts_records_and_stops_at_its_batch_limit() -> None:
    data = b"".join(_batches([2, 3, 4]))
    block = tally(data)
    assert (block.records, block.compressed, block.priced, block.problem) == (9, False, True, None)
    assert [pos for pos, _ in block.headers] == [0, len(_batches([2])[0]), block.headers[2][0]]
    assert block.end == len(data)
    capped = tally(data, max_batches=2)
    assert (capped.records, capped.priced, capped.end) == (5, False, block.headers[2][0])
    zstd = encode_batch([(b"k", b"v", None, 1)], compression=Compression.ZSTD)
    assert tally(data + zstd).compressed


def test_a_conversion_driven_by_a_capped_tally_converts_everything() -> None:
    data = b"".join(_batches([1, 2, 3, 4, 5]))
    whole = tidelog_to_kafka_all(data)
    assert tidelog_to_kafka_all(data, tally(data, max_batches=2)) == whole
    assert tidelog_to_kafka_all(data, tally(data)) == whole
    assert conversion_cost_ns(tally(data, max_batches=2)) == UNPRICED_NS
    assert conversion_cost_ns(tally(data)) < conversion_cost_ns(tally(data * 2))
