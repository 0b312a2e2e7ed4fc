"""One classic group's in-memory state: its members, generation and Kafka's state machine.

States and the transitions Kafka's GroupMetadata allows (anything else is a bug and
asserts):

    Empty --join--> PreparingRebalance --all joined / join timeout--> CompletingRebalance
    CompletingRebalance --leader's assignment stored--> Stable
    Stable / CompletingRebalance --join, leave, death--> PreparingRebalance
    PreparingRebalance --nobody left--> Empty;  any --deleted / expired--> Dead

Pure data plus small queries; the coordinator owns the transitions' side effects.
"""

from __future__ import annotations

import enum
from collections import Counter
from dataclasses import dataclass, field

from broker.groups.messages import (
    NO_GENERATION,
    CommittedOffset,
    GroupMetadata,
    MemberMetadata,
    Protocols,
    TopicPartition,
)


class GroupState(enum.Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.DEAD: frozenset(_S),
}


@dataclass(slots=True)
class Member:
    """A joined member. `join_ticket` / `sync_ticket`: its request waiting for an answer."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    session_timeout_ms: int
    rebalance_timeout_ms: int
    protocol_type: str
    protocols: Protocols
    heartbeat_deadline_ms: int
    assignment: bytes = b""
    join_ticket: int | None = None
    sync_ticket: int | None = None

    def metadata_for(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        raise AssertionError(f"member {self.member_id} does not support {protocol}")

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those everyone supports."""
        return next(name for name, _ in self.protocols if name in candidates)


@dataclass(slots=True)
class Group:
    group_id: str
    state: GroupState = GroupState.EMPTY
    state_timestamp_ms: int | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None
    generation_id: int = 0
    leader_id: str | None = None
    members: dict[str, Member] = field(default_factory=dict)
    static_members: dict[str, str] = field(default_factory=dict)  # instance id -> member id
    pending_members: dict[str, int] = field(default_factory=dict)  # member id -> deadline
    # PreparingRebalance: when the join phase ends, and Kafka's initial delay bookkeeping.
    join_deadline_ms: int | None = None
    initial_delay: bool = False
    initial_budget_deadline_ms: int = 0
    new_member_added: bool = False
    # CompletingRebalance: members that got a JoinResponse but sent no SyncGroup yet.
    pending_sync: set[str] = field(default_factory=set)
    sync_deadline_ms: int | None = None
    assignment_in_flight: bool = False
    stable_since_ms: int = 0  # the state timestamp written with the in-flight assignment
    offsets: dict[TopicPartition, CommittedOffset] = field(default_factory=dict)
    pending_commits: dict[int, dict[TopicPartition, CommittedOffset]] = field(default_factory=dict)
    rebalances: int = 0  # times it entered PreparingRebalance since loaded (a metric)

    def transition(self, target: GroupState, now_ms: int) -> None:
        assert self.state in VALID_PREVIOUS[target], f"{self.group_id}: {self.state} -> {target}"
        self.state = target
        self.state_timestamp_ms = now_ms

    def is_in(self, *states: GroupState) -> bool:
        return self.state in states

    def supports(self, protocol_type: str, protocols: Protocols) -> bool:
        """Kafka's supportsProtocols: an empty group takes any non-empty protocol list;
        otherwise the type must match and one protocol must be supported by everyone."""
        names = {name for name, _ in protocols}
        if not protocol_type or not names:
            return False
        if not self.members:
            return self.protocol_type in (None, protocol_type) or self.is_in(GroupState.EMPTY)
        if protocol_type != self.protocol_type:
            return False
        votes = Counter(name for m in self.members.values() for name, _ in set(m.protocols))
        return any(votes[name] == len(self.members) for name in names)

    def select_protocol(self) -> str:
        """Kafka's selectProtocol: each member votes for its favourite among the protocols
        all members support; the most votes win (ties: the smallest name, for determinism)."""
        candidates = set.intersection(*({n for n, _ in m.protocols} for m in self.members.values()))
        votes = Counter(m.vote(candidates) for m in self.members.values())
        return min(votes, key=lambda name: (-votes[name], name))

    def all_joined(self) -> bool:
        return not self.pending_members and all(
            m.join_ticket is not None for m in self.members.values()
        )

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def metadata(self) -> GroupMetadata:
        """The persisted view: what a GroupMetadata record of this group holds."""
        return GroupMetadata(
            protocol_type=self.protocol_type,
            generation_id=self.generation_id,
            protocol_name=self.protocol_name,
            leader_id=self.leader_id,
            state_timestamp_ms=self.state_timestamp_ms,
            members=tuple(
                MemberMetadata(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    rebalance_timeout_ms=m.rebalance_timeout_ms,
                    session_timeout_ms=m.session_timeout_ms,
                    # Mid-rebalance a new member may lack the last generation's protocol.
                    subscription=dict(m.protocols).get(self.protocol_name or "", b""),
                    assignment=m.assignment,
                )
                for m in self.members.values()
            ),
        )

    @classmethod
    def restored(cls, group_id: str, stored: GroupMetadata | None, now_ms: int) -> Group:
        """A group rebuilt from its last record: Stable with its members, or Empty.
        Members get a fresh session from `now_ms`, as Kafka does after loading."""
        group = cls(group_id)
        if stored is None:
            return group
        group.protocol_type = stored.protocol_type
        group.generation_id = stored.generation_id
        group.protocol_name = stored.protocol_name
        group.state_timestamp_ms = stored.state_timestamp_ms
        if not stored.members or stored.protocol_name is None:
            group.generation_id = max(stored.generation_id, 0)
            return group
        group.leader_id = stored.leader_id
        group.state = GroupState.STABLE
        for m in stored.members:
            group.members[m.member_id] = Member(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                session_timeout_ms=m.session_timeout_ms,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                protocol_type=stored.protocol_type or "",
                protocols=((stored.protocol_name, m.subscription),),
                heartbeat_deadline_ms=now_ms + m.session_timeout_ms,
                assignment=m.assignment,
            )
            if m.group_instance_id is not None:
                group.static_members[m.group_instance_id] = m.member_id
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        return group


__all__ = ["NO_GENERATION", "VALID_PREVIOUS", "Group", "GroupState", "Member"]
