"""The `Consumer`'s assigned partitions and where each stands (Kafka's SubscriptionState).

A partition's position is the offset of the next record the application gets: the
first record buffered and not yet returned, or, with nothing buffered, the position
the next fetch asks from. Records handed to the iterator but not yet yielded still
count as unread (`drop_iter_buffer` gives them back).

Apart from the fetcher so that the facade, the fetcher and the group coordinator share
one view of the positions, and none of them holds another for it. No I/O here: where a
partition without a position starts is the fetcher's decision (tidelog.fetcher).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import NamedTuple

from protocol.errors import OffsetOutOfRange
from tidelog.consumer_record import ConsumerRecord

AUTO_OFFSET_RESETS = ("earliest", "latest", "none")


class TopicPartition(NamedTuple):
    topic: str
    partition: int


class NoOffsetForPartitionError(OffsetOutOfRange):
    """The position is out of range and auto_offset_reset is "none"."""


@dataclass(slots=True)
class PartitionState:
    fetch_position: int | None = None  # None: reset by auto_offset_reset first
    buffer: list[ConsumerRecord] = field(default_factory=list)
    index: int = 0  # buffer[index:] are not yet returned

    def pending(self) -> int:
        return len(self.buffer) - self.index

    def position(self) -> int | None:
        if self.index < len(self.buffer):
            return self.buffer[self.index].offset
        return self.fetch_position

    def move_to(self, offset: int) -> None:
        """Read from `offset` next, dropping what is buffered."""
        self.fetch_position, self.buffer, self.index = offset, [], 0


class Positions:
    """The assignment, each partition's position and buffered records, and the records
    handed to the iterator. `states` is mutated in place, never rebound, so the fetcher
    and the facade may hold it."""

    def __init__(self) -> None:
        self.states: dict[TopicPartition, PartitionState] = {}
        self.iter: Iterator[ConsumerRecord] = iter(())

    def assign(self, wanted: Iterable[TopicPartition]) -> None:
        """Exactly these partitions; those already assigned keep their positions."""
        self.drop_iter_buffer()
        states = self.states
        kept = {tp: states.get(tp, PartitionState()) for tp in wanted}
        states.clear()
        states.update(kept)

    def state(self, partition: TopicPartition) -> PartitionState:
        state = self.states.get(TopicPartition(*partition))
        if state is None:
            raise KeyError(f"{partition} is not assigned")
        return state

    def seek(self, partition: TopicPartition, offset: int) -> None:
        self.drop_iter_buffer()
        self.state(partition).move_to(offset)

    def drop_iter_buffer(self) -> None:
        """Hand the iterator's unread records back to their partitions' buffers.

        (Draining `iter` also ends a running `for` loop's current chunk: it
        then refills from the partitions, in the same order.)
        """
        leftover = list(self.iter)
        groups: dict[TopicPartition, list[ConsumerRecord]] = {}
        for record in leftover:
            groups.setdefault(TopicPartition(record.topic, record.partition), []).append(record)
        for tp, records in groups.items():
            state = self.states.get(tp)
            if state is not None:
                state.buffer, state.index = records + state.buffer[state.index :], 0

    def take_buffered(self, limit: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to `limit` buffered records, partition by partition; they count as read."""
        taken: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp, state in self.states.items():
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
