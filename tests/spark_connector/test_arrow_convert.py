"""Fetched batches -> Arrow: exact schema, trimming to the range, gaps, headers, time types."""

from __future__ import annotations

import pyarrow as pa
import pytest

from compaction.layouts import header_of
from compaction.recopy import emptied
from protocol.batch import (
    KAFKA_MAGIC_OFFSET,
    MAGIC_OFFSET,
    Compression,
    TimestampType,
    build_batch,
    encode_batch,
    set_base_offset,
)
from protocol.kafka.convert import tidelog_to_kafka
from spark_connector.arrow_convert import (
    Selection,
    empty_batch,
    records_to_arrow,
    select_batches,
    selection_to_arrow,
    split_selection,
)
from spark_connector.schema import arrow_schema


def stored(base_offset: int, records: list[tuple], **kw: object) -> bytes:
    buf = bytearray(encode_batch(records, **kw))
    set_base_offset(buf, 0, base_offset)
    return bytes(buf)


def log_of(batches: int, per_batch: int) -> bytes:
    return b"".join(
        stored(
            b * per_batch,
            [
                (b"k%d" % i, b"v%d" % (b * per_batch + i), [], 1000 + b * per_batch + i)
                for i in range(per_batch)
            ],
        )
        for b in range(batches)
    )


def test_rows_are_trimmed_to_the_exact_range_across_batches() -> None:
    out = records_to_arrow(
        log_of(3, 4), topic="t", partition=2, start=2, end=10, include_headers=False
    )
    assert out.batch is not None and out.batch.schema == arrow_schema(False)
    assert out.batch.column("offset").to_pylist() == list(range(2, 10))
    assert out.batch.column("value").to_pylist() == [b"v%d" % i for i in range(2, 10)]
    assert set(out.batch.column("partition").to_pylist()) == {2}
    assert set(out.batch.column("topic").to_pylist()) == {"t"}
    assert out.next_offset == 10 and out.rows == 8 and out.last_row_offset == 9


def test_timestamps_are_utc_microseconds_and_types_follow_the_batch() -> None:
    buf = stored(0, [(None, b"a", [], 1_700_000_000_123)]) + stored(
        1, [(None, b"b", [], 5)], timestamp_type=TimestampType.LOG_APPEND_TIME
    )
    out = records_to_arrow(buf, topic="t", partition=0, start=0, end=2, include_headers=False)
    assert out.batch is not None
    ts = out.batch.column("timestamp")
    assert ts.type == pa.timestamp("us", tz="UTC")
    assert ts.cast(pa.int64()).to_pylist() == [1_700_000_000_123_000, 5_000]
    assert out.batch.column("timestampType").to_pylist() == [0, 1]
    assert out.batch.column("key").to_pylist() == [None, None]


def test_headers_are_null_when_a_record_has_none() -> None:
    buf = stored(0, [(b"k", b"v", [("a", b"1"), ("b", None)], 1), (b"k", None, [], 2)])
    out = records_to_arrow(buf, topic="t", partition=0, start=0, end=5, include_headers=True)
    assert out.batch is not None and out.batch.schema == arrow_schema(True)
    assert out.batch.column("headers").to_pylist() == [
        [{"key": "a", "value": b"1"}, {"key": "b", "value": None}],
        None,
    ]
    assert out.batch.column("value").to_pylist() == [b"v", None]
    assert out.next_offset == 2  # the log ends before `end`


def test_offset_gaps_after_compaction_use_the_deltas() -> None:
    compacted = build_batch(
        [(1, 11, b"a", b"x", []), (4, 14, b"b", b"y", [])],
        base_offset=10,
        base_timestamp=10,
        attributes=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
    )
    out = records_to_arrow(
        compacted, topic="t", partition=0, start=12, end=20, include_headers=False
    )
    assert out.batch is not None
    assert out.batch.column("offset").to_pylist() == [14]
    assert out.next_offset == 15
    nothing = records_to_arrow(
        compacted, topic="t", partition=0, start=10, end=11, include_headers=False
    )
    assert nothing.batch is None and nothing.next_offset == 11


def test_a_trailing_partial_batch_is_left_for_the_next_fetch() -> None:
    whole = log_of(2, 3)
    out = records_to_arrow(
        whole[:-7], topic="t", partition=0, start=0, end=100, include_headers=False
    )
    assert out.batch is not None and out.batch.num_rows == 3 and out.next_offset == 3


@pytest.mark.parametrize("include_headers", [False, True])
def test_empty_batch_has_the_exact_schema(include_headers: bool) -> None:
    assert empty_batch(include_headers).schema == arrow_schema(include_headers)


def test_a_selection_converts_the_same_in_chunks_as_whole() -> None:
    buf = log_of(6, 50)
    selection = select_batches(buf, 30, 280)
    assert selection.next_offset == 280
    sizes = [header.size for _, header in selection.batches]
    assert 3 * min(sizes) > 2 * max(sizes)
    chunks = split_selection(selection, chunk_bytes=2 * max(sizes))
    assert [len(c.batches) for c in chunks] == [2, 2, 2]
    assert [b for c in chunks for b in c.batches] == list(selection.batches)
    assert len(split_selection(selection, chunk_bytes=1)) == 6  # a bigger batch goes alone

    def rows(sel: Selection) -> list[dict]:
        out = selection_to_arrow(buf, sel, topic="t", partition=0, include_headers=False)
        return out.batch.to_pylist() if out.batch is not None else []

    whole = rows(selection)
    assert [r["offset"] for r in whole] == list(range(30, 280))
    assert [r for c in chunks for r in rows(c)] == whole


@pytest.mark.parametrize("compression", list(Compression))
@pytest.mark.parametrize("include_headers", [False, True])
def test_a_view_of_a_reused_buffer_converts_as_bytes_and_is_not_kept(
    compression: Compression, include_headers: bool
) -> None:
    """What the task's connection hands over: records in a buffer the next answer reuses."""
    records = [
        (b"k%d" % i, None if i % 5 == 0 else b"v" * (i % 40), [("h", b"x")] if i % 3 else [], 7 + i)
        for i in range(300)
    ]
    data = stored(100, records[:150], compression=compression) + stored(
        250, records[150:], compression=compression
    )
    buffer = bytearray(data)
    expected = records_to_arrow(
        data, topic="t", partition=1, start=120, end=400, include_headers=include_headers
    ).batch
    got = records_to_arrow(
        memoryview(buffer),
        topic="t",
        partition=1,
        start=120,
        end=400,
        include_headers=include_headers,
    ).batch
    assert expected is not None and got is not None
    buffer[:] = bytes(len(buffer))  # the next answer lands here
    assert got.equals(expected)
    assert got.num_rows == 280


@pytest.mark.parametrize("layout", ["tidelog", "kafka"])
def test_an_empty_batch_left_by_the_cleaner_yields_no_row_and_is_read_past(layout: str) -> None:
    # The cleaner keeps a live producer's newest batch as its header alone when no
    # record survives (docs/idempotence.md "Wiring"): offsets 0-2, no record.
    full = stored(0, [(b"k", b"v%d" % i, [], 1000 + i) for i in range(3)], producer_id=7)
    following = stored(3, [(b"k", b"v3", [], 1003)])
    if layout == "kafka":
        full = tidelog_to_kafka(full, partition_leader_epoch=0)[0]
        following = tidelog_to_kafka(following, partition_leader_epoch=0)[0]
    header = header_of(full, full[KAFKA_MAGIC_OFFSET if layout == "kafka" else MAGIC_OFFSET])
    empty = emptied(full, header)
    assert header_of(empty, header.magic).record_count == 0
    out = records_to_arrow(
        empty + following, topic="t", partition=0, start=0, end=100, include_headers=True
    )
    assert out.batch is not None and out.rows == 1
    assert out.batch.column("offset").to_pylist() == [3]
    assert out.batch.column("value").to_pylist() == [b"v3"]
    assert out.next_offset == 4
    alone = records_to_arrow(empty, topic="t", partition=0, start=0, end=100, include_headers=False)
    assert alone.rows == 0 and alone.next_offset == 3
