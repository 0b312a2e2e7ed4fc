"""Client-side partition assignors (range, roundrobin, sticky) and Kafka's ConsumerProtocol.

The group leader runs one of these on the members' subscriptions and hands the result
to SyncGroup; the broker never looks inside. Member metadata and assignments use
Kafka's ConsumerProtocol layout, so Kafka clients and Tidelog clients read each other's
bytes (all integers big-endian; string = int16 length + UTF-8; bytes = int32 length,
-1 for null; arrays = int32 count):

    Subscription v0: version int16, topics [string], user_data bytes
                 v1: + owned_partitions [topic string, partitions [int32]]
                 v2: + generation_id int32          v3: + rack_id nullable string
    Assignment  v0+: version int16, assigned [topic string, partitions [int32]], user_data bytes

A reader takes the fields its version knows and ignores what a newer writer appended,
as Kafka's ConsumerProtocol does. The sticky assignor also writes Kafka's StickyAssignor
user data (`previous_assignment [topic, [int32]], generation int32`), so Kafka's sticky
assignor can use a Tidelog member's history and vice versa.

Member order everywhere is Kafka's: static members (group.instance.id) first, by
instance id, then the others by member id.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, NamedTuple, Protocol, overload

__all__ = [
    "ASSIGNORS",
    "Assignment",
    "MalformedConsumerProtocol",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "StickyAssignor",
    "Subscription",
    "assign_group",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

TopicPartition = tuple[str, int]
SUBSCRIPTION_VERSION_MAX = 3
ASSIGNMENT_VERSION_MAX = 3
NO_GENERATION = -1
# Bounds on decoded arrays: member metadata comes from other clients.
ARRAY_ITEMS_MAX = 1_000_000

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


class MalformedConsumerProtocol(ValueError):
    """Member metadata or an assignment that is not ConsumerProtocol bytes."""


@dataclass(frozen=True, slots=True)
class Subscription:
    topics: tuple[str, ...]
    user_data: bytes | None = None
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = NO_GENERATION
    rack_id: str | None = None
    version: int = 1


@dataclass(frozen=True, slots=True)
class Assignment:
    partitions: tuple[TopicPartition, ...]
    user_data: bytes | None = None
    version: int = 0


class MemberSubscription(NamedTuple):
    member_id: str
    group_instance_id: str | None
    subscription: Subscription


# --- the wire layout ------------------------------------------------------------------


class _Writer:
    def __init__(self) -> None:
        self.parts: list[bytes] = []

    def i16(self, value: int) -> None:
        self.parts.append(_I16.pack(value))

    def i32(self, value: int) -> None:
        self.parts.append(_I32.pack(value))

    def string(self, value: str | None) -> None:
        if value is None:
            self.i16(-1)
            return
        data = value.encode()
        self.i16(len(data))
        self.parts.append(data)

    def bytes_(self, value: bytes | None) -> None:
        if value is None:
            self.i32(-1)
            return
        self.i32(len(value))
        self.parts.append(value)

    def topic_partitions(self, partitions: Iterable[TopicPartition]) -> None:
        by_topic: dict[str, list[int]] = {}
        for topic, partition in partitions:
            by_topic.setdefault(topic, []).append(partition)
        self.i32(len(by_topic))
        for topic, numbers in sorted(by_topic.items()):
            self.string(topic)
            self.i32(len(numbers))
            for number in sorted(numbers):
                self.i32(number)


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def _take(self, size: int) -> bytes:
        if size < 0 or self.pos + size > len(self.data):
            raise MalformedConsumerProtocol(f"truncated at byte {self.pos} (wanted {size})")
        chunk = self.data[self.pos : self.pos + size]
        self.pos += size
        return chunk

    def i16(self) -> int:
        value: int = _I16.unpack(self._take(2))[0]
        return value

    def i32(self) -> int:
        value: int = _I32.unpack(self._take(4))[0]
        return value

    def count(self) -> int:
        n = self.i32()
        if not 0 <= n <= ARRAY_ITEMS_MAX:
            raise MalformedConsumerProtocol(f"array length {n} at byte {self.pos}")
        return n

    @overload
    def string(self) -> str: ...
    @overload
    def string(self, *, nullable: bool) -> str | None: ...
    def string(self, *, nullable: bool = False) -> str | None:
        """A non-nullable string's -1 length is refused by `_take`: None only if `nullable`."""
        n = self.i16()
        if n == -1 and nullable:
            return None
        try:
            return self._take(n).decode()
        except UnicodeDecodeError as exc:
            raise MalformedConsumerProtocol(f"string at byte {self.pos}: {exc}") from exc

    def bytes_(self) -> bytes | None:
        n = self.i32()
        return None if n == -1 else self._take(n)

    def topic_partitions(self) -> tuple[TopicPartition, ...]:
        found = []
        for _ in range(self.count()):
            topic = self.string()
            for _ in range(self.count()):
                found.append((topic, self.i32()))
        return tuple(found)


def encode_subscription(subscription: Subscription) -> bytes:
    version = subscription.version
    if not 0 <= version <= SUBSCRIPTION_VERSION_MAX:
        raise ValueError(f"subscription version {version} not in 0..{SUBSCRIPTION_VERSION_MAX}")
    w = _Writer()
    w.i16(version)
    w.i32(len(subscription.topics))
    for topic in subscription.topics:
        w.string(topic)
    w.bytes_(subscription.user_data)
    if version >= 1:
        w.topic_partitions(subscription.owned_partitions)
    if version >= 2:
        w.i32(subscription.generation_id)
    if version >= 3:
        w.string(subscription.rack_id)
    return b"".join(w.parts)


def decode_subscription(data: bytes) -> Subscription:
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise MalformedConsumerProtocol(f"subscription version {version}")
    topics = tuple(r.string() for _ in range(r.count()))
    user_data = r.bytes_()
    owned: tuple[TopicPartition, ...] = ()
    generation, rack = NO_GENERATION, None
    if version >= 1:
        owned = r.topic_partitions()
    if version >= 2:
        generation = r.i32()
    if version >= 3:
        rack = r.string(nullable=True)
    known = min(version, SUBSCRIPTION_VERSION_MAX)
    return Subscription(topics, user_data, owned, generation, rack, known)


def encode_assignment(assignment: Assignment) -> bytes:
    w = _Writer()
    w.i16(assignment.version)
    w.topic_partitions(assignment.partitions)
    w.bytes_(assignment.user_data)
    return b"".join(w.parts)


def decode_assignment(data: bytes) -> Assignment:
    """Empty bytes decode to no partitions: the coordinator gives a member the leader
    left out an empty assignment."""
    if not data:
        return Assignment(())
    r = _Reader(data)
    version = r.i16()
    if version < 0:
        raise MalformedConsumerProtocol(f"assignment version {version}")
    partitions = r.topic_partitions()
    user_data = r.bytes_()
    return Assignment(partitions, user_data, min(version, ASSIGNMENT_VERSION_MAX))


def encode_sticky_user_data(owned: Iterable[TopicPartition], generation: int) -> bytes:
    """Kafka's StickyAssignor user data, version 1."""
    w = _Writer()
    w.topic_partitions(owned)
    w.i32(generation)
    return b"".join(w.parts)


def decode_sticky_user_data(data: bytes) -> tuple[tuple[TopicPartition, ...], int]:
    r = _Reader(data)
    owned = r.topic_partitions()
    generation = r.i32() if r.pos < len(data) else NO_GENERATION  # version 0 had none
    return owned, generation


# --- the assignors --------------------------------------------------------------------


def member_order(member: MemberSubscription) -> tuple[int, str]:
    """Kafka's MemberInfo order: static members first by instance id, then member id."""
    if member.group_instance_id is not None:
        return (0, member.group_instance_id)
    return (1, member.member_id)


def _all_partitions(
    partition_counts: Mapping[str, int], topics: Iterable[str]
) -> list[TopicPartition]:
    """Partitions of the subscribed topics the leader knows, sorted by topic then number."""
    wanted = sorted({t for t in topics if t in partition_counts})
    return [(t, p) for t in wanted for p in range(partition_counts[t])]


class Assignor(Protocol):
    name: ClassVar[str]

    def subscription(
        self, topics: Iterable[str], owned: Iterable[TopicPartition], generation_id: int
    ) -> Subscription: ...

    def assign(
        self, partition_counts: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]: ...


class _Eager:
    """Range and round-robin need nothing but the topics (v1 still reports ownership)."""

    def subscription(
        self, topics: Iterable[str], owned: Iterable[TopicPartition], generation_id: int
    ) -> Subscription:
        return Subscription(tuple(sorted(set(topics))), None, tuple(sorted(owned)))


class RangeAssignor(_Eager):
    """Kafka's RangeAssignor: per topic, consecutive ranges in member order; the first
    `partitions % members` members get one extra."""

    name: ClassVar[str] = "range"

    def assign(
        self, partition_counts: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        ordered = sorted(members, key=member_order)
        topics = sorted({t for m in members for t in m.subscription.topics})
        for topic in topics:
            if topic not in partition_counts:
                continue
            takers = [m.member_id for m in ordered if topic in m.subscription.topics]
            per_member, extra = divmod(partition_counts[topic], len(takers))
            start = 0
            for i, member_id in enumerate(takers):
                length = per_member + (1 if i < extra else 0)
                result[member_id].extend((topic, p) for p in range(start, start + length))
                start += length
        return result


class RoundRobinAssignor(_Eager):
    """Kafka's RoundRobinAssignor: all partitions sorted, dealt to members in order,
    skipping members not subscribed to the partition's topic."""

    name: ClassVar[str] = "roundrobin"

    def assign(
        self, partition_counts: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        result: dict[str, list[TopicPartition]] = {m.member_id: [] for m in members}
        ordered = sorted(members, key=member_order)
        if not ordered:
            return result
        position = 0
        topics = {t for m in members for t in m.subscription.topics}
        for topic, partition in _all_partitions(partition_counts, topics):
            while topic not in ordered[position % len(ordered)].subscription.topics:
                position += 1
            result[ordered[position % len(ordered)].member_id].append((topic, partition))
            position += 1
        return result


class StickyAssignor:
    """Balanced like round-robin, but members keep what they owned.

    1. Each member keeps the partitions it owned that still exist and that it still
       subscribes to; a partition two members claim goes to the higher generation.
    2. Unowned partitions go, fewest-eligible-members first, to the least-loaded
       eligible member.
    3. While some member could take a partition from one holding two more than itself,
       move one. With identical subscriptions this ends with loads differing by at most
       one, having moved only what balance requires.
    """

    name: ClassVar[str] = "sticky"

    def subscription(
        self, topics: Iterable[str], owned: Iterable[TopicPartition], generation_id: int
    ) -> Subscription:
        owned = tuple(sorted(owned))
        return Subscription(
            tuple(sorted(set(topics))),
            encode_sticky_user_data(owned, generation_id),
            owned,
            generation_id,
            version=2,
        )

    def assign(
        self, partition_counts: Mapping[str, int], members: Sequence[MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        ordered = sorted(members, key=member_order)
        eligible = {
            m.member_id: {t for t in m.subscription.topics if t in partition_counts}
            for m in ordered
        }
        held: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        for tp, member_id in _claims(ordered, partition_counts, eligible).items():
            held[member_id].append(tp)
        topics = {t for topics in eligible.values() for t in topics}
        claimed = {tp for tps in held.values() for tp in tps}
        unowned = [tp for tp in _all_partitions(partition_counts, topics) if tp not in claimed]
        order = {m.member_id: i for i, m in enumerate(ordered)}
        takers_of = {t: [m for m in held if t in eligible[m]] for t in topics}
        for tp in sorted(unowned, key=lambda tp: (len(takers_of[tp[0]]), tp)):
            taker = min(takers_of[tp[0]], key=lambda m: (len(held[m]), order[m]))
            held[taker].append(tp)
        _balance(held, eligible, order)
        return {member_id: sorted(tps) for member_id, tps in held.items()}


def _owned_and_generation(subscription: Subscription) -> tuple[tuple[TopicPartition, ...], int]:
    """What the member owned, and in which generation. Like Kafka's StickyAssignor, the
    user data wins: an eager consumer revokes everything before joining, so its
    subscription's owned partitions are empty while its user data remembers them."""
    if subscription.user_data:
        try:
            return decode_sticky_user_data(subscription.user_data)
        except MalformedConsumerProtocol:
            pass  # another assignor's user data: fall back to the subscription's fields
    return subscription.owned_partitions, subscription.generation_id


def _claims(
    ordered: Sequence[MemberSubscription],
    partition_counts: Mapping[str, int],
    eligible: Mapping[str, set[str]],
) -> dict[TopicPartition, str]:
    """Valid ownership claims: the highest generation wins a contested partition."""
    best: dict[TopicPartition, tuple[int, str]] = {}
    for member in ordered:
        owned, generation = _owned_and_generation(member.subscription)
        for topic, partition in owned:
            if (
                topic not in eligible[member.member_id]
                or not 0 <= partition < partition_counts[topic]
            ):
                continue
            current = best.get((topic, partition))
            if current is None or generation > current[0]:
                best[(topic, partition)] = (generation, member.member_id)
    return {tp: member_id for tp, (_, member_id) in best.items()}


def _balance(
    held: dict[str, list[TopicPartition]],
    eligible: Mapping[str, set[str]],
    order: Mapping[str, int],
) -> None:
    """Move single partitions from a member to an eligible one holding two fewer."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(held, key=lambda m: (-len(held[m]), order[m])):
            for tp in sorted(held[giver], reverse=True):
                takers = [
                    m for m in held if tp[0] in eligible[m] and len(held[m]) + 1 < len(held[giver])
                ]
                if takers:
                    taker = min(takers, key=lambda m: (len(held[m]), order[m]))
                    held[giver].remove(tp)
                    held[taker].append(tp)
                    moved = True
                    break
            if moved:
                break


ASSIGNORS: dict[str, type[RangeAssignor] | type[RoundRobinAssignor] | type[StickyAssignor]] = {
    cls.name: cls for cls in (RangeAssignor, RoundRobinAssignor, StickyAssignor)
}


def assign_group(
    assignor: Assignor,
    partition_counts: Mapping[str, int],
    members: Iterable[tuple[str, str | None, bytes]],
) -> dict[str, bytes]:
    """The leader's step: JoinGroup's (member id, instance id, metadata) in, SyncGroup's
    {member id: assignment bytes} out."""
    subscriptions = [
        MemberSubscription(member_id, instance, decode_subscription(metadata))
        for member_id, instance, metadata in members
    ]
    plan = assignor.assign(partition_counts, subscriptions)
    return {member_id: encode_assignment(Assignment(tuple(tps))) for member_id, tps in plan.items()}
