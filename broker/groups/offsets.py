"""Offset commit fencing and offset retention: pure rules over one group (Kafka's).

Fencing (a commit is refused unless it comes from the group's current generation):

- generation -1 while the group is Empty: allowed (a client outside group management,
  or an admin tool); with an empty member id and no instance id, refused otherwise
  (UNKNOWN_MEMBER_ID);
- otherwise the member must be known (UNKNOWN_MEMBER_ID), own its static instance id
  (FENCED_INSTANCE_ID), carry the current generation (ILLEGAL_GENERATION), and the group
  must not be waiting for its assignment (REBALANCE_IN_PROGRESS in CompletingRebalance).

Retention (`offsets.retention.minutes`, KIP-211): offsets of an Empty group that used
group management expire `retention` after the group became Empty; offsets of a group
that never used it (simple commits) expire `retention` after their own commit. Offsets
of a group with members do not expire. An in-flight commit's partitions never expire
(the commit's record is already on its way to the log).
"""

from __future__ import annotations

from broker.groups.group import Group, GroupState
from broker.groups.messages import NO_GENERATION, OffsetCommitRequest, TopicPartition
from protocol.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    IllegalGeneration,
    RebalanceInProgress,
    UnknownMemberId,
)


def commit_error(group: Group | None, request: OffsetCommitRequest) -> str | None:
    """Why `request` may not commit to `group` (None: it may). `group` None: no such group."""
    if group is None:
        return None if request.generation_id < 0 else IllegalGeneration.code
    if group.is_in(GroupState.DEAD):
        return CoordinatorNotAvailable.code
    if request.generation_id < 0 and group.is_in(GroupState.EMPTY):
        return None
    identified = (
        request.generation_id >= 0 or request.member_id or request.group_instance_id is not None
    )
    if not identified:
        return UnknownMemberId.code  # outside group management, and the group is not Empty
    if request.group_instance_id is not None:
        owner = group.static_members.get(request.group_instance_id)
        if owner is None:
            return UnknownMemberId.code
        if owner != request.member_id:
            return FencedInstanceId.code
    if request.member_id not in group.members:
        return UnknownMemberId.code
    if request.generation_id != group.generation_id:
        return IllegalGeneration.code
    if group.is_in(GroupState.COMPLETING_REBALANCE):
        return RebalanceInProgress.code
    return None


def expired_offsets(group: Group, now_ms: int, retention_ms: int) -> list[TopicPartition]:
    """The partitions whose committed offsets have outlived the retention period."""
    if group.members or not group.is_in(GroupState.EMPTY):
        return []
    in_flight = {tp for batch in group.pending_commits.values() for tp in batch}
    uses_management = group.protocol_type is not None
    expired = []
    for tp, committed in group.offsets.items():
        if tp in in_flight:
            continue
        since = committed.commit_timestamp_ms
        if uses_management and group.state_timestamp_ms is not None:
            since = group.state_timestamp_ms
        if since + retention_ms <= now_ms:
            expired.append(tp)
    return sorted(expired)


__all__ = ["NO_GENERATION", "commit_error", "expired_offsets"]
