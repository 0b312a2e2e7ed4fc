"""What the driver hands the coordinator and what it gets back (sans-I/O, like h11).

A call answers at once with a response, or with `Pending(ticket)`: the answer comes
later as a `Deliver(ticket, response)` effect. Effects accumulate inside the
coordinator; the driver drains them with `take_effects()` after every call:

- `Deliver(ticket, response)`: send `response` to the request that got `Pending(ticket)`.
  Every Pending gets exactly one Deliver (errors included), so no request hangs.
- `Append(ticket, records)`: append `records` to `__consumer_offsets` as one batch,
  fsync, then call `append_completed(ticket, error)`. Appends must be written in the
  order they were emitted (one writer), because later records supersede earlier ones.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

TopicPartition = tuple[str, int]
Protocols = tuple[tuple[str, bytes], ...]
# One record of `__consumer_offsets`: (key, value); value None is a tombstone.
Record = tuple[bytes, bytes | None]

NO_GENERATION = -1
_EMPTY: Mapping[str, bytes] = MappingProxyType({})


class CommittedOffset(NamedTuple):
    """A stored position: the next offset to read, the note, and when it was committed."""

    offset: int
    metadata: str
    commit_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class JoinRequest:
    group_id: str
    member_id: str  # "" on a member's first join
    protocol_type: str  # "consumer" for Kafka consumers
    protocols: Protocols  # (assignor name, metadata), the member's preference order
    session_timeout_ms: int
    rebalance_timeout_ms: int
    group_instance_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    # Kafka's JoinGroup v4+: a dynamic member's first join gets MEMBER_ID_REQUIRED.
    # Older clients (v0-v3) are added at once.
    require_known_member_id: bool = True


@dataclass(frozen=True, slots=True)
class JoinMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(frozen=True, slots=True)
class JoinResponse:
    error: str | None
    generation_id: int = NO_GENERATION
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader_id: str = ""
    member_id: str = ""
    members: tuple[JoinMember, ...] = ()  # only the leader's response lists them


@dataclass(frozen=True, slots=True)
class SyncRequest:
    group_id: str
    member_id: str
    generation_id: int
    assignments: Mapping[str, bytes] = field(default_factory=lambda: _EMPTY)  # leader only
    group_instance_id: str | None = None
    protocol_type: str | None = None
    protocol_name: str | None = None


@dataclass(frozen=True, slots=True)
class SyncResponse:
    error: str | None
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    generation_id: int
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class MemberIdentity:
    member_id: str  # "" to leave by group_instance_id alone
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class LeaveRequest:
    group_id: str
    members: tuple[MemberIdentity, ...]


@dataclass(frozen=True, slots=True)
class LeaveResponse:
    error: str | None
    members: tuple[tuple[MemberIdentity, str | None], ...] = ()


@dataclass(frozen=True, slots=True)
class OffsetCommitRequest:
    group_id: str
    offsets: Mapping[TopicPartition, tuple[int, str]]  # (offset, metadata)
    member_id: str = ""
    generation_id: int = NO_GENERATION
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """The answer of calls whose only outcome is an error code (None: success)."""

    error: str | None


Response = JoinResponse | SyncResponse | LeaveResponse | ErrorResponse


@dataclass(frozen=True, slots=True)
class Pending:
    ticket: int


@dataclass(frozen=True, slots=True)
class Deliver:
    ticket: int
    response: Response


@dataclass(frozen=True, slots=True)
class Append:
    ticket: int
    records: tuple[Record, ...]


Effect = Deliver | Append


@dataclass(frozen=True, slots=True)
class MemberMetadata:
    """A member as stored and described: the selected protocol's metadata and its assignment."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupMetadata:
    """The persisted part of a group (Kafka's GroupMetadataValue)."""

    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int | None
    members: tuple[MemberMetadata, ...]


@dataclass(frozen=True, slots=True)
class GroupDescription:
    group_id: str
    state: str
    metadata: GroupMetadata


@dataclass(frozen=True, slots=True)
class GroupStatistics:
    """One group as the metrics see it: state, member count, rebalances, offsets."""

    group_id: str
    state: str
    members: int
    rebalances: int
    offsets: Mapping[TopicPartition, int]
