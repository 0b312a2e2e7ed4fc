"""Consumer offsets on a compacted topic: the `commit_offsets` and `fetch_offsets` handlers.

A group's committed positions are records of the internal compacted topic
`__consumer_offsets` (format in protocol/offsets_schema.py), created on the first
commit with one partition. The log cleaner keeps only the latest commit of each
(group, topic, partition), which is exactly a key-value store on a log.

`OffsetStore` keeps an in-memory copy, loaded by reading the topic once (in a worker
thread) on first use after a start, and updated after each successful append. A
commit is one batch appended and fsynced before the answer, so an acknowledged
commit survives a crash or power loss. No group membership or rebalancing
(docs/compaction.md §9).
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import trio

from protocol.batch import encode_batch, iter_headers, iter_records
from protocol.errors import (
    InvalidRequest,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from protocol.offsets_schema import (
    COMMIT_OFFSETS,
    FETCH_OFFSETS,
    MAX_GROUP_CHARS,
    MAX_METADATA_CHARS,
    NO_OFFSET,
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    offset_key,
    offset_value,
    parse_offset_record,
)

__all__ = ["OFFSETS_HANDLERS", "OffsetStore", "commit_offsets", "fetch_offsets"]

# The internal topic's settings: compacted, Kafka's offsets.topic.segment.bytes.
OFFSETS_TOPIC_CONFIG = {"cleanup.policy": "compact", "segment.bytes": 104857600}
# Bytes read per fetch while loading the topic.
LOAD_READ_BYTES = 4 * 1024 * 1024

Key = tuple[str, str, int]

_stores: weakref.WeakKeyDictionary[Any, OffsetStore] = weakref.WeakKeyDictionary()
_stores_lock = threading.Lock()


class OffsetStore:
    """Committed positions of every group over one LogManager. Thread-safe, blocking."""

    def __init__(self, manager: Any) -> None:
        self._manager = manager
        self._lock = threading.Lock()
        self._positions: dict[Key, OffsetAndMetadata] = {}
        self._loaded = False

    @classmethod
    def of(cls, manager: Any) -> OffsetStore:
        with _stores_lock:
            store = _stores.get(manager)
            if store is None:
                store = _stores[manager] = cls(manager)
            return store

    def _log(self, *, create: bool) -> Any:
        if OFFSETS_TOPIC not in self._manager.topics():
            if not create:
                return None
            try:
                self._manager.create_topic(OFFSETS_TOPIC, 1, OFFSETS_TOPIC_CONFIG)
            except TopicAlreadyExists:
                pass
        return self._manager.get_log(OFFSETS_TOPIC, 0)

    def _load_locked(self) -> None:
        if self._loaded:
            return
        log = self._log(create=False)
        if log is not None:
            offset = log.log_start_offset
            while offset < log.high_watermark:
                data = log.read(offset, LOAD_READ_BYTES).records
                if not data:
                    break
                for record in iter_records(data):
                    parsed = parse_offset_record(record.key, record.value)
                    if parsed is None:
                        continue
                    key, position = parsed
                    if position is None:
                        self._positions.pop(key, None)
                    else:
                        self._positions[key] = position
                offset = max(h.next_offset for _, h in iter_headers(data))
        self._loaded = True

    def commit(
        self, group: str, entries: list[tuple[str, int, OffsetAndMetadata]], now_ms: int
    ) -> None:
        """Append all entries as one batch, fsync, then remember them."""
        if not entries:
            return
        with self._lock:
            self._load_locked()
            log = self._log(create=True)
            rows = [
                (
                    offset_key(group, t, p),
                    offset_value(pos.offset, pos.metadata, now_ms),
                    None,
                    now_ms,
                )
                for t, p, pos in entries
            ]
            info = log.append(encode_batch(rows))
            log.flush(info.last_offset + 1)
            for topic, partition, position in entries:
                self._positions[(group, topic, partition)] = position

    def fetch(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Everything `group` committed, by (topic, partition)."""
        with self._lock:
            self._load_locked()
            return {(t, p): pos for (g, t, p), pos in self._positions.items() if g == group}


def _check_group(group: str) -> None:
    if not group or len(group) > MAX_GROUP_CHARS:
        raise InvalidRequest(f"group: must be 1-{MAX_GROUP_CHARS} characters")


def _partition_error(manager: Any, topic: str, partition: int) -> str | None:
    if topic not in manager.topics():
        return f"unknown topic {topic!r}"
    count = manager.partition_count(topic)
    if not 0 <= partition < count:
        return f"{topic} has partitions 0..{count - 1}, not {partition}"
    return None


async def commit_offsets(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """Store the group's positions; per-partition UNKNOWN_TOPIC_OR_PARTITION."""
    group = body["group"]
    _check_group(group)
    accepted: list[tuple[str, int, OffsetAndMetadata]] = []
    answer: list[dict[str, Any]] = []
    for topic in body["topics"]:
        parts = []
        for p in topic["partitions"]:
            if len(p["metadata"]) > MAX_METADATA_CHARS:
                raise InvalidRequest(f"metadata: longer than {MAX_METADATA_CHARS} characters")
            problem = _partition_error(ctx.manager, topic["topic"], p["partition"])
            if problem is None:
                position = OffsetAndMetadata(p["offset"], p["metadata"])
                accepted.append((topic["topic"], p["partition"], position))
                parts.append({"partition": p["partition"], "error": None, "message": None})
            else:
                parts.append(
                    {
                        "partition": p["partition"],
                        "error": UnknownTopicOrPartition.code,
                        "message": problem,
                    }
                )
        answer.append({"topic": topic["topic"], "partitions": parts})
    store = OffsetStore.of(ctx.manager)
    await trio.to_thread.run_sync(store.commit, group, accepted, ctx.clock_ms())
    return {"topics": answer}


async def fetch_offsets(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
    """The group's positions (-1 where nothing was committed)."""
    group = body["group"]
    _check_group(group)
    store = OffsetStore.of(ctx.manager)
    committed = await trio.to_thread.run_sync(store.fetch, group)
    wanted = body["topics"]
    if wanted is None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(committed):
            by_topic.setdefault(topic, []).append(partition)
        wanted = [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]
    answer = []
    for entry in wanted:
        topic = entry["topic"]
        partitions = entry["partitions"]
        if partitions is None:
            partitions = sorted(p for t, p in committed if t == topic)
        parts = []
        for partition in partitions:
            position = committed.get((topic, partition))
            parts.append(
                {
                    "partition": partition,
                    "offset": NO_OFFSET if position is None else position.offset,
                    "metadata": "" if position is None else position.metadata,
                    "error": None,
                    "message": None,
                }
            )
        answer.append({"topic": topic, "partitions": parts})
    return {"topics": answer}


OFFSETS_HANDLERS = {COMMIT_OFFSETS: commit_offsets, FETCH_OFFSETS: fetch_offsets}
