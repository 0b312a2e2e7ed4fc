"""The fixed-layout path: taken exactly when records sit where arithmetic says, and its
rows always equal the reference decoder's (`protocol.batch.decode_records`)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocol.batch import TimestampType
from protocol.errors import CorruptMessage
from spark_connector.arrow_convert import records_to_arrow
from spark_connector.uniform_scan import scan_uniform
from tests.spark_connector.test_record_scan import (
    COMPRESSIONS,
    assert_same_rows,
    payloads_of,
    stored,
    with_payload,
)

BASE_TS = 1_700_000_000_000
# Record counts around the offset-delta width changes (1 byte < 128 <= 2 bytes < 256).
COUNTS = st.one_of(st.sampled_from([1, 2, 127, 128, 129, 255, 256, 257, 700]), st.integers(1, 400))
FIXED_BLOBS = st.one_of(
    st.none(),
    st.integers(0, 40).map(lambda n: bytes(range(n))),
    st.sampled_from([255, 256, 300]).map(lambda n: b"\x07" * n),  # bin8 and bin16 headers
)


def header_bytes(blob: bytes | None) -> int:
    if blob is None:
        return 1
    return len(blob) + (2 if len(blob) < 256 else 3)


def layout_fits(key: bytes | None, value: bytes | None) -> bool:
    """Record 0 (fixarray, delta, ts, key, value, headers) is at least a word long."""
    return 4 + header_bytes(key) + header_bytes(value) >= 8


@st.composite
def fixed_logs(draw: st.DrawFn) -> tuple[list[list[tuple]], bytes | None, bytes | None]:
    """Batches of one record count whose records share a layout (deltas 0-127 ms)."""
    batches, count = draw(st.integers(1, 5)), draw(COUNTS)
    key, value = draw(FIXED_BLOBS), draw(FIXED_BLOBS)
    # The first record's timestamp is the batch's base: later deltas are 0-127.
    deltas = [0, *draw(st.lists(st.integers(0, 127), min_size=count - 1, max_size=count - 1))]
    log = [
        [(key, value and bytes([b]) + value[1:], [], BASE_TS + d) for d in deltas]
        for b in range(batches)
    ]
    return log, key, value


def encode(log: list[list[tuple]], **kw: object) -> tuple[bytes, int]:
    parts, base = [], 0
    for records in log:
        parts.append(stored(base, records, **kw))
        base += len(records)
    return b"".join(parts), base


@settings(max_examples=80, deadline=None)
@given(
    logged=fixed_logs(),
    cut=st.tuples(st.integers(0, 4000), st.integers(0, 4000)),
    compression=st.sampled_from(COMPRESSIONS),
    timestamp_type=st.sampled_from(list(TimestampType)),
    include_headers=st.booleans(),
)
def test_fixed_layout_chunks_take_the_strided_path_and_match_the_decoder(
    logged: tuple[list[list[tuple]], bytes | None, bytes | None],
    cut: tuple[int, int],
    compression: object,
    timestamp_type: TimestampType,
    include_headers: bool,
) -> None:
    log, key, value = logged
    plain, total = encode(log, timestamp_type=timestamp_type)
    uniform = scan_uniform(plain, payloads_of(plain))
    assert (uniform is not None) == layout_fits(key, value)
    if uniform is not None:
        assert uniform.keys.to_pylist() == [r[0] for batch in log for r in batch]
        assert uniform.values.to_pylist() == [r[1] for batch in log for r in batch]
        deltas = [r[3] - BASE_TS for batch in log for r in batch]
        assert uniform.timestamp_deltas.ravel().tolist() == deltas
    buf, _ = encode(log, compression=compression, timestamp_type=timestamp_type)
    assert_same_rows(buf, min(cut), max(cut), include_headers)
    assert_same_rows(buf, 0, total, include_headers)


def _mutations(value: bytes) -> dict[str, tuple]:
    """One record changed so that its bytes no longer have the first record's layout;
    where it can, the value shrinks so the record (and batch) keeps its length."""
    short = value[:-1]
    return {
        "negative timestamp delta": (None, value, [], BASE_TS - 1),
        "two-byte timestamp delta": (None, short, [], BASE_TS + 200),
        "empty key instead of nil": (b"", short, [], BASE_TS),
        "a header": (None, value[:-4], [("h", None)], BASE_TS),
        "nil value": (None, None, [], BASE_TS),
        "str-sized value": (None, value + b"x", [], BASE_TS),
    }


@settings(max_examples=60, deadline=None)
@given(
    batches=st.integers(1, 4),
    count=st.integers(2, 300),
    value_len=st.integers(8, 120),
    where=st.tuples(st.integers(0, 3), st.integers(0, 299)),
    mutation=st.sampled_from(sorted(_mutations(b"v" * 8))),
    swap=st.booleans(),
)
def test_near_fixed_chunks_are_refused_and_still_match_the_decoder(
    batches: int,
    count: int,
    value_len: int,
    where: tuple[int, int],
    mutation: str,
    swap: bool,
) -> None:
    value = bytes(range(value_len))
    log = [[(None, value, [], BASE_TS)] * count for _ in range(batches)]
    b, i = where[0] % batches, where[1] % count
    if "timestamp" in mutation:
        i = max(i, 1)  # a changed record 0 would only move the base timestamp
    log[b][i] = _mutations(value)[mutation]
    if swap:  # also a record one byte longer elsewhere: lengths still add up per batch
        j = (i + 1) % count
        if j != i and log[b][i][1] is not None and len(log[b][i][1]) < value_len:
            log[b][j] = (None, value + b"!" * (value_len - len(log[b][i][1])), [], BASE_TS)
    buf, total = encode(log)
    assert scan_uniform(buf, payloads_of(buf)) is None
    assert_same_rows(buf, 0, total, include_headers=False)
    assert_same_rows(buf, 0, total, include_headers=True)


def test_batches_of_different_counts_or_sizes_are_refused() -> None:
    value = b"x" * 50
    full = [(None, value, [], BASE_TS)] * 10
    for log in ([full, full[:9]], [full, [(None, value + b"y", [], BASE_TS)] * 10]):
        buf, total = encode(log)
        assert scan_uniform(buf, payloads_of(buf)) is None
        assert_same_rows(buf, 0, total, include_headers=False)


def test_the_bench_shape_is_taken_whole() -> None:
    """1000-record batches of 100-byte values: all three delta widths in every batch."""
    value = bytes(range(100))
    log = [[(None, value, [], BASE_TS + i % 3) for i in range(1000)] for _ in range(3)]
    buf, _ = encode(log)
    uniform = scan_uniform(buf, payloads_of(buf))
    assert uniform is not None and (uniform.batches, uniform.records_per_batch) == (3, 1000)
    values = np.frombuffer(uniform.values.buffers()[2], np.uint8).reshape(3000, 100)
    assert (values == np.frombuffer(value, np.uint8)).all()
    assert_same_rows(buf, 500, 2500, include_headers=False)


@pytest.mark.parametrize("key", [b"", b"k" * 9])
def test_empty_values_and_keys_are_taken_as_empty_not_null(key: bytes) -> None:
    """Zero-length bin items (no bytes to copy), beside an empty or a non-empty key; a
    nil key would make the record shorter than the 8-byte word the checks need."""
    log = [[(key, b"", [], BASE_TS + i % 100) for i in range(200)] for _ in range(2)]
    buf, total = encode(log)
    uniform = scan_uniform(buf, payloads_of(buf))
    assert uniform is not None
    assert uniform.values.to_pylist() == [b""] * 400
    assert uniform.keys.to_pylist() == [key] * 400
    assert_same_rows(buf, 0, total, include_headers=True)


RECORD_0 = b"\x95\x00\x00\xc0\xc4\x08" + bytes(range(8)) + b"\x90"


@pytest.mark.parametrize(
    "record_1",
    [
        b"\x95\xc3\x00\xc0\xc4\x08" + bytes(range(8)) + b"\x90",  # delta `true`
        b"\x95\x01\xc2\xc0\xc4\x08" + bytes(range(8)) + b"\x90",  # timestamp `false`
        b"\x96\x01\x00\xc0\xc4\x08" + bytes(range(8)) + b"\x90",  # six items
        b"\x95\x01\x00\xc0\xd9\x08" + bytes(range(8)) + b"\x90",  # value a str
    ],
)
def test_bytes_outside_the_grammar_are_refused_and_reach_the_decoders_error(
    record_1: bytes,
) -> None:
    buf = with_payload(b"\x92" + RECORD_0 + record_1, count=2)
    assert scan_uniform(buf, payloads_of(buf)) is None
    with pytest.raises(CorruptMessage):
        records_to_arrow(buf, topic="t", partition=0, start=0, end=2, include_headers=False)


def test_a_record_whose_headers_are_not_an_empty_array_is_refused() -> None:
    map_headers = b"\x95\x01\x00\xc0\xc4\x08" + bytes(range(8)) + b"\x80"
    buf = with_payload(b"\x92" + RECORD_0 + map_headers, count=2)
    assert scan_uniform(buf, payloads_of(buf)) is None
