"""Object key layout in the bucket (docs/retention.md "Key layout and manifest").

Per partition one directory `<prefix>/<topic>-<partition>/` holding

- segment objects `<base_offset:020d>-<segment_id>.<suffix>` with suffix `.log`,
  `.index`, `.timeindex`, `.snapshot` (producer snapshot) and `.txnindex` (when the
  segment has one);
- `manifest.json`, a copy of the broker's `remote-manifest.json` for readers outside
  the broker (Spark), PUT after every change.

`segment_id` is a fresh UUID (32 hex digits) per upload attempt, so a retried or
crashed upload never overwrites an object another manifest entry refers to. An empty
prefix puts the partition directories at the bucket's root.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass

from storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    OFFSET_DIGITS,
    PRODUCER_SNAPSHOT_SUFFIX,
    TIME_INDEX_SUFFIX,
    partition_dir_name,
)

__all__ = [
    "MANIFEST_OBJECT",
    "SEGMENT_OBJECT_SUFFIXES",
    "TXN_INDEX_SUFFIX",
    "SegmentObjectKey",
    "manifest_key",
    "new_segment_id",
    "parse_segment_key",
    "partition_prefix",
    "segment_key",
    "segment_keys",
]

# Kafka's transaction index suffix (`LogFileUtils.TXN_INDEX_FILE_SUFFIX`).
TXN_INDEX_SUFFIX = ".txnindex"
MANIFEST_OBJECT = "manifest.json"
# Every object one uploaded segment may have, `.log` first (uploaded first, deleted last).
SEGMENT_OBJECT_SUFFIXES = (
    LOG_SUFFIX,
    INDEX_SUFFIX,
    TIME_INDEX_SUFFIX,
    PRODUCER_SNAPSHOT_SUFFIX,
    TXN_INDEX_SUFFIX,
)
_SEGMENT_ID_RE = re.compile(r"[0-9a-f]{32}")
_OBJECT_NAME_RE = re.compile(rf"^(\d{{{OFFSET_DIGITS}}})-([0-9a-f]{{32}})(\.[a-z]+)$")


def new_segment_id() -> str:
    """A fresh id for one upload attempt (32 lowercase hex digits)."""
    return uuid.uuid4().hex


def partition_prefix(prefix: str, topic: str, partition: int) -> str:
    """`<prefix>/<topic>-<partition>/` (with the trailing slash, for listing)."""
    directory = partition_dir_name(topic, partition)
    return f"{prefix}/{directory}/" if prefix else f"{directory}/"


def segment_key(
    prefix: str, topic: str, partition: int, base_offset: int, segment_id: str, suffix: str
) -> str:
    """The key of one object of an uploaded segment."""
    if suffix not in SEGMENT_OBJECT_SUFFIXES:
        raise ValueError(f"not a segment object suffix: {suffix!r}")
    if not _SEGMENT_ID_RE.fullmatch(segment_id):
        raise ValueError(f"not a segment id: {segment_id!r}")
    stem = f"{base_offset:0{OFFSET_DIGITS}d}-{segment_id}"
    return partition_prefix(prefix, topic, partition) + stem + suffix


def segment_keys(
    prefix: str,
    topic: str,
    partition: int,
    base_offset: int,
    segment_id: str,
    suffixes: tuple[str, ...] = SEGMENT_OBJECT_SUFFIXES,
) -> dict[str, str]:
    """suffix -> key, for every suffix given (default: all a segment may have)."""
    return {s: segment_key(prefix, topic, partition, base_offset, segment_id, s) for s in suffixes}


def manifest_key(prefix: str, topic: str, partition: int) -> str:
    return partition_prefix(prefix, topic, partition) + MANIFEST_OBJECT


@dataclass(frozen=True, slots=True)
class SegmentObjectKey:
    """A parsed segment object name (the part after the partition directory)."""

    base_offset: int
    segment_id: str
    suffix: str


def parse_segment_key(key: str) -> SegmentObjectKey | None:
    """The base offset, segment id and suffix of a segment object's key, else None
    (the manifest, or a foreign object someone else put under the prefix)."""
    match = _OBJECT_NAME_RE.match(key.rsplit("/", 1)[-1])
    if match is None or match.group(3) not in SEGMENT_OBJECT_SUFFIXES:
        return None
    return SegmentObjectKey(int(match.group(1)), match.group(2), match.group(3))
