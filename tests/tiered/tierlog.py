"""Builders for the tiered tests: a LogManager with a tiered topic, batches, and the
bytes a segment's objects must hold."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from broker.config import BrokerConfig
from broker.tiered.service import TieredStorage
from storage.log import Log
from storage.manager import LogManager
from storage.remote import BlockingObjectStore
from storage.remote.partition import RemotePartition
from tests.storage.helpers import BASE_TS, ManualClock, batch
from tests.tiered.conftest import S3Server

TOPIC = "events"
SEGMENT_BYTES = 4096
RECORDS_PER_BATCH = 10


class Tiered:
    """One broker's storage side, without the network: a manager, the tiered log, the
    service that uploads and retains, all on a manual clock."""

    def __init__(self, data_dir: Path, s3: S3Server, **topic_configs: Any) -> None:
        self.data_dir = data_dir
        self.s3 = s3
        self.topic_configs = {"segment.bytes": SEGMENT_BYTES, "remote.storage.enable": "true",
                              **topic_configs}  # fmt: skip
        self.clock = ManualClock()
        self.manager = LogManager(data_dir, clock_ms=self.clock, remote_storage_system_enable=True)
        self.manager.open()
        if TOPIC not in self.manager.topics():
            self.manager.create_topic(TOPIC, 1, {k: str(v) for k, v in self.topic_configs.items()})
        config = BrokerConfig.from_props(
            {"remote.log.storage.system.enable": "true",
             "tidelog.remote.storage.bucket": s3.bucket,
             "tidelog.remote.storage.endpoint": s3.endpoint},
            data_dir=data_dir,
        )  # fmt: skip
        self.store = BlockingObjectStore(s3.settings())
        self.service = TieredStorage(self.manager, config, self.store, clock_ms=self.clock)

    @property
    def log(self) -> Log:
        return self.manager.get_log(TOPIC, 0)

    @property
    def part(self) -> RemotePartition:
        return self.service.partition(self.log)

    def produce(self, batches: int, tag: int = 0) -> None:
        for i in range(batches):
            self.log.append(batch(RECORDS_PER_BATCH, value_bytes=100, tag=tag * 1000 + i,
                                  ts=self.clock.now_ms))  # fmt: skip

    def upload_all(self) -> int:
        count = 0
        while (candidate := self.part.next_candidate()) is not None:
            self.part.upload(candidate)
            count += 1
        return count

    def close(self) -> None:
        self.manager.close()
        self.store.close()


def local_segment_bytes(log: Log) -> dict[int, bytes]:
    """base offset -> the .log bytes of every rolled local segment."""
    return {
        info.base_offset: (log.directory / f"{info.base_offset:020d}.log").read_bytes()
        for info in log.segments_info()
        if not info.is_active
    }


__all__ = ["BASE_TS", "TOPIC", "Tiered", "local_segment_bytes"]


def records_in(data: bytes) -> dict[int, bytes]:
    """offset -> value of every record of back-to-back batches."""
    from protocol.batch import iter_records

    return {r.offset: r.value or b"" for r in iter_records(data)}


def check_bucket(s3: S3Server, data_dir: Path, topic: str, partition: int = 0) -> Any:
    """The bucket against the partition's manifest: every object belongs to an entry
    (no orphan left; ids are unique, so none is referenced twice), every readable entry
    has its `.log`; returns the manifest."""
    from storage.fileio import FileIO
    from storage.remote import manifest_key, parse_segment_key, partition_prefix, read_manifest

    directory = data_dir / f"{topic}-{partition}"
    # The listing first: an entry is written before its objects and outlives them,
    # so a broker at work never makes an object listed here look like an orphan.
    keys = s3.object_keys(partition_prefix("tidelog", topic, partition))
    manifest = read_manifest(FileIO(), directory)
    assert manifest is not None, "no manifest"
    live = {s.segment_id: s for s in manifest.segments}
    for key in keys:
        if key == manifest_key("tidelog", topic, partition):
            continue
        parsed = parse_segment_key(key)
        assert parsed is not None, f"foreign object {key}"
        assert parsed.segment_id in live, f"orphan object {key}"
    for segment in manifest.readable():
        key = f"{partition_prefix('tidelog', topic, partition)}{segment.base_offset:020d}-"
        assert key + f"{segment.segment_id}.log" in keys, f"missing .log of {segment}"
    return manifest


def records_across_tiers(
    s3: S3Server, data_dir: Path, topic: str, partition: int = 0
) -> dict[int, bytes]:
    """offset -> value of every record the partition holds, in the store's readable
    segments and in its local segment files (each offset once: a segment in both tiers
    must hold the same records)."""
    manifest = check_bucket(s3, data_dir, topic, partition)
    found: dict[int, bytes] = {}
    prefix = f"tidelog/{topic}-{partition}/"
    for segment in manifest.readable():
        data = s3.get(f"{prefix}{segment.base_offset:020d}-{segment.segment_id}.log")
        assert len(data) == segment.size_bytes
        records = records_in(data)
        assert min(records) >= segment.base_offset and max(records) <= segment.end_offset
        found.update(records)
    directory = data_dir / f"{topic}-{partition}"
    for path in sorted(directory.glob("*.log")):
        for offset, value in records_in(path.read_bytes()).items():
            assert found.setdefault(offset, value) == value, f"tiers differ at {offset}"
    return found
