"""The Spark tasks' reader of remote segment objects (spark_connector/remote_read.py)
against the real moto server, through the fault proxy: any chunk size gives the rows a
conversion of the whole segment gives, the offset index object is used to start near
the wanted offset, broken bodies are retried, and a deleted object says so."""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import Any

import boto3
import pyarrow as pa
import pytest

from protocol.batch import encode_batch
from protocol.remote_schema import SegmentObject, StoreInfo
from spark_connector.arrow_convert import records_to_arrow, select_batches, selection_to_arrow
from spark_connector.options import S3Settings
from spark_connector.remote_read import RemoteObjectGone, SegmentObjects, open_bucket_client
from tests.tiered.faulty_s3 import Fault, FaultyS3

BUCKET = "cold-objects-test"
CREDENTIALS = S3Settings(access_key="testing", secret_key="testing", path_style=True)


def segment_bytes(base: int, batches: int, per_batch: int) -> tuple[bytes, bytes]:
    """A segment's .log bytes and a sparse offset index (an entry every 4th batch)."""
    log, index, offset = bytearray(), bytearray(), base
    for i in range(batches):
        if i % 4 == 0:
            index += struct.pack(">ii", offset - base, len(log))
        rows = [
            (b"k%d" % (offset + j), b"v" * (20 + (offset + j) % 50), None, 1000 + offset + j)
            for j in range(per_batch)
        ]
        log += encode_batch(rows, base_offset=offset)
        offset += per_batch
    return bytes(log), bytes(index)


@pytest.fixture
def proxy(moto_server: str) -> Iterator[FaultyS3]:
    proxy = FaultyS3(moto_server)
    yield proxy
    proxy.close()


@pytest.fixture
def segment(proxy: FaultyS3) -> tuple[SegmentObject, bytes, StoreInfo]:
    store = StoreInfo(BUCKET, endpoint=proxy.endpoint, region="us-east-1", path_style=True)
    s3 = boto3.client(
        "s3",
        endpoint_url=proxy.endpoint,
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    if BUCKET not in [b["Name"] for b in s3.list_buckets()["Buckets"]]:
        s3.create_bucket(Bucket=BUCKET)
    log, index = segment_bytes(500, 40, 25)
    s3.put_object(Bucket=BUCKET, Key="p/t-0/500.log", Body=log)
    s3.put_object(Bucket=BUCKET, Key="p/t-0/500.index", Body=index)
    seg = SegmentObject("p/t-0/500.log", "p/t-0/500.index", 500, 1499, len(log))
    return seg, log, store


def read_rows(objects: SegmentObjects, seg: SegmentObject, start: int, end: int) -> pa.Table:
    batches = []
    pos = start
    for buf in objects.chunks(seg, start, end):
        selection = select_batches(buf, pos, end)
        converted = selection_to_arrow(
            buf, selection, topic="t", partition=0, include_headers=False
        )
        if converted.batch is not None:
            batches.append(converted.batch)
        pos = max(pos, selection.next_offset)
    return pa.Table.from_batches(batches)


def expected(log: bytes, start: int, end: int) -> pa.Table:
    converted = records_to_arrow(
        log, topic="t", partition=0, start=start, end=end, include_headers=False
    )
    assert converted.batch is not None
    return pa.Table.from_batches([converted.batch])


@pytest.mark.parametrize("chunk_bytes", [300, 4096, 1 << 20])
@pytest.mark.parametrize(("start", "end"), [(500, 1500), (777, 1203), (1490, 1500)])
def test_any_chunk_size_gives_the_rows_of_the_whole_segment(
    segment: Any, chunk_bytes: int, start: int, end: int
) -> None:
    seg, log, store = segment
    objects = SegmentObjects(open_bucket_client(CREDENTIALS, store), BUCKET, chunk_bytes)
    try:
        got = read_rows(objects, seg, start, end)
    finally:
        objects.close()
    assert got.equals(expected(log, start, end))
    assert got.column("offset").to_pylist() == list(range(start, end))


def test_the_offset_index_object_skips_the_bytes_before_the_wanted_offset(segment: Any) -> None:
    seg, log, store = segment
    objects = SegmentObjects(open_bucket_client(CREDENTIALS, store), BUCKET)
    try:
        position = objects.start_position(seg, 1400)
        got = read_rows(objects, seg, 1400, 1500)
    finally:
        objects.close()
    assert position > len(log) * 3 // 4  # the entry of offset 1300 (batch 32)
    assert objects.bytes_read < len(log) // 4 + 400  # the index, and the tail only
    assert got.column("offset").to_pylist() == list(range(1400, 1500))


def test_truncated_bodies_and_500s_are_retried(segment: Any, proxy: FaultyS3) -> None:
    seg, log, store = segment
    objects = SegmentObjects(open_bucket_client(CREDENTIALS, store), BUCKET, 4096)
    try:
        proxy.set(Fault.TRUNCATE, keep_fraction=0.5, key_contains=".log")
        with pytest.raises(Exception, match="failed"):
            read_rows(objects, seg, 500, 1500)
        assert objects.retried_bodies >= 4
        proxy.set(Fault.ERROR_500, methods={"GET"})
        with pytest.raises(Exception, match="InternalError"):
            read_rows(objects, seg, 500, 1500)
        proxy.heal()
        assert read_rows(objects, seg, 500, 1500).equals(expected(log, 500, 1500))
    finally:
        objects.close()


def test_a_deleted_object_is_reported_as_gone(segment: Any) -> None:
    seg, _, store = segment
    s3 = open_bucket_client(CREDENTIALS, store)
    s3.delete_object(Bucket=BUCKET, Key=seg.log_key)
    objects = SegmentObjects(s3, BUCKET)
    try:
        with pytest.raises(RemoteObjectGone, match="is gone"):
            read_rows(objects, seg, 600, 700)
    finally:
        objects.close()


def broker_rows(log: Any, start: int, end: int, include_headers: bool) -> pa.Table:
    """What a read through the broker converts: Log.read's answers, fetch by fetch."""
    batches, pos = [], start
    while pos < end:
        data = log.read(pos, 4096)
        converted = records_to_arrow(
            data.records,
            topic=log.topic,
            partition=log.partition,
            start=pos,
            end=end,
            include_headers=include_headers,
        )
        if converted.batch is not None:
            batches.append(converted.batch)
        pos = converted.next_offset
    return pa.Table.from_batches(batches)


@pytest.mark.parametrize("include_headers", [False, True])
def test_uploaded_segments_of_both_layouts_read_as_the_broker_reads_them(
    tmp_path: Any, s3_server: Any, include_headers: bool
) -> None:
    """Real segments (Tidelog and Kafka v2 batches mixed, sparse indexes) uploaded under
    the key layout: the task's reader gives the rows of the broker's own reads."""
    from tests.tiered.s3_helpers import upload_segments
    from tests.tiered.test_remote_read import _filled_log

    log = _filled_log(tmp_path / "t-0")
    refs = upload_segments(s3_server.client(), s3_server.bucket, log, prefix="cold")
    store = StoreInfo(s3_server.bucket, endpoint=s3_server.endpoint, path_style=True)
    objects = SegmentObjects(open_bucket_client(CREDENTIALS, store), s3_server.bucket, 1500)
    try:
        for start, end in ((0, refs[-1].next_offset), (7, 200), (150, 151)):
            got, pos = [], start
            for ref in refs:
                seg = SegmentObject(
                    ref.log_key,
                    f"{ref.stem}.index",
                    ref.base_offset,
                    ref.end_offset,
                    ref.size_bytes,
                )
                if ref.end_offset < pos or ref.base_offset >= end:
                    continue
                for buf in objects.chunks(seg, pos, end):
                    selection = select_batches(buf, pos, end)
                    converted = selection_to_arrow(
                        buf,
                        selection,
                        topic=log.topic,
                        partition=log.partition,
                        include_headers=include_headers,
                    )
                    if converted.batch is not None:
                        got.append(converted.batch)
                    pos = max(pos, selection.next_offset)
            table = pa.Table.from_batches(got)
            assert table.equals(broker_rows(log, start, end, include_headers))
            assert table.num_rows == end - start
    finally:
        objects.close()
        log.close()
