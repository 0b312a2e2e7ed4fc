"""Kafka v2 batches (a Kafka-produced topic, stored as produced) convert to exactly the
Arrow rows of the same records in Tidelog's layout: column-wise, trimmed to any range,
headers, timestamps and codecs included, and mixed with Tidelog batches."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import Compression, encode_batch, set_base_offset
from protocol.errors import CorruptMessage
from protocol.kafka.convert import tidelog_to_kafka
from spark_connector.arrow_convert import (
    records_to_arrow,
    select_batches,
    selection_to_arrow,
    split_selection,
)
from tests.spark_connector.test_record_scan import batches, stored


def as_kafka(batch: bytes) -> bytes:
    return tidelog_to_kafka(batch, partition_leader_epoch=0)[0]


def rows(buf: bytes, start: int, end: int, include_headers: bool) -> list[dict] | None:
    """The rows as the reader makes them: selection, one-layout chunks, conversion."""
    selection = select_batches(buf, start, end)
    out = []
    for chunk in split_selection(selection, chunk_bytes=4096):
        converted = selection_to_arrow(
            buf, chunk, topic="t", partition=0, include_headers=include_headers
        )
        if converted.batch is not None:
            out += converted.batch.to_pylist()
    return out


@settings(max_examples=50, deadline=None)
@given(
    log=st.lists(st.tuples(batches(), st.booleans()), min_size=1, max_size=4),
    cut=st.tuples(st.integers(0, 1300), st.integers(0, 1300)),
    include_headers=st.booleans(),
)
def test_kafka_batches_convert_to_the_tidelog_rows(log, cut, include_headers) -> None:
    tidelog_parts, mixed_parts, base = [], [], 0
    for (records, kw), kafka in log:
        batch = stored(base, records, **kw)
        tidelog_parts.append(batch)
        mixed_parts.append(as_kafka(batch) if kafka else batch)
        base += len(records)
    tidelog, mixed = b"".join(tidelog_parts), b"".join(mixed_parts)
    all_kafka = b"".join(as_kafka(b) for b in tidelog_parts)
    for start, end in ((min(cut), max(cut)), (0, base)):
        expected = rows(tidelog, start, end, include_headers)
        assert rows(mixed, start, end, include_headers) == expected
        assert rows(all_kafka, start, end, include_headers) == expected
        # A selection of both layouts at once (no split) is decoded batch by batch.
        whole = records_to_arrow(
            mixed, topic="t", partition=0, start=start, end=end, include_headers=include_headers
        )
        assert (whole.batch.to_pylist() if whole.batch is not None else []) == expected


def test_a_kafka_chunk_is_scanned_column_wise() -> None:
    """Many small Kafka batches convert in one scan of their joined records."""
    parts = []
    for b in range(50):
        batch = bytearray(
            encode_batch(
                [(b"k", b"v%d" % i, None, 1000 + i) for i in range(8)],
                compression=Compression.LZ4 if b % 2 else Compression.NONE,
            )
        )
        set_base_offset(batch, 0, 8 * b)
        parts.append(as_kafka(bytes(batch)))
    buf = b"".join(parts)
    out = records_to_arrow(buf, topic="t", partition=0, start=3, end=397, include_headers=True)
    assert out.batch is not None and out.rows == 394
    assert out.batch.column("offset").to_pylist() == list(range(3, 397))
    assert out.batch.column("headers").null_count == 394


@pytest.mark.parametrize("counts", [(2, 3), (2, 4)], ids=["fewer", "shifted"])
def test_a_lying_kafka_record_count_is_corrupt(counts: tuple[int, int]) -> None:
    first = bytearray(as_kafka(stored(0, [(b"k", b"v", [], 1)] * 3)))
    second = bytearray(as_kafka(stored(3, [(b"k", b"v", [], 1)] * 3)))
    first[57:61] = counts[0].to_bytes(4, "big")  # record_count (the scan checks no CRC)
    second[57:61] = counts[1].to_bytes(4, "big")
    buf = bytes(first + second)
    with pytest.raises(CorruptMessage):
        records_to_arrow(buf, topic="t", partition=0, start=0, end=6, include_headers=False)
