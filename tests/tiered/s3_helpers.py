"""The S3 side of the read-path tests: a moto server bucket, a boto3 store over it,
and an upload of a log's closed segments under docs/tiered-storage.md's key layout."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from botocore.config import Config
from moto.server import ThreadedMotoServer

from storage.log import Log
from storage.remote.remote_segment import RemoteSegmentRef

CLIENT_CONFIG = Config(
    s3={"addressing_style": "path"},
    retries={"max_attempts": 1, "mode": "standard"},
    connect_timeout=2,
    read_timeout=5,
)


@dataclass
class S3Bucket:
    server: ThreadedMotoServer
    endpoint: str
    name: str
    client: Any
    running: bool = True

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.server.stop()


class Boto3Store:
    """get/get_range over a bucket: the RangeStore shape storage.remote reads through."""

    def __init__(self, bucket: S3Bucket) -> None:
        self._client, self._bucket = bucket.client, bucket.name

    def get(self, key: str) -> bytes:
        data: bytes = self._client.get_object(Bucket=self._bucket, Key=key)["Body"].read()
        return data

    def get_range(self, key: str, start: int, length: int) -> bytes:
        rng = f"bytes={start}-{start + length - 1}"
        data: bytes = self._client.get_object(Bucket=self._bucket, Key=key, Range=rng)[
            "Body"
        ].read()
        return data


def upload_segments(bucket: S3Bucket, log: Log, *, prefix: str) -> list[RemoteSegmentRef]:
    """Put every closed segment's `.log`, `.index`, `.timeindex` under the key layout."""
    refs = []
    for segment in log._local.segments[:-1]:
        stem = f"{prefix}/{log.topic}-{log.partition}/{segment.base_offset:020d}-{uuid.uuid4()}"
        for suffix, path in (
            (".log", segment.log_path),
            (".index", segment.offset_index.path),
            (".timeindex", segment.time_index.path),
        ):
            bucket.client.put_object(Bucket=bucket.name, Key=stem + suffix, Body=path.read_bytes())
        refs.append(
            RemoteSegmentRef(
                stem,
                segment.base_offset,
                segment.next_offset - 1,
                segment.size,
                -1,
                segment.max_timestamp,
                segment.layouts or 6,
            )
        )
    return refs
