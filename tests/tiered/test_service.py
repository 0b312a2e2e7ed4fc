"""The remote-log-manager task (TieredStorage.run_once) under trio: uploads and
retention in worker threads, a deleted topic's objects removed, failing partitions
backing off while the others proceed."""

from __future__ import annotations

from pathlib import Path

import trio

from broker.tiered.service import TieredStorage
from storage.remote import BlockingObjectStore
from tests.tiered.conftest import S3Server
from tests.tiered.tierlog import TOPIC, Tiered, records_across_tiers


async def test_run_once_uploads_retains_and_cleans_up(tmp_path: Path, s3_server: S3Server) -> None:
    t = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 4096})
    try:
        t.produce(20)
        produced = records_across_tiers_local(t)
        loop_token = trio.lowlevel.current_trio_token()
        await t.service.run_once()
        assert trio.lowlevel.current_trio_token() is loop_token
        assert t.part.manifest.readable()
        assert t.log.local_log_start_offset > 0
        assert records_across_tiers(s3_server, t.data_dir, TOPIC) == produced
        stats = t.service.statistics()
        assert stats.segments_uploaded == len(t.part.manifest.readable())
        assert stats.segments_pending_upload == 0 and stats.upload_errors == {}
        t.manager.delete_topic(TOPIC)
        await t.service.run_once()
        assert s3_server.object_keys() == []
    finally:
        t.close()


def records_across_tiers_local(t: Tiered) -> dict[int, bytes]:
    from tests.tiered.tierlog import records_in

    out: dict[int, bytes] = {}
    for path in sorted(t.log.directory.glob("*.log")):
        out.update(records_in(path.read_bytes()))
    return out


async def test_a_failing_store_backs_off_and_counts_errors(
    tmp_path: Path, s3_server: S3Server
) -> None:
    t = Tiered(tmp_path / "data", s3_server, **{"local.retention.bytes": 0})
    down = BlockingObjectStore(
        s3_server.settings(endpoint="http://127.0.0.1:9", connect_timeout_ms=200, max_attempts=1)
    )
    service = TieredStorage(t.manager, t.service.config, down, clock_ms=t.clock)
    try:
        t.produce(8)
        before = sorted(p.name for p in t.log.directory.glob("*.log"))
        await service.run_once()
        stats = service.statistics()
        assert stats.upload_errors == {"unavailable": 1} and stats.partitions_failing == 1
        await service.run_once()  # backing off: not tried again at once
        assert service.statistics().upload_errors == {"unavailable": 1}
        assert sorted(p.name for p in t.log.directory.glob("*.log")) == before  # nothing lost
    finally:
        down.close()
        t.close()
