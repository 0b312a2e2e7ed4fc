"""The remote read path against a real S3 server (moto, server mode): segments of a
real log uploaded by key layout, read back through the chunk and index caches, byte
for byte what the local segments answer; failures of the store as errors."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.batch import KAFKA_LAYOUT
from protocol.errors import RemoteStorageError
from storage.config import LogConfig
from storage.log import Log
from storage.remote import BlockingObjectStore
from storage.remote.remote_reader import RemoteLog, RemoteReader
from storage.remote.remote_segment import RemoteSegmentRef
from tests.storage.helpers import BASE_TS, open_test_log
from tests.storage.test_both_layouts import kafka_batch, tidelog_batch
from tests.tiered.conftest import OwnS3, S3Server
from tests.tiered.s3_helpers import upload_segments

SMALL = LogConfig(segment_bytes=2048, index_interval_bytes=256)


def _filled_log(directory: Path, batches: int = 120) -> Log:
    log = open_test_log(directory, SMALL)
    for i in range(batches):
        ts = BASE_TS + i * 10
        if i % 3 == 2:
            log.append(kafka_batch(3, tag=f"k{i}-", ts=ts), layout=KAFKA_LAYOUT)
        else:
            log.append(tidelog_batch(3, tag=f"t{i}-", ts=ts))
    log.roll()
    return log


@pytest.fixture
def store(request: pytest.FixtureRequest) -> S3Server:
    """The shared moto server's bucket, or (param "own") one on a server the test stops."""
    if getattr(request, "param", None) == "own":
        own: OwnS3 = request.getfixturevalue("own_s3")
        return own.s3
    shared: S3Server = request.getfixturevalue("s3_server")
    return shared


@pytest.fixture
def uploaded(tmp_path: Path, store: S3Server) -> Iterator[tuple[Log, list[RemoteSegmentRef]]]:
    log = _filled_log(tmp_path / "t-0")
    client = store.client()
    try:
        refs = upload_segments(client, store.bucket, log, prefix=f"p{uuid.uuid4().hex[:6]}")
    finally:
        client.close()
    yield log, refs
    log.close()
    for reader in _READERS:
        reader.close()
    _READERS.clear()


_READERS: list[RemoteReader] = []


def _reader(tmp_path: Path, store: S3Server, **caps: int) -> RemoteReader:
    """A reader of `store` (closed with the `uploaded` fixture)."""
    settings = store.settings(max_attempts=1, connect_timeout_ms=1000)
    reader = RemoteReader(BlockingObjectStore(settings), tmp_path / "data", **caps)
    _READERS.append(reader)
    return reader


def test_remote_reads_are_byte_identical_to_local_ones(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]]
) -> None:
    log, refs = uploaded
    assert len(refs) > 5
    reader = _reader(tmp_path, store, chunk_bytes=1024, chunk_cache_bytes=64 * 1024)
    remote = RemoteLog(reader, lambda: refs, "t-0")
    end = refs[-1].next_offset
    for max_bytes in (1, 700, 5000):
        offset = 0
        while offset < end:
            want = log.read(offset, max_bytes)
            got = remote.read(offset, max_bytes, min_one=True, local_start=end)
            assert got is not None
            assert got[0] == want.records, (offset, max_bytes)
            assert got[1] & want.layouts == got[1]  # never claims a layout absent locally
            offset = _next_offset(got[0])
    stats = reader.statistics()
    assert stats.chunks.misses > 0 and stats.chunks.hits > 0
    assert stats.indexes.misses == len(refs)


def test_cold_then_warm_cache_and_the_cap(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]]
) -> None:
    _, refs = uploaded
    reader = _reader(tmp_path, store, chunk_bytes=1024, chunk_cache_bytes=4096)
    remote = RemoteLog(reader, lambda: refs, "t-0")
    first = remote.read(0, 2000, min_one=True, local_start=10**9)
    cold = reader.statistics()
    assert cold.chunks.misses >= 2 and cold.gets >= 3  # index + chunks
    again = remote.read(0, 2000, min_one=True, local_start=10**9)
    warm = reader.statistics()
    assert again == first
    assert warm.gets == cold.gets and warm.chunks.hits > cold.chunks.hits
    for ref in refs:  # read everything: the cache stays under its cap
        remote.read(ref.base_offset, 5000, min_one=True, local_start=10**9)
        assert reader.statistics().chunks.size_bytes <= 4096
    assert reader.statistics().chunks.evictions > 0
    cache_files = list((tmp_path / "data" / "remote-cache").iterdir())
    assert sum(f.stat().st_size for f in cache_files) <= 4096


def test_a_segment_uploaded_without_a_txnindex_costs_no_get(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]]
) -> None:
    """The manifest says which segments went up with a `.txnindex`: the aborted list
    over many segments without one asks the store nothing (404s, one per segment,
    made a listing of a long remote tier time out)."""
    _, refs = uploaded
    reader = _reader(tmp_path, store)
    without = [dataclasses.replace(ref, has_txn_index=False) for ref in refs]
    found, _ = RemoteLog(reader, lambda: without, "t-0").aborted_between(0, 10**9, 10**9)
    assert found == () and reader.statistics().gets == 0
    unknown = RemoteLog(reader, lambda: refs, "t-0")  # an older manifest: look for them
    assert unknown.aborted_between(0, 10**9, 10**9)[0] == ()
    assert reader.statistics().gets == len(refs)


def test_offset_for_timestamp_and_max_timestamp_match_local(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]]
) -> None:
    log, refs = uploaded
    remote = RemoteLog(_reader(tmp_path, store), lambda: refs, "t-0")
    end = refs[-1].next_offset
    for ts in (BASE_TS - 5, BASE_TS, BASE_TS + 1, BASE_TS + 333, BASE_TS + 1190, BASE_TS + 1192):
        assert remote.offset_for_timestamp(ts, 0, end) == log.offset_for_timestamp(ts), ts
    assert remote.offset_for_timestamp(BASE_TS + 10**6, 0, end) is None
    assert remote.max_timestamp(0, end) == log.max_timestamp()


def test_a_truncated_body_is_an_error_not_garbage(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]]
) -> None:
    _, refs = uploaded
    ref = refs[2]
    client = store.client()
    data = client.get_object(Bucket=store.bucket, Key=ref.log_key)["Body"].read()
    client.put_object(Bucket=store.bucket, Key=ref.log_key, Body=data[:-100])
    client.close()
    reader = _reader(tmp_path, store, chunk_bytes=1024, chunk_cache_bytes=64 * 1024)
    remote = RemoteLog(reader, lambda: refs, "t-0")
    assert remote.read(refs[1].base_offset, 100, min_one=True, local_start=10**9) is not None
    with pytest.raises(RemoteStorageError, match="truncated"):
        remote.read(ref.base_offset, 10**6, min_one=True, local_start=10**9)
    assert reader.statistics().errors == 1


@pytest.mark.parametrize("store", ["own"], indirect=True)
def test_a_store_that_is_down_fails_the_read_retriably(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]], own_s3: OwnS3
) -> None:
    _, refs = uploaded
    reader = _reader(tmp_path, store)
    remote = RemoteLog(reader, lambda: refs, "t-0")
    own_s3.stop()
    with pytest.raises(RemoteStorageError, match="object store failed") as caught:
        remote.read(0, 100, min_one=True, local_start=10**9)
    assert caught.value.retriable


def _next_offset(records: bytes) -> int:
    from protocol.batch import ANY_LAYOUT, F_BASE_OFFSET, F_LAST_OFFSET_DELTA, BatchWalk

    last = -1
    for _, fields in BatchWalk(records, whole=True, layout=ANY_LAYOUT):
        last = fields[F_BASE_OFFSET] + fields[F_LAST_OFFSET_DELTA]
    return last + 1


def test_a_log_reads_below_its_local_segments_from_the_remote_tier(
    tmp_path: Path, store: S3Server, uploaded: tuple[Log, list[RemoteSegmentRef]]
) -> None:
    log, refs = uploaded
    end = log.log_end_offset
    want = [log.read(offset, 700) for offset in range(0, end, 7)]
    times = [log.offset_for_timestamp(ts) for ts in (BASE_TS, BASE_TS + 555, BASE_TS + 1190)]
    top = log.max_timestamp()
    gone = len(refs) - 2  # local retention took all but the two newest closed segments
    log.delete_oldest_segments(gone, "test: local retention")
    local_start = refs[gone].base_offset
    assert log.log_start_offset == local_start
    remote = RemoteLog(_reader(tmp_path, store, chunk_bytes=1024), lambda: refs, "t-0")
    log.restore_log_start_offset(0)  # as tiered storage's start-up does from the manifest
    log.attach_remote(remote)
    assert (log.log_start_offset, log.local_log_start_offset) == (0, local_start)
    assert log.needs_remote(0) and not log.needs_remote(local_start)
    got = [log.read(offset, 700) for offset in range(0, end, 7)]
    assert [(g.records, g.log_start_offset) for g in got] == [(w.records, 0) for w in want]
    assert [log.offset_for_timestamp(t) for t in (BASE_TS, BASE_TS + 555, BASE_TS + 1190)] == times
    assert log.max_timestamp() == top
    assert log.remote_time_lookup(BASE_TS) and log.remote_time_lookup(None)
