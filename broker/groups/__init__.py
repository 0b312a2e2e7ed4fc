"""Consumer groups: Kafka's classic group protocol as a pure, clock-injected coordinator.

`GroupCoordinator` (coordinator.py) is driven by the server and routes to `membership`,
`rebalance` and `offsets`; `records` is the `__consumer_offsets` format for group
metadata beside the offset commits; docs/groups.md describes the state machine, the
errors and what the driver must do.
"""

from broker.groups.config import GroupConfig
from broker.groups.coordinator import GroupCoordinator
from broker.groups.group import GroupState
from broker.groups.messages import (
    NO_GENERATION,
    Append,
    CommittedOffset,
    Deliver,
    Effect,
    ErrorResponse,
    GroupDescription,
    GroupMetadata,
    HeartbeatRequest,
    JoinMember,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    MemberIdentity,
    MemberMetadata,
    OffsetCommitRequest,
    Pending,
    SyncRequest,
    SyncResponse,
)
from broker.groups.records import LoadedState, MalformedRecord, load_records

__all__ = [
    "NO_GENERATION",
    "Append",
    "CommittedOffset",
    "Deliver",
    "Effect",
    "ErrorResponse",
    "GroupConfig",
    "GroupCoordinator",
    "GroupDescription",
    "GroupMetadata",
    "GroupState",
    "HeartbeatRequest",
    "JoinMember",
    "JoinRequest",
    "JoinResponse",
    "LeaveRequest",
    "LeaveResponse",
    "LoadedState",
    "MalformedRecord",
    "MemberIdentity",
    "MemberMetadata",
    "OffsetCommitRequest",
    "Pending",
    "SyncRequest",
    "SyncResponse",
    "load_records",
]
