"""Fetch answers sent from segment files: same batches as `Log.read`, same frame bytes."""

from __future__ import annotations

import gc
import os
import random
import socket
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from broker import fetch_send, offload
from broker.fetch_send import send_parts, spans_of_fetch
from protocol.batch import iter_headers
from protocol.errors import OffsetOutOfRange
from protocol.framing import (
    SPLIT_FRAME_BYTES,
    encode_frame,
    encode_frame_parts,
    encode_frame_to_send,
)
from storage import record_source
from storage.config import LogConfig
from storage.fileio import ReadWouldWait, reads_must_not_wait
from storage.log import Location
from storage.read_plan import SENDFILE_MIN_BYTES
from storage.record_source import FileSpan, RecordSource
from tests.storage.helpers import batch, drop_from_page_cache, open_test_log

# --- locating: the same batches as Log.read -------------------------------------


@pytest.fixture(scope="module")
def varied_log(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """Three segments of batches from 1 to 400 records of 10-300 bytes."""
    rng = random.Random(7)
    directory = tmp_path_factory.mktemp("log")
    log = open_test_log(directory, LogConfig(segment_bytes=600_000))
    for tag in range(60):
        log.append(batch(rng.randint(1, 400), value_bytes=rng.randint(10, 300), tag=tag))
    assert log.segment_count >= 3
    yield log
    log.close()


def _records_of(located: Location) -> bytes:
    records = located.records
    if isinstance(records, RecordSource):
        try:
            return records.read()
        finally:
            records.close()
    return records


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    offset_fraction=st.floats(0, 1),
    max_bytes=st.one_of(
        st.integers(0, 2 * SENDFILE_MIN_BYTES), st.integers(SENDFILE_MIN_BYTES, 1_500_000)
    ),
    min_one=st.booleans(),
)
def test_located_records_are_what_log_read_returns(
    varied_log: Any, offset_fraction: float, max_bytes: int, min_one: bool
) -> None:
    offset = int(offset_fraction * varied_log.high_watermark)
    expected = varied_log.read(offset, max_bytes, min_one=min_one)
    located = varied_log.locate(offset, max_bytes, min_one=min_one)
    assert (located.high_watermark, located.log_start_offset) == (
        expected.high_watermark,
        expected.log_start_offset,
    )
    if isinstance(located.records, RecordSource):
        assert located.records.record_count == sum(
            h.record_count for _, h in iter_headers(expected.records)
        )
    assert _records_of(located) == expected.records


def test_large_reads_are_spans_and_small_ones_bytes(varied_log: Any) -> None:
    large = varied_log.locate(0, 1_000_000)
    small = varied_log.locate(0, SENDFILE_MIN_BYTES - 1, min_one=False)
    assert isinstance(large.records, FileSpan)
    assert len(large.records) > SENDFILE_MIN_BYTES
    assert isinstance(small.records, bytes)
    large.records.close()


def test_a_walk_over_more_batches_than_allowed_must_wait(varied_log: Any) -> None:
    whole = varied_log.locate(0, 1_500_000)
    assert isinstance(whole.records, FileSpan)
    walked = len(list(iter_headers(_records_of(whole))))
    assert walked > 3
    with pytest.raises(ReadWouldWait):
        varied_log.locate(0, 1_500_000, max_batches=walked - 1)
    enough = varied_log.locate(0, 1_500_000, max_batches=walked)
    assert _records_of(enough) == varied_log.read(0, 1_500_000).records


def test_an_uncached_header_must_wait_and_the_waiting_path_serves_it(tmp_path: Path) -> None:
    log = open_test_log(tmp_path, LogConfig())
    try:
        for tag in range(8):
            log.append(batch(200, value_bytes=100, tag=tag))
        log.flush()
        expected = log.read(0, 1 << 20).records
        assert len(expected) >= SENDFILE_MIN_BYTES
        for segment_file in tmp_path.glob("*.log"):
            drop_from_page_cache(segment_file)
        with reads_must_not_wait(), pytest.raises(ReadWouldWait):
            log.locate(0, 1 << 20)
        assert _records_of(log.locate(0, 1 << 20)) == expected
        with reads_must_not_wait():  # the waiting read brought the headers in
            assert _records_of(log.locate(0, 1 << 20)) == expected
    finally:
        log.close()


def test_out_of_range_offsets_raise_like_log_read(varied_log: Any) -> None:
    with pytest.raises(OffsetOutOfRange):
        varied_log.locate(varied_log.high_watermark + 1, 1_000_000)
    at_end = varied_log.locate(varied_log.high_watermark, 1_000_000)
    assert at_end.records == b""


def test_a_span_keeps_its_own_descriptor_and_closes_it(varied_log: Any) -> None:
    before = record_source.open_span_count()
    span = varied_log.locate(0, 1_000_000).records
    assert isinstance(span, FileSpan)
    assert record_source.open_span_count() == before + 1
    fd = span.fd
    os.fstat(fd)  # open
    del span
    gc.collect()
    assert record_source.open_span_count() == before
    with pytest.raises(OSError):
        os.fstat(fd)


# --- framing: byte for byte what encode_frame writes ----------------------------


def _span_file(tmp_path: Path, size: int) -> tuple[int, bytes]:
    data = random.Random(size).randbytes(size)
    path = tmp_path / f"seg-{size}"
    path.write_bytes(data)
    return os.open(path, os.O_RDONLY), data


_sizes = st.sampled_from([0, 1, 255, 256, 65_535, 65_536, 70_000])
_partition = st.fixed_dictionaries(
    {
        "partition": st.integers(0, 2**31 - 1),
        "error": st.sampled_from([None, "OFFSET_OUT_OF_RANGE"]),
        "message": st.one_of(st.none(), st.text(max_size=20)),
        "size": _sizes,
        "as_span": st.booleans(),
        "high_watermark": st.integers(-1, 2**63 - 1),
        "log_start_offset": st.integers(-1, 2**40),
    }
)
_answers = st.lists(
    st.tuples(st.text(min_size=1, max_size=12), st.lists(_partition, min_size=1, max_size=4)),
    min_size=1,
    max_size=3,
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(answer=_answers, request_id=st.integers(0, 2**31 - 1))
def test_frame_parts_equal_encode_frame(tmp_path: Path, answer: list, request_id: int) -> None:
    files: dict[int, tuple[int, bytes]] = {}
    try:
        with_spans, with_bytes = [], []
        for topic, parts in answer:
            span_parts, byte_parts = [], []
            for p in parts:
                size = p["size"]
                if size not in files:
                    files[size] = _span_file(tmp_path, size)
                fd, data = files[size]
                head = {"partition": p["partition"], "error": p["error"], "message": p["message"]}
                tail = {
                    "high_watermark": p["high_watermark"],
                    "log_start_offset": p["log_start_offset"],
                }
                records: Any = data
                if p["as_span"]:
                    records = FileSpan.of(fd, 0, size, 0)
                span_parts.append({**head, "records": records, **tail})
                byte_parts.append({**head, "records": data, **tail})
            with_spans.append({"topic": topic, "partitions": span_parts})
            with_bytes.append({"topic": topic, "partitions": byte_parts})
        body = {"topics": with_spans}
        wire = {"id": request_id, "error": None, "message": None, "body": body}
        parts = encode_frame_parts(wire, spans_of_fetch(body))
        joined = b"".join(p if isinstance(p, bytes) else p.read() for p in parts)
        expected = encode_frame({**wire, "body": {"topics": with_bytes}})
        assert joined == bytes(expected)
        fetch_send.close_parts(parts)
    finally:
        for fd, _ in files.values():
            os.close(fd)


# --- sending ----------------------------------------------------------------------


def _frame_with_span(tmp_path: Path, size: int) -> tuple[list, bytes]:
    fd, data = _span_file(tmp_path, size)
    try:
        span = FileSpan.of(fd, 0, size, 0)
    finally:
        os.close(fd)
    assert span is not None
    body = {"topics": [{"topic": "t", "partitions": [{"partition": 0, "records": span}]}]}
    wire = {"id": 1, "body": body}
    expected = bytes(
        encode_frame(
            {
                "id": 1,
                "body": {
                    "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": data}]}]
                },
            }
        )
    )
    return encode_frame_parts(wire, [span]), expected


async def _read_exactly(sock: trio.socket.SocketType, n: int) -> bytes:
    got = bytearray()
    while len(got) < n:
        chunk = await sock.recv(1 << 20)
        assert chunk, "peer closed early"
        got += chunk
    return bytes(got)


async def test_a_frame_with_a_span_arrives_byte_for_byte_over_a_socket(tmp_path: Path) -> None:
    before = record_source.open_span_count()
    parts, expected = _frame_with_span(tmp_path, 3_000_000)
    left, right = trio.socket.socketpair()
    with left, right:
        stream = trio.SocketStream(left)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send_parts, stream, parts, 30.0)
            received = await _read_exactly(right, len(expected))
    assert received == expected
    assert record_source.open_span_count() == before


async def test_a_stream_without_a_socket_gets_the_same_bytes(tmp_path: Path) -> None:
    parts, expected = _frame_with_span(tmp_path, 200_000)
    send, receive = trio.testing.memory_stream_pair()
    got = bytearray()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_parts, send, parts, 30.0)
        while len(got) < len(expected):
            got += await receive.receive_some()
    assert bytes(got) == expected


async def test_a_peer_that_stops_reading_times_out_and_the_span_is_closed(tmp_path: Path) -> None:
    before = record_source.open_span_count()
    parts, _ = _frame_with_span(tmp_path, 8_000_000)  # more than the socket buffers hold
    left, right = trio.socket.socketpair()
    with left, right:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        with pytest.raises(trio.TooSlowError):
            await send_parts(trio.SocketStream(left), parts, 0.3)
    assert record_source.open_span_count() == before


async def test_cancelling_a_send_closes_the_span(tmp_path: Path) -> None:
    before = record_source.open_span_count()
    parts, _ = _frame_with_span(tmp_path, 8_000_000)
    left, right = trio.socket.socketpair()
    with left, right:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        with trio.move_on_after(0.2) as scope:
            await send_parts(trio.SocketStream(left), parts, 30.0)
        assert scope.cancelled_caught
        assert record_source.open_span_count() == before


async def test_a_slow_reader_gets_everything_without_holding_a_thread(tmp_path: Path) -> None:
    parts, expected = _frame_with_span(tmp_path, 2_000_000)
    left, right = trio.socket.socketpair()
    with left, right:
        left.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)
        default_limiter = offload.limiter()  # what sendfile bursts borrow from
        tokens, default_limiter.total_tokens = default_limiter.total_tokens, 1
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(send_parts, trio.SocketStream(left), parts, 30.0)
                got = bytearray()
                while len(got) < len(expected):
                    # while the sender waits for room, the only worker thread is free
                    with trio.fail_after(10):
                        await offload.to_worker(lambda: None)
                    got += await right.recv(32 * 1024)
        finally:
            default_limiter.total_tokens = tokens
    assert bytes(got) == expected


async def test_a_closed_peer_is_a_broken_resource(tmp_path: Path) -> None:
    parts, _ = _frame_with_span(tmp_path, 8_000_000)
    left, right = trio.socket.socketpair()
    with left:
        right.close()
        with pytest.raises(trio.BrokenResourceError):
            await send_parts(trio.SocketStream(left), parts, 30.0)


def test_bodies_of_other_shapes_have_no_spans() -> None:
    assert spans_of_fetch({"topics": ["a", "b"]}) == []
    assert spans_of_fetch({"topics": {"a": 1}}) == []
    assert spans_of_fetch({"configs": {}}) == []
    assert spans_of_fetch({"topics": [{"topic": "t", "partitions": [{"records": b"x"}]}]}) == []


def test_a_frame_must_list_every_external_bin(tmp_path: Path) -> None:
    fd, _ = _span_file(tmp_path, SENDFILE_MIN_BYTES)
    try:
        first, second = FileSpan.of(fd, 0, 10, 0), FileSpan.of(fd, 10, 10, 0)
    finally:
        os.close(fd)
    assert first is not None and second is not None
    body = {"a": first, "b": second}
    with pytest.raises(ValueError, match="more external bins"):
        encode_frame_parts(body, [first])
    parts = encode_frame_parts(body, [first, second])
    assert [p for p in parts if not isinstance(p, bytes)] == [first, second]
    fetch_send.close_parts(parts)


@pytest.mark.parametrize("size", [0, 1000, SPLIT_FRAME_BYTES - 100, SPLIT_FRAME_BYTES, 1 << 20])
def test_a_response_frame_to_send_is_the_encoded_frame(size: int) -> None:
    obj = {"id": 7, "body": {"records": b"r" * size}}
    frame = encode_frame_to_send(obj)
    joined = frame if isinstance(frame, bytes) else b"".join(frame)
    assert joined == bytes(encode_frame(obj))
    assert isinstance(frame, bytes) == (len(joined) - 4 < SPLIT_FRAME_BYTES)
