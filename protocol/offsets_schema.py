"""The `commit_offsets` and `fetch_offsets` APIs (a Tidelog extension): schemas, calls
and the record format of the internal `__consumer_offsets` topic.

- `commit_offsets {group, topics: [{topic, partitions: [{partition, offset,
  metadata = ""}]}]}` -> `{topics: [{topic, partitions: [{partition, error,
  message}]}]}`. All entries of one request are stored atomically (one batch).
- `fetch_offsets {group, topics = nil}` where `topics` is nil (everything the
  group committed) or `[{topic, partitions = nil}]` -> `{topics: [{topic,
  partitions: [{partition, offset, metadata, error, message}]}]}`; `offset` is -1
  when the group has committed nothing for that partition (Kafka's answer).

There is no group membership, no generation and no rebalancing: a group id is
only the name under which positions are stored; the application decides which
consumer reads which partition (docs/compaction.md §9).

Storage: one record per (group, topic, partition) in the compacted topic
`__consumer_offsets`, key = msgpack `[group, topic, partition]`, value = msgpack
`{offset, metadata, commit_timestamp}`; the log cleaner keeps the latest commit.

Their schemas are declared and registered in `protocol.schemas` with every other
API's (one table, whatever is imported first); this module has their calls and the
record format.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

import msgpack

from protocol.calls import Call
from protocol.errors import error_class
from protocol.schemas import (
    COMMIT_OFFSETS,
    COMMIT_OFFSETS_SCHEMA,
    FETCH_OFFSETS,
    FETCH_OFFSETS_SCHEMA,
    INT32,
    INT64,
)

OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's log (broker/transactions/state_log.py).
TRANSACTION_STATE_TOPIC = "__transaction_state"
# Topics only the broker writes, creates, reconfigures or deletes (Kafka's
# Topic.isInternal); clients may read and describe them.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC})
# Longest group id: like a topic name, it is part of every stored key.
MAX_GROUP_CHARS = 249
# Longest metadata string a commit may carry (Kafka's offset.metadata.max.bytes).
MAX_METADATA_CHARS = 4096
NO_OFFSET = -1

__all__ = [
    "COMMIT_OFFSETS",
    "COMMIT_OFFSETS_SCHEMA",
    "FETCH_OFFSETS",
    "FETCH_OFFSETS_SCHEMA",
]


class OffsetAndMetadata(NamedTuple):
    """A committed position: the next offset to read, and the application's note."""

    offset: int
    metadata: str = ""


# --- the stored record format --------------------------------------------------


def offset_key(group: str, topic: str, partition: int) -> bytes:
    """The `__consumer_offsets` record key of one group's position in one partition."""
    key: bytes = msgpack.packb([group, topic, partition], use_bin_type=True)
    return key


def offset_value(offset: int, metadata: str, commit_timestamp_ms: int) -> bytes:
    value: bytes = msgpack.packb(
        {"offset": offset, "metadata": metadata, "commit_timestamp": commit_timestamp_ms},
        use_bin_type=True,
    )
    return value


def parse_offset_record(
    key: bytes | None, value: bytes | None
) -> tuple[tuple[str, str, int], OffsetAndMetadata | None] | None:
    """((group, topic, partition), position or None for a tombstone); None if malformed.

    Anything could be in the log (a bug, an old broker, a damaged file), so every
    field is checked against the range it was written in: a str group of 1-249
    characters, a str topic, an int32 partition >= 0, an int64 offset >= 0 (never a
    float or a bool), a str metadata. A record failing any check is not ours.
    """
    if key is None:
        return None
    try:
        parts = msgpack.unpackb(key, raw=False)
        if not isinstance(parts, list) or len(parts) != 3:
            return None
        group, topic, partition = parts
        if not _valid_key(group, topic, partition):
            return None
        if value is None:
            return (group, topic, partition), None
        fields = msgpack.unpackb(value, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException):
        return None
    if not isinstance(fields, dict):
        return None
    offset, metadata = fields.get("offset"), fields.get("metadata", "")
    if type(offset) is not int or not 0 <= offset <= INT64.hi or not isinstance(metadata, str):
        return None
    return (group, topic, partition), OffsetAndMetadata(offset, metadata)


def _valid_key(group: object, topic: object, partition: object) -> bool:
    return (
        isinstance(group, str)
        and 1 <= len(group) <= MAX_GROUP_CHARS
        and isinstance(topic, str)
        and type(partition) is int
        and 0 <= partition <= INT32.hi
    )


# --- typed calls ---------------------------------------------------------------


def commit_offsets(
    group: str,
    offsets: Mapping[tuple[str, int], OffsetAndMetadata | int],
    *,
    generation: int = -1,
    member_id: str = "",
    group_instance_id: str | None = None,
) -> Call[None]:
    """Commit `{(topic, partition): offset or OffsetAndMetadata}`; raises the first
    partition error as its TidelogError class. A group member passes its generation
    and ids, and the broker refuses the commit if the group has moved on."""
    by_topic: dict[str, list[dict[str, Any]]] = {}
    for (topic, partition), position in sorted(offsets.items()):
        if isinstance(position, int):
            position = OffsetAndMetadata(position)
        by_topic.setdefault(topic, []).append(
            {"partition": partition, "offset": position.offset, "metadata": position.metadata}
        )
    body: dict[str, Any] = {
        "group": group,
        "topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()],
    }
    if generation != -1 or member_id or group_instance_id is not None:
        body.update(generation=generation, member_id=member_id, group_instance_id=group_instance_id)

    def extract(answer: dict[str, Any]) -> None:
        for topic in answer["topics"]:
            for part in topic["partitions"]:
                if part.get("error"):
                    raise error_class(part["error"])(part.get("message") or "")

    return Call(COMMIT_OFFSETS, body, extract)


def fetch_offsets(
    group: str, partitions: Iterable[tuple[str, int]] | None = None
) -> Call[dict[tuple[str, int], OffsetAndMetadata]]:
    """The group's committed positions: `{(topic, partition): OffsetAndMetadata}`,
    leaving out partitions with nothing committed. `partitions=None`: all of them."""
    topics = None
    if partitions is not None:
        wanted: dict[str, list[int]] = {}
        for topic, partition in partitions:
            wanted.setdefault(topic, []).append(partition)
        topics = [{"topic": t, "partitions": sorted(p)} for t, p in wanted.items()]

    def extract(answer: dict[str, Any]) -> dict[tuple[str, int], OffsetAndMetadata]:
        found: dict[tuple[str, int], OffsetAndMetadata] = {}
        for topic in answer["topics"]:
            for part in topic["partitions"]:
                if part.get("error"):
                    raise error_class(part["error"])(part.get("message") or "")
                if part["offset"] != NO_OFFSET:
                    found[(topic["topic"], part["partition"])] = OffsetAndMetadata(
                        part["offset"], part.get("metadata", "")
                    )
        return found

    return Call(FETCH_OFFSETS, {"group": group, "topics": topics}, extract)
