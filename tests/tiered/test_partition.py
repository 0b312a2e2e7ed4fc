"""Uploads, local and total retention, and restart from the manifest, against a real
log on disk and a real S3-compatible server (moto). The bytes in the bucket are
compared with the local segments' bytes: nothing uploaded differs, nothing is lost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from protocol.batch import TIDELOG_BATCHES
from protocol.errors import StorageError
from storage.remote import (
    BlockingObjectStore,
    Manifest,
    RemoteStorageError,
    SegmentState,
    manifest_key,
    new_segment_id,
    read_manifest,
    segment_key,
    write_manifest,
)
from storage.remote.manifest import RemoteSegment
from storage.remote.partition import RemotePartition
from tests.tiered.conftest import S3Server
from tests.tiered.tierlog import TOPIC, Tiered, local_segment_bytes

S = SegmentState


@pytest.fixture
def tiered(tmp_path: Path, s3_server: S3Server) -> Tiered:
    t = Tiered(tmp_path / "data", s3_server)
    yield t  # type: ignore[misc]
    t.close()


def _log_key(segment: RemoteSegment, suffix: str = ".log") -> str:
    return segment_key("tidelog", TOPIC, 0, segment.base_offset, segment.segment_id, suffix)


def test_rolled_segments_are_uploaded_with_their_indexes(tiered: Tiered) -> None:
    tiered.produce(12)
    rolled = local_segment_bytes(tiered.log)
    assert len(rolled) >= 2
    tiered.part.open()
    assert tiered.upload_all() == len(rolled)
    manifest = tiered.part.manifest
    assert [s.base_offset for s in manifest.readable()] == sorted(rolled)
    assert manifest.remote_end_offset == tiered.log.active_segment.base_offset  # not the active
    for segment in manifest.readable():
        assert tiered.s3.get(_log_key(segment)) == rolled[segment.base_offset]
        stem = tiered.log.directory / f"{segment.base_offset:020d}"
        for suffix in (".index", ".timeindex"):
            local = Path(f"{stem}{suffix}").read_bytes()
            assert tiered.s3.get(_log_key(segment, suffix)) == local
        assert segment.size_bytes == len(rolled[segment.base_offset])
        assert segment.layouts == TIDELOG_BATCHES
        assert segment.max_timestamp_ms >= segment.base_timestamp_ms
    # The bucket's manifest is the local one.
    local = read_manifest(tiered.part.io, tiered.log.directory)
    assert local == manifest
    assert Manifest.decode(tiered.s3.get(manifest_key("tidelog", TOPIC, 0))) == manifest
    assert tiered.part.next_candidate() is None
    assert tiered.log.recovery_point >= manifest.remote_end_offset  # flushed before upload


def test_local_retention_deletes_only_uploaded_copies(tmp_path: Path, s3_server: S3Server) -> None:
    t = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0})
    try:
        t.produce(12)
        rolled = local_segment_bytes(t.log)
        t.service.apply_retention(t.part)  # nothing uploaded yet: nothing deleted
        assert local_segment_bytes(t.log) == rolled
        t.part.open()
        first = t.part.next_candidate()
        assert first is not None
        t.part.upload(first)
        t.service.apply_retention(t.part)
        assert sorted(local_segment_bytes(t.log)) == sorted(rolled)[1:]
        assert t.log.log_start_offset == 0  # the log start spans both tiers
        assert t.log.local_log_start_offset == sorted(rolled)[1]
        with pytest.raises(StorageError, match="object store only"):
            t.log.read(0, 1 << 20)  # never a later batch in its place
        t.upload_all()
        t.service.apply_retention(t.part)
        assert local_segment_bytes(t.log) == {}  # all rolled ones gone, the active stays
        assert t.log.local_log_start_offset == t.log.active_segment.base_offset
        for segment in t.part.manifest.readable():  # every byte is in the bucket
            assert s3_server.get(_log_key(segment)) == rolled[segment.base_offset]
        stats = t.service.statistics()
        assert stats.local_segments_deleted == len(rolled)
        assert stats.segments_pending_upload == 0 and stats.remote_segments == len(rolled)
    finally:
        t.close()


def test_total_retention_deletes_remote_segments_and_moves_the_log_start(
    tmp_path: Path, s3_server: S3Server
) -> None:
    t = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0,
                                                "retention.bytes": 3 * 4096})  # fmt: skip
    try:
        t.produce(20)
        t.part.open()
        t.upload_all()
        before = t.part.manifest.readable()
        t.service.apply_retention(t.part)
        after = t.part.manifest.readable()
        assert 0 < len(after) < len(before)
        gone = before[: len(before) - len(after)]
        assert t.log.log_start_offset == after[0].base_offset
        assert t.part.manifest.log_start_offset == after[0].base_offset
        for segment in gone:
            assert t.part.manifest.get(segment.segment_id).state is S.DELETE_SEGMENT_FINISHED  # type: ignore[union-attr]
            assert s3_server.object_keys(_log_key(segment)[: -len(".log")]) == []
        total = sum(s.size_bytes for s in after) + t.log.active_segment.size
        assert total >= 3 * 4096 - 4096  # retention keeps at least retention.bytes - a segment
    finally:
        t.close()


def test_delete_records_deletes_remote_segments_below_it(tiered: Tiered) -> None:
    tiered.produce(12)
    tiered.part.open()
    tiered.upload_all()
    readable = tiered.part.manifest.readable()
    cut = readable[1].base_offset + 1  # inside the second segment
    tiered.log.delete_records(cut)
    tiered.service.apply_retention(tiered.part)
    assert [s.base_offset for s in tiered.part.manifest.readable()] == [
        s.base_offset for s in readable[1:]
    ]
    assert tiered.log.log_start_offset == cut
    assert tiered.part.manifest.log_start_offset == cut
    assert read_manifest(tiered.part.io, tiered.log.directory).log_start_offset == cut  # type: ignore[union-attr]


def test_restart_restores_the_log_start_below_the_local_segments(
    tmp_path: Path, s3_server: S3Server
) -> None:
    t = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0})
    t.produce(12)
    t.part.open()
    t.upload_all()
    t.service.apply_retention(t.part)
    local_start = t.log.local_log_start_offset
    assert local_start > 0 and t.log.log_start_offset == 0
    t.close()
    again = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0})
    try:
        assert again.log.log_start_offset == local_start  # recovery clamps to local segments
        again.service.load_all()
        assert again.log.log_start_offset == 0
        assert again.log.local_log_start_offset == local_start
        report = again.part.open()
        assert (report.orphans_swept, report.stray_objects_deleted) == (0, 0)
    finally:
        again.close()


def test_orphans_and_strays_are_swept_on_open(tiered: Tiered) -> None:
    tiered.produce(6)
    log = tiered.log
    rolled = local_segment_bytes(log)
    base = min(rolled)
    # A crash mid-upload: COPY_SEGMENT_STARTED durable, one object PUT.
    orphan = RemoteSegment(new_segment_id(), base, base + 9, 10, 0, 0, 1,
                           S.COPY_SEGMENT_STARTED, 1)  # fmt: skip
    write_manifest(tiered.part.io, log.directory, Manifest(TOPIC, 0).with_segment(orphan))
    client = tiered.s3.client()
    client.put_object(Bucket=tiered.s3.bucket, Key=_log_key(orphan), Body=b"partial")
    stray = segment_key("tidelog", TOPIC, 0, 5, new_segment_id(), ".index")
    client.put_object(Bucket=tiered.s3.bucket, Key=stray, Body=b"x")
    report = tiered.part.open()
    assert (report.orphans_swept, report.stray_objects_deleted) == (1, 1)
    assert tiered.part.manifest.get(orphan.segment_id).state is S.DELETE_SEGMENT_FINISHED  # type: ignore[union-attr]
    assert tiered.s3.object_keys() == [manifest_key("tidelog", TOPIC, 0)]
    # The segment is uploaded again, under a new id.
    tiered.upload_all()
    first = tiered.part.manifest.readable()[0]
    assert first.base_offset == base and first.segment_id != orphan.segment_id
    assert tiered.s3.get(_log_key(first)) == rolled[base]


def test_upload_to_a_store_that_is_down_fails_and_is_retried_later(
    tiered: Tiered, s3_server: S3Server
) -> None:
    tiered.produce(6)
    down = BlockingObjectStore(
        s3_server.settings(endpoint="http://127.0.0.1:9", connect_timeout_ms=200, max_attempts=1)
    )
    part = RemotePartition(tiered.log, down, io=tiered.part.io, clock_ms=tiered.clock)
    candidate = part.next_candidate()
    assert candidate is not None
    with pytest.raises(RemoteStorageError) as caught:
        part.upload(candidate)
    assert caught.value.retriable
    # The failed copy was marked for deletion; deleting its objects needs the store
    # too, so the entry waits in DELETE_SEGMENT_STARTED for open() to resume.
    assert [s.state for s in part.manifest.segments] == [S.DELETE_SEGMENT_STARTED]
    assert len(local_segment_bytes(tiered.log)) >= 1  # nothing local was touched
    report = tiered.part.open()  # the store is back
    assert report.deletions_resumed == 1
    assert tiered.upload_all() >= 1
    assert tiered.part.manifest.readable()[0].base_offset == candidate.base_offset


def test_manifest_json_in_the_bucket_is_the_documented_format(tiered: Tiered) -> None:
    tiered.produce(6)
    tiered.part.open()
    tiered.upload_all()
    doc = json.loads(tiered.s3.get(manifest_key("tidelog", TOPIC, 0)))
    assert set(doc) == {"version", "topic", "partition", "log_start_offset", "segments"}
    assert set(doc["segments"][0]) == {
        "segment_id", "base_offset", "end_offset", "size_bytes", "base_timestamp_ms",
        "max_timestamp_ms", "layouts", "state", "updated_ms", "has_txn_index",
    }  # fmt: skip
    # Plain produce wrote no aborted transaction: no `.txnindex` object, and it says so.
    assert doc["segments"][0]["has_txn_index"] is False


def test_restart_keeps_a_delete_records_the_manifest_had_not_recorded(
    tmp_path: Path, s3_server: S3Server
) -> None:
    t = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0})
    t.produce(12)
    t.part.open()
    t.upload_all()
    t.service.apply_retention(t.part)
    local_start = t.log.local_log_start_offset
    t.log.delete_records(5)  # in the remote-only range; the manifest still says 0
    assert t.part.manifest.log_start_offset == 0
    t.close()  # the log-start checkpoint says 5
    again = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0})
    try:
        assert again.log.log_start_offset == local_start  # clamped by recovery
        again.service.load_all()
        assert again.log.log_start_offset == 5
    finally:
        again.close()
