"""The `Consumer`'s fetcher (Kafka's Fetcher and OffsetFetcher): fetch requests for
the assigned partitions, one sent ahead while the last answer is decoded, and where a
partition without a valid position starts.

Apart from the facade because it owns the connection while a fetch is ahead: every
other request goes through `free_client`, which first waits for that answer. An
answer is used only for partitions still at the position it asked for (a `seek`,
`assign` or reset in between makes it stale). The next position always comes from
the batch headers, never from a record count: compaction leaves offset gaps.

Every fetch says `kafka_batches` (docs/protocol.md §9): a Kafka-produced topic's
batches come as they are stored, Kafka v2, and `decode_fetched` reads both layouts,
so the broker converts nothing for this client.

`isolation_level="read_committed"` adds `isolation_level: 1` to every fetch
(docs/protocol.md §9): answers stop at the last stable offset and name the aborted
transactions, whose batches `decode_fetched` skips; transaction markers are never
records, whatever the level.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any

from protocol.connection import BrokerProtocolError, Reply
from protocol.errors import OffsetOutOfRange, TidelogError, error_from_wire
from protocol.offsets_schema import fetch_offsets
from tidelog.client import Client
from tidelog.consumer_record import decode_fetched, next_position
from tidelog.fetch_ahead import FetchAhead, ReplyReader
from tidelog.positions import NoOffsetForPartitionError, PartitionState, Positions, TopicPartition

# Kafka's isolation.level values; Kafka's consumer defaults to read_uncommitted.
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")


class Fetcher:
    """Fills the partitions' buffers from fetch answers, one fetch ahead. Not thread-safe."""

    def __init__(
        self,
        client: Client,
        positions: Positions,
        *,
        auto_offset_reset: str,
        group_id: str | None,
        fetch_min_bytes: int,
        fetch_max_bytes: int,
        max_partition_fetch_bytes: int,
        check_crcs: bool,
        isolation_level: str = "read_uncommitted",
    ) -> None:
        if isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}")
        self.read_committed = isolation_level == "read_committed"
        self.auto_offset_reset = auto_offset_reset
        self.group_id = group_id
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.check_crcs = check_crcs
        self._client = client
        self._positions = positions
        self._states = positions.states
        self._ahead: FetchAhead | None = None  # the fetch sent ahead, if any
        self.reader = ReplyReader()

    def free_client(self) -> Client:
        """The connection, free for a blocking request (waits for the fetch sent ahead)."""
        if self._ahead is not None and not self._ahead.wait():
            self._ahead = None  # it failed and the client closed itself: fetch those again
        return self._client

    # -- where a partition starts ---------------------------------------------------

    def position(self, partition: TopicPartition) -> int:
        """The offset of the next record `poll` or iteration will return."""
        positions = self._positions
        positions.drop_iter_buffer()
        state = positions.state(partition)
        if state.position() is None:
            self._start(partition, state)
        position = state.position()
        assert position is not None
        return position

    def committed(self, group: str, partition: TopicPartition) -> int | None:
        """The group's committed position of `partition`, or None."""
        tp = TopicPartition(*partition)
        found = self.free_client().call(fetch_offsets(group, [tp]))
        position = found.get((tp.topic, tp.partition))
        return None if position is None else position.offset

    def list_offsets(
        self, partitions: Iterable[TopicPartition], spec: str
    ) -> dict[TopicPartition, int]:
        result = {}
        for tp in partitions:
            answer = self.free_client().list_offsets(tp[0], tp[1], spec)
            if answer is None:
                raise BrokerProtocolError(f"list_offsets {spec} gave no offset for {tp}")
            result[TopicPartition(*tp)] = answer.offset
        return result

    def _start(self, tp: TopicPartition, state: PartitionState) -> None:
        """A first position: the group's committed offset if any, else the reset policy."""
        if self.group_id is not None:
            committed = self.committed(self.group_id, tp)
            if committed is not None:
                state.move_to(committed)
                return
        self._reset(tp, state)

    def _reset(self, tp: TopicPartition, state: PartitionState) -> None:
        """auto_offset_reset: no position yet, or the position fell out of the log."""
        if self.auto_offset_reset == "none":
            raise NoOffsetForPartitionError(f"no valid position for {tp[0]}-{tp[1]}")
        [(_, offset)] = self.list_offsets([tp], self.auto_offset_reset).items()
        state.move_to(offset)

    # -- fetching ---------------------------------------------------------------------

    def fetch(self, max_wait_ms: int) -> None:
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
        fetched: list[tuple[TopicPartition, PartitionState, bytes, int, Any]] = []
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
                    aborted = None
                    if self.read_committed:
                        listed = entry.get("aborted_transactions") or ()
                        aborted = [(a["producer_id"], a["first_offset"]) for a in listed]
                    fetched.append((tp, state, data, start, aborted))
                    high_watermark = entry["high_watermark"]  # nil only beside an error
                    if self.read_committed and entry.get("last_stable_offset") is not None:
                        high_watermark = entry["last_stable_offset"]
                    if high_watermark is not None and state.fetch_position < high_watermark:
                        more = True
        try:
            if more and error is None:
                self._send_ahead()
        finally:
            for tp, state, data, start, aborted in fetched:
                try:
                    state.buffer, _ = decode_fetched(
                        tp.topic,
                        tp.partition,
                        data,
                        start,
                        check_crcs=self.check_crcs,
                        aborted=aborted,
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
        body: dict[str, Any] = {
            "max_wait_ms": max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "max_bytes": self.fetch_max_bytes,
            "topics": [{"topic": t, "partitions": parts} for t, parts in wanted.items()],
            "kafka_batches": True,
        }
        if self.read_committed:  # else the request is byte for byte what it was
            body["isolation_level"] = 1
        return body

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
        self._ahead = FetchAhead(self._client, positions, self.reader)

    def _take_ahead(self) -> tuple[dict[TopicPartition, int], Reply] | None:
        ahead, self._ahead = self._ahead, None
        if ahead is None:
            return None
        return ahead.positions, ahead.reply()

    def _accept(
        self, tp: TopicPartition, state: PartitionState, entry: dict[str, Any]
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

    def close(self) -> None:
        """Close the connection (which wakes the thread reading the fetch sent ahead)
        and end that thread."""
        ahead, self._ahead = self._ahead, None
        self._client.close()
        if ahead is not None:
            ahead.wait()
        self.reader.close()
