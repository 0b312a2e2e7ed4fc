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
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import chain
from queue import SimpleQueue
from types import TracebackType
from typing import Any, NamedTuple

from protocol.calls import OffsetAndTimestamp
from protocol.connection import DEFAULT_CLIENT_ID, BrokerProtocolError, Reply
from protocol.errors import (
    IllegalGeneration,
    OffsetOutOfRange,
    RebalanceInProgress,
    TidelogError,
    UnknownMemberId,
    error_from_wire,
)
from protocol.offsets_schema import OffsetAndMetadata, commit_offsets, fetch_offsets
from tidelog.client import DEFAULT_BOOTSTRAP_SERVER, DEFAULT_REQUEST_TIMEOUT_MS, Client
from tidelog.consumer_record import ConsumerRecord, decode_fetched, next_position
from tidelog.group_member import (
    DEFAULT_ASSIGNORS,
    DEFAULT_HEARTBEAT_INTERVAL_MS,
    DEFAULT_MAX_POLL_INTERVAL_MS,
    DEFAULT_SESSION_TIMEOUT_MS,
    CommitFailedError,
    GroupMember,
    GroupSettings,
)
from tidelog.security import PLAINTEXT, Security

__all__ = [
    "CommitFailedError",
    "Consumer",
    "ConsumerRecord",
    "NoOffsetForPartitionError",
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

# A rebalance listener: called with the partitions taken away or handed over.
RebalanceCallback = Callable[[set["TopicPartition"]], None]

AUTO_OFFSET_RESETS = ("earliest", "latest", "none")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class NoOffsetForPartitionError(OffsetOutOfRange):
    """The position is out of range and auto_offset_reset is "none"."""


class _FetchAhead:
    """A fetch sent ahead, whose answer a helper thread reads off the socket.

    Reading while this process decodes keeps a large answer flowing: the socket
    buffers hold only a few MiB, so otherwise the broker stalls on a full socket
    until the consumer comes back for the answer. The thread only uses the
    client until its answer is in, and the consumer touches the client only
    after `wait`, so the client is never used by two threads at once. (This
    relies on `Client.receive` copying each answer's records out of its reused
    receive buffer, as msgpack's decode does: the answer being decoded must not
    alias the buffer the next one is read into.)
    """

    def __init__(
        self, client: Client, positions: dict[TopicPartition, int], reader: _ReplyReader
    ) -> None:
        self.positions = positions
        self._client = client
        self._reply: Reply | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        reader.submit(self)

    def receive(self) -> None:
        """Run by the reader thread."""
        try:
            self._reply = self._client.receive()
        except BaseException as exc:  # handed to the consumer's thread by reply()
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> bool:
        """Wait for the answer; False if reading it failed (the client is closed then)."""
        self._done.wait()
        return self._error is None

    def reply(self) -> Reply:
        if not self.wait():
            assert self._error is not None
            raise self._error
        assert self._reply is not None
        return self._reply


# A closed client wakes the reader at once; this only bounds a pathological wait.
_READER_JOIN_TIMEOUT_S = 5.0


class _ReplyReader:
    """One long-lived thread per consumer that reads each fetch sent ahead.

    Starting and joining a thread per fetch cost about 0.13 ms here, a few percent
    of the consumer's CPU at 1 MiB fetches; handing work to a waiting thread costs a
    fraction of that.
    """

    def __init__(self) -> None:
        self._work: SimpleQueue[_FetchAhead | None] = SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, ahead: _FetchAhead) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tidelog-fetch", daemon=True)
            self._thread.start()
        self._work.put(ahead)

    def _run(self) -> None:
        while (ahead := self._work.get()) is not None:
            ahead.receive()

    def close(self) -> None:
        """End the thread (the caller has closed the client, so no read is left hanging)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._work.put(None)
            thread.join(_READER_JOIN_TIMEOUT_S)

    def stop(self) -> None:
        """Tell the thread to end after its current read, without waiting (finalizer)."""
        self._work.put(None)


@dataclass(slots=True)
class _PartitionState:
    fetch_position: int | None = None  # None: reset by auto_offset_reset first
    buffer: list[ConsumerRecord] = field(default_factory=list)
    index: int = 0  # buffer[index:] are not yet returned

    def pending(self) -> int:
        return len(self.buffer) - self.index

    def position(self) -> int | None:
        if self.index < len(self.buffer):
            return self.buffer[self.index].offset
        return self.fetch_position


@dataclass
class _Subscription:
    """A subscribed consumer's topics, membership and listeners."""

    topics: tuple[str, ...]
    member: GroupMember
    on_assign: RebalanceCallback | None
    on_revoke: RebalanceCallback | None
    next_commit: float = 0.0  # time.monotonic() of the next auto-commit


class Consumer:
    """Fetches from assigned partitions over one blocking connection. Not thread-safe."""

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
    ) -> None:
        if auto_offset_reset not in AUTO_OFFSET_RESETS:
            raise ValueError(f"auto_offset_reset must be one of {', '.join(AUTO_OFFSET_RESETS)}")
        self.auto_offset_reset = auto_offset_reset
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.max_poll_records = max_poll_records
        self.consumer_timeout_ms = consumer_timeout_ms
        self.check_crcs = check_crcs
        self.group_id = group_id
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self._bootstrap_servers = bootstrap_servers
        self._client_id = client_id
        self._request_timeout_ms = request_timeout_ms
        self._security = security
        self._group_settings = (
            None
            if group_id is None
            else GroupSettings(
                group_id,
                assignors=tuple(partition_assignment_strategy),
                session_timeout_ms=session_timeout_ms,
                heartbeat_interval_ms=heartbeat_interval_ms,
                rebalance_timeout_ms=max_poll_interval_ms,
                group_instance_id=group_instance_id,
            )
        )
        self._subscription: _Subscription | None = None
        self._client = Client(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._states: dict[TopicPartition, _PartitionState] = {}
        self._iter: Iterator[ConsumerRecord] = iter(())
        self._ahead: _FetchAhead | None = None  # the fetch sent ahead, if any
        self._reader = _ReplyReader()
        # A consumer dropped without close() must not leave its reader thread waiting.
        weakref.finalize(self, self._reader.stop)
        if topics:
            self.assign(
                TopicPartition(topic, p) for topic in topics for p in self.partitions_for(topic)
            )

    @property
    def client(self) -> Client:
        """The connection, free for a blocking request (waits for the fetch sent ahead)."""
        if self._ahead is not None and not self._ahead.wait():
            self._ahead = None  # it failed and the client closed itself: fetch those again
        return self._client

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
        wanted = [TopicPartition(*tp) for tp in partitions]
        self._drop_iter_buffer()
        self._states = {tp: self._states.get(tp, _PartitionState()) for tp in wanted}

    def assignment(self) -> set[TopicPartition]:
        return set(self._states)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read `partition` from `offset` on the next poll."""
        self._drop_iter_buffer()
        state = self._state(partition)
        state.fetch_position, state.buffer, state.index = offset, [], 0

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
        self._drop_iter_buffer()
        state = self._state(partition)
        if state.position() is None:
            self._start(partition, state)
        position = state.position()
        assert position is not None
        return position

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
        if self._group_settings is None:
            raise ValueError("subscribe() needs a group_id")
        wanted = tuple(sorted(set(topics)))
        if not wanted:
            raise ValueError("subscribe() needs at least one topic")
        if self._subscription is not None:
            self._subscription.topics = wanted
            self._subscription.member.mark_rejoin()
            return
        member = GroupMember(
            self._bootstrap_servers,
            self._group_settings,
            client_id=self._client_id,
            request_timeout_ms=self._request_timeout_ms,
            security=self._security,
        )
        self._subscription = _Subscription(wanted, member, on_assign, on_revoke)
        self.assign([])

    def subscription(self) -> set[str]:
        return set(self._subscription.topics) if self._subscription is not None else set()

    def unsubscribe(self) -> None:
        """Leave the group (committing first with auto-commit) and drop the partitions."""
        if self._subscription is not None:
            self._leave_group()
        self.assign([])

    def _leave_group(self) -> None:
        subscription = self._subscription
        assert subscription is not None
        try:  # (committed while still a member: the commit is fenced)
            self._auto_commit_quietly()
        finally:
            self._subscription = None
            subscription.member.close()

    def _ensure_group(self) -> None:
        """Rejoin if the heartbeat thread saw a rebalance; auto-commit when due."""
        subscription = self._subscription
        if subscription is None:
            return
        if subscription.member.needs_rejoin():
            self._rebalance(subscription)
        if self.enable_auto_commit and time.monotonic() >= subscription.next_commit:
            self._auto_commit_quietly()

    def _rebalance(self, subscription: _Subscription) -> None:
        """Eager: commit and revoke everything, join, then take the new assignment
        (positions of partitions kept are kept)."""
        previous = set(self._states)
        if subscription.member.generation >= 0:
            self._auto_commit_quietly()
            if subscription.on_revoke is not None:
                subscription.on_revoke(previous)
        partitions = subscription.member.join(subscription.topics, previous, self._partition_counts)
        self.assign(partitions)
        subscription.next_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        if subscription.on_assign is not None:
            subscription.on_assign(set(self._states))

    def _auto_commit_quietly(self) -> None:
        """Commit positions if auto-commit is on; a refusal means a rebalance is
        coming, which the next poll handles (kafka-python logs and goes on)."""
        subscription = self._subscription
        if not self.enable_auto_commit or subscription is None:
            return
        subscription.next_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        started = {tp for tp, state in self._states.items() if state.position() is not None}
        if not started:
            return
        try:
            self.commit({tp: self.position(tp) for tp in started})
        except (CommitFailedError, OSError):
            return  # the group moved on or the broker is away: the next poll rejoins
        except TidelogError as exc:
            if not exc.retriable:
                raise

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts = {}
        for entry in self.client.metadata(list(topics)):
            if entry["error"] is None:
                counts[entry["topic"]] = len(entry["partitions"])
        return counts

    # -- committed positions (optional: `group_id`) -------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None = None) -> None:
        """Store positions under `group_id` (default: the current position of every
        assigned partition), so a consumer of the same group resumes there.

        A stored position is the next offset to read, as in Kafka.
        """
        group = self._require_group()
        if offsets is None:
            offsets = {tp: self.position(tp) for tp in self._states}
        if not offsets:
            return
        positions: dict[tuple[str, int], OffsetAndMetadata | int] = dict(offsets.items())
        if self._subscription is None:
            self.client.call(commit_offsets(group, positions))
            return
        member = self._subscription.member
        try:
            self.client.call(commit_offsets(group, positions, **member.commit_fields()))
        except (IllegalGeneration, UnknownMemberId, RebalanceInProgress) as exc:
            member.mark_rejoin(forget_member_id=isinstance(exc, UnknownMemberId))
            raise CommitFailedError(
                f"group {group}: commit refused ({exc.code}); the group rebalanced and "
                "these partitions may belong to another member: poll to rejoin"
            ) from exc

    def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed position of `partition`, or None."""
        group = self._require_group()
        tp = TopicPartition(*partition)
        found = self.client.call(fetch_offsets(group, [tp]))
        position = found.get((tp.topic, tp.partition))
        return None if position is None else position.offset

    def _require_group(self) -> str:
        if self.group_id is None:
            raise ValueError("commit() and committed() need a group_id")
        return self.group_id

    def beginning_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets(partitions, "earliest")

    def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        return self._list_offsets(partitions, "latest")

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

    def _list_offsets(
        self, partitions: Iterable[TopicPartition], spec: str
    ) -> dict[TopicPartition, int]:
        result = {}
        for tp in partitions:
            answer = self.client.list_offsets(tp[0], tp[1], spec)
            if answer is None:
                raise BrokerProtocolError(f"list_offsets {spec} gave no offset for {tp}")
            result[TopicPartition(*tp)] = answer.offset
        return result

    def _state(self, partition: TopicPartition) -> _PartitionState:
        state = self._states.get(TopicPartition(*partition))
        if state is None:
            raise KeyError(f"{partition} is not assigned")
        return state

    def _start(self, tp: TopicPartition, state: _PartitionState) -> None:
        """A first position: the group's committed offset if any, else the reset policy."""
        if self.group_id is not None:
            committed = self.committed(tp)
            if committed is not None:
                state.fetch_position, state.buffer, state.index = committed, [], 0
                return
        self._reset(tp, state)

    def _reset(self, tp: TopicPartition, state: _PartitionState) -> None:
        """auto_offset_reset: no position yet, or the position fell out of the log."""
        if self.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(f"no valid position for {tp[0]}-{tp[1]}")
        [(_, offset)] = self._list_offsets([tp], self.auto_offset_reset).items()
        state.fetch_position, state.buffer, state.index = offset, [], 0

    def _drop_iter_buffer(self) -> None:
        """Hand the iterator's unread records back to their partitions' buffers.

        (Draining `_iter` also ends a running `for` loop's current chunk: it
        then refills from the partitions, in the same order.)
        """
        leftover = list(self._iter)
        groups: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in leftover:
            groups.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        for tp, records in groups.items():
            state = self._states.get(tp)
            if state is not None:
                state.buffer, state.index = records + state.buffer[state.index :], 0

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

    def _take_buffered(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        taken: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, state in self._states.items():
            if limit <= 0:
                break
            if not state.pending():
                continue
            end = min(len(state.buffer), state.index + limit)
            whole = state.index == 0 and end == len(state.buffer)
            chunk = state.buffer if whole else state.buffer[state.index : end]
            state.index = end
            if state.index == len(state.buffer):
                state.buffer, state.index = [], 0
            taken[tp] = chunk
            limit -= len(chunk)
        return taken

    def _fetch(self, max_wait_ms: int) -> None:
        """Fetch for every assigned partition with nothing buffered (taking the answer
        of the fetch sent ahead, if it brings records), then send the next one ahead."""
        ahead = self._take_ahead()
        if ahead is not None:
            positions, reply = ahead
            self._absorb(positions, reply.result())
            if self._ahead is not None or any(state.pending() for state in self._states.values()):
                return
        asked: dict[TopicPartition, int] = {}
        for tp, state in self._states.items():
            if state.pending():
                continue
            if state.fetch_position is None:
                self._start(tp, state)
            assert state.fetch_position is not None
            asked[tp] = state.fetch_position
        if not asked:
            if max_wait_ms:
                time.sleep(max_wait_ms / 1000)  # nothing assigned: behave like a quiet poll
            return
        body = self._fetch_body(asked, max_wait_ms)
        self._absorb(asked, self._client.request("fetch", body, wait_ms=max_wait_ms))

    def _absorb(self, asked: Mapping[TopicPartition, int], answer: dict[str, Any]) -> None:
        """Take a fetch answer for the partitions still at the positions it asked for;
        send the next fetch ahead while there is more to read, then decode."""
        fetched: list[tuple[TopicPartition, _PartitionState, bytes, int]] = []
        error: TidelogError | None = None
        more = False
        for topic_entry in answer["topics"]:
            for entry in topic_entry["partitions"]:
                tp = TopicPartition(topic_entry["topic"], entry["partition"])
                state = self._states.get(tp)
                start = asked.get(tp)
                # Not asked, stale (a seek, assign or reset since), or records to return first.
                if (
                    state is None
                    or start is None
                    or state.fetch_position != start
                    or state.pending()
                ):
                    continue
                try:
                    data = self._accept(tp, state, entry)
                except TidelogError as exc:
                    error = error or exc
                    continue
                if data is not None:
                    fetched.append((tp, state, data, start))
                    high_watermark = entry["high_watermark"]  # nil only beside an error
                    if high_watermark is not None and state.fetch_position < high_watermark:
                        more = True
        try:
            if more and error is None:
                self._send_ahead()
        finally:
            for tp, state, data, start in fetched:
                try:
                    state.buffer, _ = decode_fetched(
                        tp.topic, tp.partition, data, start, check_crcs=self.check_crcs
                    )
                except TidelogError as exc:
                    state.fetch_position = start  # read it again (and fail again) next time
                    error = error or exc
                state.index = 0
        if error is not None:
            raise error

    def _fetch_body(
        self, positions: Mapping[TopicPartition, int], max_wait_ms: int
    ) -> dict[str, Any]:
        wanted: dict[str, list[dict[str, Any]]] = {}
        for tp, position in positions.items():
            wanted.setdefault(tp.topic, []).append(
                {
                    "partition": tp.partition,
                    "offset": position,
                    "max_bytes": self.max_partition_fetch_bytes,
                }
            )
        return {
            "max_wait_ms": max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "topics": [{"topic": t, "partitions": parts} for t, parts in wanted.items()],
        }

    def _send_ahead(self) -> None:
        """Ask for what follows every known position, not waiting for new records."""
        positions = {
            tp: state.fetch_position
            for tp, state in self._states.items()
            if state.fetch_position is not None
        }
        try:
            self._client.send("fetch", self._fetch_body(positions, 0))
        except OSError:  # the client closed itself; the next fetch reconnects
            return
        self._ahead = _FetchAhead(self._client, positions, self._reader)

    def _take_ahead(self) -> tuple[dict[TopicPartition, int], Reply] | None:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        return ahead.positions, ahead.reply()

    def _accept(
        self, tp: TopicPartition, state: _PartitionState, entry: dict[str, Any]
    ) -> bytes | None:
        """One partition's answer: its error handled, its position moved past the
        whole batches it holds; the records, still to decode."""
        error = entry["error"]
        if error == OffsetOutOfRange.code:
            if self.auto_offset_reset == "none":
                raise NoOffsetForPartitionError(
                    f"offset {state.fetch_position} is out of range for {tp[0]}-{tp[1]} "
                    f"(log start {entry['log_start_offset']}, "
                    f"high watermark {entry['high_watermark']})"
                )
            self._reset(tp, state)
            return None
        if error is not None:
            raise error_from_wire(error, entry.get("message"))
        assert state.fetch_position is not None
        data = entry["records"] or b""
        state.fetch_position = next_position(data, state.fetch_position)
        return data

    def __iter__(self) -> Iterator[ConsumerRecord]:
        """Records as they come; ends after `consumer_timeout_ms` without one."""
        while True:
            yield from self._iter
            if not self._refill():
                return

    def __next__(self) -> ConsumerRecord:
        """The next record; StopIteration after `consumer_timeout_ms` without one."""
        while True:
            for record in self._iter:
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
                self._iter = iter(records)
                return True
            remaining_s = deadline - time.monotonic()
            if remaining_s <= 0:
                return False
            self._fetch(int(min(remaining_s * 1000, self.fetch_max_wait_ms)))

    def close(self) -> None:
        """Leave the group if subscribed (committing first with auto-commit), then close."""
        if self._subscription is not None:
            self._leave_group()
        ahead, self._ahead = self._ahead, None
        self._client.close()  # (wakes the thread reading the fetch sent ahead)
        if ahead is not None:
            ahead.wait()
        self._reader.close()

    def __enter__(self) -> Consumer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
