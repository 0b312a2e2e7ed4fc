"""The `Consumer`: read records of assigned partitions (kafka-python's verbs).

    consumer = Consumer(bootstrap_servers="127.0.0.1:9092", auto_offset_reset="earliest")
    consumer.assign([TopicPartition("events", 0)])
    for record in consumer:          # ends after consumer_timeout_ms without records
        print(record.offset, record.value)

Either the application chooses the partitions (`assign`) and owns its positions
(`position`, `seek`), or, with a `group_id`, it `subscribe`s to topics and the
group's members split their partitions (docs/groups.md): the consumer joins on
its next poll, heartbeats in a background thread, and rejoins on its next poll
when a member joins, leaves or dies (`on_revoke` then `on_assign` are called,
in the polling thread). With a `group_id` it can store positions on the broker
(`commit`, `committed`; the `commit_offsets`/`fetch_offsets` extension) and a
partition without a position starts at the group's committed offset. A
subscribed consumer's commits carry its generation, and the broker refuses
them (CommitFailedError) once the group has rebalanced; with
`enable_auto_commit` it commits every `auto_commit_interval_ms` (checked in
poll), before a rebalance and on close, as kafka-python does. Passing topics to
the constructor assigns every partition of them.

A fetch returns whole batches starting with the one that holds the position;
records below the position are dropped, and after compaction offsets may have
gaps, so the next position always comes from the batch header, never from a
record count. Records are decoded by `tidelog.consumer_record` (one C-level
msgspec call per batch, no Python bytecode per record).

Fetches are pipelined one ahead: as soon as an answer arrives, and while there
is more to read, the consumer sends the next fetch (from the new positions, with
no long-poll wait) before it decodes the answer, and a helper thread reads that
next answer off the socket, so the broker and the network work while this
process decodes and the application handles records. The answer is only used
for partitions whose position is still the one it asked for: a `seek`,
`assign` or reset in between makes it stale, and its records for those
partitions are dropped. Before any other request (including through
`consumer.client`) the answer is awaited and kept, so the connection is free.

Transactions (issue 36): `isolation_level` as Kafka's `isolation.level`, default
"read_uncommitted" as Kafka's consumer; "read_committed" stops at the last stable
offset and skips aborted transactions' records. Markers are never records.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from itertools import chain
from types import TracebackType
from typing import Any

from protocol.calls import OffsetAndTimestamp
from protocol.connection import DEFAULT_CLIENT_ID
from protocol.errors import error_from_wire
from tidelog.client import DEFAULT_BOOTSTRAP_SERVER, DEFAULT_REQUEST_TIMEOUT_MS, Client
from tidelog.consumer_record import ConsumerRecord, decode_fetched
from tidelog.coordinator import ConsumerCoordinator, MemberConnection, RebalanceCallback
from tidelog.fetcher import Fetcher
from tidelog.group_member import (
    DEFAULT_ASSIGNORS,
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    CommitFailedError,
    GroupSettings,
)
from tidelog.positions import (
    AUTO_OFFSET_RESETS,
    NoOffsetForPartitionError,
    Positions,
    TopicPartition,
)
from tidelog.security import PLAINTEXT, Security

__all__ = [
    "AUTO_OFFSET_RESETS",
    "CommitFailedError",
    "Consumer",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
    "RebalanceCallback",
    "TopicPartition",
    "decode_fetched",
]

# kafka-python's defaults.
DEFAULT_FETCH_MAX_WAIT_MS = 500
DEFAULT_FETCH_MIN_BYTES = 1
DEFAULT_FETCH_MAX_BYTES = 52_428_800  # all partitions of one fetch: 50 MiB
DEFAULT_MAX_PARTITION_FETCH_BYTES = 1_048_576  # per partition per fetch: 1 MiB
DEFAULT_MAX_POLL_RECORDS = 500
DEFAULT_AUTO_COMMIT_INTERVAL_MS = 5_000


def _setting(component: str, name: str) -> Any:
    """A public setting kept on the component that reads it (so setting it still works)."""

    def get(self: Any) -> Any:
        return getattr(getattr(self, component), name)

    def set_(self: Any, value: Any) -> None:
        setattr(getattr(self, component), name, value)

    return property(get, set_)


class Consumer:
    """Fetches from assigned partitions over one blocking connection. Not thread-safe.

    The front door: the partitions and their positions are a `Positions`, a `Fetcher`
    fills them (one fetch ahead) and owns the connection, and a `ConsumerCoordinator`
    handles the group (subscribe, rebalances, commits).
    """

    # Settings read by the component that uses them (documented as constructor arguments).
    auto_offset_reset: str = _setting("_fetcher", "auto_offset_reset")
    fetch_min_bytes: int = _setting("_fetcher", "fetch_min_bytes")
    fetch_max_bytes: int = _setting("_fetcher", "fetch_max_bytes")
    max_partition_fetch_bytes: int = _setting("_fetcher", "max_partition_fetch_bytes")
    check_crcs: bool = _setting("_fetcher", "check_crcs")
    group_id: str | None = _setting("_fetcher", "group_id")
    enable_auto_commit: bool = _setting("_coordinator", "enable_auto_commit")
    auto_commit_interval_ms: int = _setting("_coordinator", "auto_commit_interval_ms")

    def __init__(
        self,
        *topics: str,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVER,
        auto_offset_reset: str = "latest",
        fetch_max_wait_ms: int = DEFAULT_FETCH_MAX_WAIT_MS,
        fetch_min_bytes: int = DEFAULT_FETCH_MIN_BYTES,
        fetch_max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
        max_partition_fetch_bytes: int = DEFAULT_MAX_PARTITION_FETCH_BYTES,
        max_poll_records: int = DEFAULT_MAX_POLL_RECORDS,
        consumer_timeout_ms: float = float("inf"),
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        check_crcs: bool = True,
        client_id: str | None = DEFAULT_CLIENT_ID,
        group_id: str | None = None,
        enable_auto_commit: bool = True,
        auto_commit_interval_ms: int = DEFAULT_AUTO_COMMIT_INTERVAL_MS,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS,
        max_poll_interval_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS,
        partition_assignment_strategy: Sequence[str] = DEFAULT_ASSIGNORS,
        group_instance_id: str | None = None,
        security: Security = PLAINTEXT,
        isolation_level: str = "read_uncommitted",  # Kafka's default (see the module doc)
    ) -> None:
        if auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(AUTO_OFFSET_RESETS)}")
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.max_poll_records = max_poll_records
        self.consumer_timeout_ms = consumer_timeout_ms
        self._client = Client(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._positions = positions = Positions()
        self._fetcher = fetcher = Fetcher(
            self._client,
            positions,
            auto_offset_reset=auto_offset_reset,
            group_id=group_id,
            fetch_min_bytes=fetch_min_bytes,
            fetch_max_bytes=fetch_max_bytes,
            max_partition_fetch_bytes=max_partition_fetch_bytes,
            check_crcs=check_crcs,
            isolation_level=isolation_level,
        )
        group_settings = None
        if group_id is not None:
            group_settings = GroupSettings(
                group_id,
                assignors=tuple(partition_assignment_strategy),
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=max_poll_interval_ms,
                group_instance_id=group_instance_id,
            )
        self._coordinator = ConsumerCoordinator(
            fetcher,
            positions,
            group_settings,
            MemberConnection(bootstrap_servers, client_id, request_timeout_ms, security),
            enable_auto_commit=enable_auto_commit,
            auto_commit_interval_ms=auto_commit_interval_ms,
        )
        # Direct references for poll and iteration (no call layer on the read path).
        self._states = positions.states
        self._take_buffered = positions.take_buffered
        self._fetch = fetcher.fetch
        self._ensure_group = self._coordinator.ensure_group
        # A consumer dropped without close() must not leave its reader thread waiting.
        weakref.finalize(self, fetcher.reader.stop)
        if topics:
            self.assign(
                TopicPartition(topic, p) for topic in topics for p in self.partitions_for(topic)
            )

    @property
    def client(self) -> Client:
        """The connection, free for a blocking request (waits for the fetch sent ahead)."""
        return self._fetcher.free_client()

    # -- assignment and positions -------------------------------------------------

    def partitions_for_topic(self, topic: str) -> set[int]:
        """kafka-python's name: the partition numbers of `topic`."""
        return set(self.partitions_for(topic))

    def partitions_for(self, topic: str) -> list[int]:
        [entry] = self.client.metadata([topic])
        if entry["error"] is not None:
            raise error_from_wire(entry["error"], entry.get("message"))
        return sorted(p["partition"] for p in entry["partitions"])

    def assign(self, partitions: Iterable[TopicPartition | tuple[str, int]]) -> None:
        """Read exactly these partitions (replaces any earlier assignment)."""
        self._positions.assign([TopicPartition(*tp) for tp in partitions])

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read `partition` from `offset` on the next poll."""
        self._positions.seek(partition, offset)

    def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Seek to the log start offset (all assigned partitions if none given)."""
        for tp, offset in self.beginning_offsets(partitions or list(self._states)).items():
            self.seek(tp, offset)

    def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Seek to the high watermark (all assigned partitions if none given)."""
        for tp, offset in self.end_offsets(partitions or list(self._states)).items():
            self.seek(tp, offset)

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record `poll` or iteration will return."""
        return self._fetcher.position(partition)

    # -- group membership (`subscribe`, needs `group_id`) --------------------------

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: RebalanceCallback | None = None,
        on_revoke: RebalanceCallback | None = None,
    ) -> None:
        """Share the partitions of `topics` with the group's other members. The
        consumer joins on its next poll; `on_revoke` is called with the partitions
        it gives up before every rebalance, `on_assign` with its new ones after."""
        self._coordinator.subscribe(topics, on_assign, on_revoke)

    def subscription(self) -> set[str]:
        subscription = self._coordinator.subscription
        return set(subscription.topics) if subscription is not None else set()

    def unsubscribe(self) -> None:
        """Leave the group (committing first with auto-commit) and drop the partitions."""
        self._coordinator.leave_group()
        self.assign([])

    # -- committed positions (optional: `group_id`) -------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Store positions under `group_id` (default: the current position of every
        assigned partition), so a consumer of the same group resumes there.

        A stored position is the next offset to read, as in Kafka.
        """
        self._coordinator.commit(offsets)

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed position of `partition`, or None."""
        return self._fetcher.committed(self._coordinator.require_group(), partition)

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._fetcher.list_offsets(partitions, "earliest")

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._fetcher.list_offsets(partitions, "latest")

    def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int | datetime]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """First offset whose timestamp is >= the given ms (or datetime); None if none."""
        result: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, when in timestamps.items():
            ms = int(when.timestamp() * 1000) if isinstance(when, datetime) else when
            if type(ms) is not int or ms < 0:
                raise ValueError(f"timestamp for {tp} must be ms >= 0 or a datetime, got {when!r}")
            result[TopicPartition(*tp)] = self.client.offset_for_time(tp[0], tp[1], ms)
        return result

    # -- reading ----------------------------------------------------------------

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Records from any assigned partitions, waiting up to `timeout_ms` for some."""
        limit = self.max_poll_records if max_records is None else max_records
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            self._ensure_group()
            taken = self._take_buffered(limit)
            if taken:
                return taken
            remaining_ms = max(0, int((deadline - time.monotonic()) * 1000))
            self._fetch(min(remaining_ms, self.fetch_max_wait_ms))
            if not any(s.pending() for s in self._states.values()) and (
                time.monotonic() >= deadline
            ):
                return self._take_buffered(limit)

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records as they come; ends after `consumer_timeout_ms` without one."""
        positions = self._positions
        while True:
            yield from positions.iter
            if not self._refill():
                return

    def __next__(self) -> ConsumerRecord:
        """The next record; StopIteration after `consumer_timeout_ms` without one."""
        while True:
            for record in self._positions.iter:
                return record
            if not self._refill():
                raise StopIteration

    def _refill(self) -> bool:
        """Move buffered or newly fetched records to the iterator; False on timeout."""
        deadline = time.monotonic() + self.consumer_timeout_ms / 1000
        while True:
            self._ensure_group()
            batches = self._take_buffered(1 << 62)
            if batches:
                chunks = list(batches.values())
                records = chunks[0] if len(chunks) == 1 else list(chain.from_iterable(chunks))
                self._positions.iter = iter(records)
                return True
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return False
            self._fetch(int(min(remaining_s * 1000, self.fetch_max_wait_ms)))

    def close(self) -> None:
        """Leave the group if subscribed (committing first with auto-commit), then close."""
        self._coordinator.leave_group()
        self._fetcher.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
