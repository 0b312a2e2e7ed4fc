"""Segments of a real log put in the bucket under the key layout (docs/tiered-reads.md),
as the uploader would, for the read-path tests."""

from __future__ import annotations

import uuid
from typing import Any

from storage.log import Log
from storage.remote.keys import segment_key
from storage.remote.remote_segment import RemoteSegmentRef


def upload_segments(client: Any, bucket: str, log: Log, *, prefix: str) -> list[RemoteSegmentRef]:
    """Put every closed segment's `.log`, `.index`, `.timeindex`; their refs."""
    refs = []
    for segment in log._local.segments[:-1]:
        segment_id = uuid.uuid4().hex
        base = segment.base_offset
        for suffix, path in (
            (".log", segment.log_path),
            (".index", segment.offset_index.path),
            (".timeindex", segment.time_index.path),
        ):
            key = segment_key(prefix, log.topic, log.partition, base, segment_id, suffix)
            client.put_object(Bucket=bucket, Key=key, Body=path.read_bytes())
        stem = segment_key(prefix, log.topic, log.partition, base, segment_id, ".log")[
            : -len(".log")
        ]
        refs.append(
            RemoteSegmentRef(
                stem,
                base,
                segment.next_offset - 1,
                segment.size,
                -1,
                segment.max_timestamp,
                segment.layouts,
            )
        )
    return refs
