"""Committed offsets: commits, fetches, deletion and retention (Kafka's OffsetMetadataManager).

`OffsetManager` serves OffsetCommit, OffsetFetch and OffsetDelete and writes their
records; the rules it applies are pure functions over one group, below. Apart from the
membership requests because offsets outlive members: a group without members (or one
that never had any) still commits, and its offsets expire on their own clock.

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

from collections.abc import Iterable

from broker.groups.group import Group, GroupState
from broker.groups.messages import (
    NO_GENERATION,
    CommittedOffset,
    ErrorResponse,
    OffsetCommitRequest,
    Pending,
    Record,
    TopicPartition,
)
from broker.groups.outbox import FollowUp, Outbox
from broker.groups.records import offset_record
from protocol.clock import ClockMs
from protocol.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupIdNotFound,
    IllegalGeneration,
    InvalidGroupId,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
    UnknownMemberId,
)
from protocol.offsets_schema import MAX_GROUP_CHARS, MAX_METADATA_CHARS


class OffsetManager:
    """The committed offsets of the coordinator's groups (shared with it, not owned)."""

    def __init__(self, groups: dict[str, Group], clock_ms: ClockMs, outbox: Outbox) -> None:
        self._groups = groups
        self._clock_ms = clock_ms
        self._outbox = outbox

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        group = self._groups.get(group_id)
        return dict(group.offsets) if group is not None else {}

    def commit_offsets(
        self, request: OffsetCommitRequest, *, fenced: bool = True
    ) -> ErrorResponse | Pending:
        """Fenced by generation (`commit_error`) unless `fenced` is False (the offsets of
        a committed transaction, fenced when their TxnOffsetCommit came:
        `txn_commit_error`); the commit is answered once its records are appended, and
        only then visible to fetch_offsets."""
        if not request.group_id or len(request.group_id) > MAX_GROUP_CHARS:
            return ErrorResponse(InvalidGroupId.code)
        if any(len(metadata) > MAX_METADATA_CHARS for _, metadata in request.offsets.values()):
            return ErrorResponse(OffsetMetadataTooLarge.code)
        group = self._groups.get(request.group_id)
        error = commit_error(group, request) if fenced else None
        if error is not None:
            return ErrorResponse(error)
        if not request.offsets:
            return ErrorResponse(None)
        now = self._clock_ms()
        if group is None:
            group = self._groups[request.group_id] = Group(request.group_id)
        member = group.members.get(request.member_id)
        if member is not None:
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
        batch = {
            tp: CommittedOffset(offset, metadata, now)
            for tp, (offset, metadata) in sorted(request.offsets.items())
        }
        reply = self._outbox.ticket()
        records = [offset_record(group.group_id, tp, c) for tp, c in batch.items()]
        ticket = self._outbox.append(FollowUp.COMMIT, group.group_id, reply, records)
        group.pending_commits[ticket] = batch
        return Pending(reply)

    def commit_completed(
        self, group: Group | None, ticket: int, reply: int, error: str | None
    ) -> None:
        """The commit's Append(ticket) was written (error None) or not: apply, answer."""
        batch = group.pending_commits.pop(ticket, None) if group is not None else None
        if error is None and group is not None and batch is not None:
            group.offsets.update(batch)
        self._outbox.deliver(reply, ErrorResponse(error and CoordinatorNotAvailable.code))

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> ErrorResponse | Pending:
        """Kafka's OffsetDelete for an Empty group: the listed partitions' offsets get
        tombstones (the answer waits for them). A group with members (or a commit in
        flight) is NON_EMPTY_GROUP: the broker does not read the members'
        subscriptions, which Kafka would use to allow unsubscribed topics."""
        group = self._groups.get(group_id)
        error = deletion_error(group)
        if error is not None:
            return ErrorResponse(error)
        assert group is not None
        gone = sorted(tp for tp in set(partitions) if tp in group.offsets)
        if not gone:
            return ErrorResponse(None)
        for tp in gone:
            del group.offsets[tp]
        reply = self._outbox.ticket()
        records = [offset_record(group_id, tp, None) for tp in gone]
        self._outbox.append(FollowUp.REPLY, group_id, reply, records)
        return Pending(reply)

    def delete_all(self, group: Group) -> list[Record]:
        """Forget every offset of `group` (it is being deleted); their tombstones."""
        tombstones = [offset_record(group.group_id, tp, None) for tp in sorted(group.offsets)]
        group.offsets.clear()
        return tombstones

    def expire(self, group: Group, now: int, retention_ms: int) -> list[Record]:
        """Forget the offsets of `group` past retention (`expired_offsets`); their tombstones."""
        expired = expired_offsets(group, now, retention_ms)
        for tp in expired:
            del group.offsets[tp]
        return [offset_record(group.group_id, tp, None) for tp in expired]


def deletion_error(group: Group | None) -> str | None:
    """Why `group` may not be deleted, nor its offsets (None: it may): Kafka allows both
    only for an Empty group; here also only with no commit in flight."""
    if group is None or group.is_in(GroupState.DEAD):
        return GroupIdNotFound.code
    if not group.is_in(GroupState.EMPTY) or group.pending_commits:
        return NonEmptyGroup.code
    return None


def txn_commit_error(group: Group | None, request: OffsetCommitRequest) -> str | None:
    """Why a TxnOffsetCommit may not commit to `group` (Kafka's `doTxnCommitOffsets`): a
    member id must be known, a generation (>= 0) current; none of them: allowed."""
    if group is None:
        return None
    if group.is_in(GroupState.DEAD):
        return CoordinatorNotAvailable.code
    if request.group_instance_id is not None:
        owner = group.static_members.get(request.group_instance_id)
        if owner is not None and owner != request.member_id:
            return FencedInstanceId.code
    if request.member_id and request.member_id not in group.members:
        return UnknownMemberId.code
    if request.generation_id >= 0 and request.generation_id != group.generation_id:
        return IllegalGeneration.code
    return None


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


__all__ = [
    "NO_GENERATION",
    "OffsetManager",
    "commit_error",
    "deletion_error",
    "expired_offsets",
]
