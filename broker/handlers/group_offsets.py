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
from dataclasses import dataclass
from typing import Any

import trio

from broker.context import Answer, Body, BrokerContext
from broker.logging import get_logger
from protocol.batch import BatchHeader, decode_records, encode_batch, iter_headers
from protocol.errors import (
    InvalidRequest,
    InvalidTopic,
    TidelogError,
    TopicAlreadyExists,
    UnknownTopicOrPartition,
)
from protocol.offsets_schema import (
    MAX_GROUP_CHARS,
    MAX_METADATA_CHARS,
    NO_OFFSET,
    OFFSETS_TOPIC,
    OffsetAndMetadata,
    offset_key,
    offset_value,
    parse_offset_record,
)
from storage.log import Log
from storage.manager import LogManager

__all__ = [
    "INTERNAL_TOPICS",
    "OffsetStore",
    "OffsetStoreStatistics",
    "check_not_internal",
    "commit_offsets",
    "fetch_offsets",
]

log = get_logger(component="offsets")

# Topics only the broker writes, creates, reconfigures or deletes (Kafka's
# Topic.isInternal); clients may read and describe them.
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC})

# The internal topic's settings when the broker creates it: compacted, with
# segment.bytes from the broker's offsets.topic.segment.bytes (clients cannot alter it).
OFFSETS_TOPIC_POLICY = "compact"
# Bytes read per fetch while loading the topic.
LOAD_READ_BYTES = 4 * 1024 * 1024

Key = tuple[str, str, int]

_stores: weakref.WeakKeyDictionary[LogManager, OffsetStore] = weakref.WeakKeyDictionary()
_stores_lock = threading.Lock()


def check_not_internal(topic: str, action: str) -> None:
    """INVALID_TOPIC_EXCEPTION for a client's write, create, alter or delete of an
    internal topic (what Kafka answers a produce or delete_records to one)."""
    if topic in INTERNAL_TOPICS:
        raise InvalidTopic(f"cannot {action} internal topic {topic}: it is managed by the broker")


@dataclass(frozen=True, slots=True)
class OffsetStoreStatistics:
    """What the latest load of `__consumer_offsets` found (STYLE item 11)."""

    loaded_records: int  # commits and tombstones applied
    malformed_records: int  # records skipped: not a valid key/value (or undecodable batch)
    unreadable_ranges: int  # reads that failed (fenced damage); skipped to the next segment


def _next_segment_base(plog: Log, offset: int) -> int:
    """The first segment base above `offset`, or the high watermark (ends the load)."""
    bases = [info.base_offset for info in plog.segments_info() if info.base_offset > offset]
    return min(bases, default=plog.high_watermark)


class OffsetStore:
    """Committed positions of every group over one LogManager. Thread-safe, blocking.

    Rebuilt from a log anyone's bug could have written: a record that is not a valid
    commit is skipped and counted, a batch that cannot be decoded or a range that
    cannot be read is skipped, so one bad record never stops every group's offsets.
    """

    def __init__(self, manager: LogManager, segment_bytes: int) -> None:
        self._manager = manager
        self._topic_config = {
            "cleanup.policy": OFFSETS_TOPIC_POLICY,
            "segment.bytes": segment_bytes,
        }
        self._lock = threading.Lock()
        self._positions: dict[Key, OffsetAndMetadata] = {}
        self._loaded = False
        self._stats = OffsetStoreStatistics(0, 0, 0)
        self._first_skipped: int | None = None

    @classmethod
    def of(cls, manager: LogManager, segment_bytes: int) -> OffsetStore:
        """The store of `manager` (made on first use, with that segment size)."""
        with _stores_lock:
            store = _stores.get(manager)
            if store is None:
                store = _stores[manager] = cls(manager, segment_bytes)
            return store

    def _log(self, *, create: bool) -> Log | None:
        if OFFSETS_TOPIC not in self._manager.topics():
            if not create:
                return None
            try:
                self._manager.create_topic(OFFSETS_TOPIC, 1, self._topic_config)
            except TopicAlreadyExists:
                pass
        return self._manager.get_log(OFFSETS_TOPIC, 0)

    def _load_locked(self) -> None:
        if self._loaded:
            return
        plog = self._log(create=False)
        loaded = malformed = unreadable = 0
        if plog is not None:
            policy = self._manager.topic_config(OFFSETS_TOPIC).cleanup_policy
            if policy != {OFFSETS_TOPIC_POLICY}:  # made by a client before it was refused
                log.warning("offsets_topic_misconfigured", cleanup_policy=sorted(policy))
            offset = plog.log_start_offset
            while offset < plog.high_watermark:
                try:
                    data = plog.read(offset, LOAD_READ_BYTES).records
                    headers = list(iter_headers(data))
                except TidelogError as exc:  # fenced damage: go on at the next segment
                    unreadable += 1
                    log.error("offsets_load_unreadable", offset=offset, error=exc.code)
                    offset = _next_segment_base(plog, offset)
                    continue
                if not headers:
                    break
                for pos, header in headers:
                    applied, skipped = self._apply_batch(data, pos, header)
                    loaded, malformed = loaded + applied, malformed + skipped
                    offset = header.next_offset
        self._stats = OffsetStoreStatistics(loaded, malformed, unreadable)
        if malformed or unreadable:
            log.warning(
                "offsets_load_skipped",
                topic=OFFSETS_TOPIC,
                malformed_records=malformed,
                first_malformed_offset=self._first_skipped,
                unreadable_ranges=unreadable,
            )
        self._loaded = True

    def _apply_batch(self, data: bytes, pos: int, header: BatchHeader) -> tuple[int, int]:
        """(records applied, records skipped) of the batch at `pos`."""
        try:
            records = decode_records(data, pos)
        except TidelogError:
            if self._first_skipped is None:
                self._first_skipped = header.base_offset
            return 0, header.record_count
        applied = 0
        for record in records:
            parsed = parse_offset_record(record.key, record.value)
            if parsed is None:
                if self._first_skipped is None:
                    self._first_skipped = record.offset
                continue
            key, position = parsed
            if position is None:
                self._positions.pop(key, None)
            else:
                self._positions[key] = position
            applied += 1
        return applied, len(records) - applied

    def statistics(self) -> OffsetStoreStatistics:
        return self._stats

    def commit(
        self, group: str, entries: list[tuple[str, int, OffsetAndMetadata]], now_ms: int
    ) -> None:
        """Append all entries as one batch, fsync, then remember them."""
        if not entries:
            return
        with self._lock:
            self._load_locked()
            plog = self._log(create=True)
            rows = [
                (
                    offset_key(group, t, p),
                    offset_value(pos.offset, pos.metadata, now_ms),
                    None,
                    now_ms,
                )
                for t, p, pos in entries
            ]
            info = plog.append(encode_batch(rows))
            plog.flush(info.last_offset + 1)
            for topic, partition, position in entries:
                self._positions[(group, topic, partition)] = position

    def fetch(self, group: str) -> dict[tuple[str, int], OffsetAndMetadata]:
        """Everything `group` committed, by (topic, partition)."""
        with self._lock:
            self._load_locked()
            return {(t, p): pos for (g, t, p), pos in self._positions.items() if g == group}


def _store(ctx: BrokerContext) -> OffsetStore:
    return OffsetStore.of(ctx.manager, ctx.config.offsets_topic_segment_bytes)


def _check_group(group: str) -> None:
    if not group or len(group) > MAX_GROUP_CHARS:
        raise InvalidRequest(f"group: must be 1-{MAX_GROUP_CHARS} characters")


def _partition_error(manager: LogManager, topic: str, partition: int) -> str | None:
    if topic not in manager.topics():
        return f"unknown topic {topic!r}"
    count = manager.partition_count(topic)
    if not 0 <= partition < count:
        return f"{topic} has partitions 0..{count - 1}, not {partition}"
    return None


async def commit_offsets(ctx: BrokerContext, body: Body) -> Answer:
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
            if p["offset"] < 0:  # a position is an offset to read next, never negative
                raise InvalidRequest(f"offset: must be >= 0, got {p['offset']}")
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
    store = _store(ctx)
    await trio.to_thread.run_sync(store.commit, group, accepted, ctx.clock_ms())
    return {"topics": answer}


async def fetch_offsets(ctx: BrokerContext, body: Body) -> Answer:
    """The group's positions (-1 where nothing was committed); a partition with no
    commit that does not exist either gets UNKNOWN_TOPIC_OR_PARTITION, as in commit."""
    group = body["group"]
    _check_group(group)
    store = _store(ctx)
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
            problem = None
            if position is None:
                problem = _partition_error(ctx.manager, topic, partition)
            parts.append(
                {
                    "partition": partition,
                    "offset": NO_OFFSET if position is None else position.offset,
                    "metadata": "" if position is None else position.metadata,
                    "error": None if problem is None else UnknownTopicOrPartition.code,
                    "message": problem,
                }
            )
        answer.append({"topic": topic, "partitions": parts})
    return {"topics": answer}
