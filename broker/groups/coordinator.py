"""The group coordinator: Kafka's classic group protocol as pure state transitions.

No I/O, no trio, no threads: the driver (the trio server) calls one method per request
and `tick()` when `next_deadline()` passes, and performs the effects it drains with
`take_effects()` (messages.py: Deliver answers a Pending request, Append writes records
to `__consumer_offsets` and is acknowledged with `append_completed`). The clock is
injected; every deadline is in epoch milliseconds of that clock.

Invariants (checked by tests/broker/groups/test_model.py):
- a group has one generation; a response of generation g is delivered only while the
  group is at g; every Pending is answered exactly once;
- the group's state changes only along `group.VALID_PREVIOUS`;
- what the log holds, replayed by `records.load_records`, rebuilds the committed offsets
  and the metadata of the last Stable or Empty generation.

The coordinator is the front door, as Kafka's GroupCoordinatorShard: it owns the groups
and routes each call to the part that does one job, all sharing one `Outbox`:
`Membership` (membership.py: JoinGroup, SyncGroup, Heartbeat, LeaveGroup), `Rebalancer`
(rebalance.py: the rebalance phases and their timers), `OffsetManager` (offsets.py:
commits, fetches, OffsetDelete, retention). What spans them stays here: listing,
describing, deleting a group, and the periodic cleanup that deletes an expired group.

Thread safety: none; one driver task owns the coordinator.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable

from broker.groups.config import GroupConfig
from broker.groups.group import Group, GroupState
from broker.groups.membership import Membership
from broker.groups.messages import (
    CommittedOffset,
    Effect,
    ErrorResponse,
    GroupDescription,
    GroupStatistics,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    OffsetCommitRequest,
    Pending,
    Record,
    SyncRequest,
    SyncResponse,
    TopicPartition,
)
from broker.groups.offsets import OffsetManager, deletion_error, txn_commit_error
from broker.groups.outbox import FollowUp, Outbox
from broker.groups.rebalance import Rebalancer
from broker.groups.records import LoadedState, group_record
from protocol.clock import ClockMs
from protocol.errors import CoordinatorNotAvailable

_S = GroupState


def _random_member_id(client_id: str) -> str:
    """Kafka's form: the client id, a dash, a random UUID."""
    return f"{client_id}-{uuid.uuid4()}"


class GroupCoordinator:
    """Every group of one broker. Public calls return a response or a Pending."""

    def __init__(
        self,
        config: GroupConfig,
        clock_ms: ClockMs,
        *,
        member_id_factory: Callable[[str], str] = _random_member_id,
        loaded: LoadedState | None = None,
    ) -> None:
        self._config = config
        self._clock_ms = clock_ms
        self._groups: dict[str, Group] = {}
        self._outbox = Outbox()
        self._rebalancer = Rebalancer(config, clock_ms, self._outbox)
        self._membership = Membership(
            self._groups, config, clock_ms, member_id_factory, self._outbox, self._rebalancer
        )
        self._offsets = OffsetManager(self._groups, clock_ms, self._outbox)
        self._next_retention_check_ms = clock_ms() + config.offsets_retention_check_interval_ms
        if loaded is not None:
            self._restore(loaded)

    # --- the driver's side ------------------------------------------------------

    def take_effects(self) -> list[Effect]:
        return self._outbox.take()

    def next_deadline(self) -> int:
        """When `tick()` next has work (epoch ms); never later than the retention check."""
        deadlines = [self._next_retention_check_ms]
        for group in self._groups.values():
            deadlines.extend(self._rebalancer.deadlines(group))
        return min(deadlines)

    def tick(self) -> None:
        """Expire sessions, end join and sync phases that timed out, expire offsets."""
        now = self._clock_ms()
        for group in list(self._groups.values()):
            self._rebalancer.tick(group, now)
        if now >= self._next_retention_check_ms:
            self._next_retention_check_ms = now + self._config.offsets_retention_check_interval_ms
            self._cleanup(now)

    def append_completed(self, ticket: int, error: str | None = None) -> None:
        """The driver wrote (error None) or failed to write the records of Append(ticket)."""
        follow_up, group_id, token = self._outbox.completed(ticket)
        group = self._groups.get(group_id)
        if follow_up is FollowUp.STORE_ASSIGNMENT:
            if group is not None:
                self._rebalancer.assignment_stored(group, token, error)
        elif follow_up is FollowUp.COMMIT:
            self._offsets.commit_completed(group, ticket, token, error)
        elif follow_up is FollowUp.REPLY:
            self._outbox.deliver(token, ErrorResponse(error and CoordinatorNotAvailable.code))

    # --- membership (membership.py) -------------------------------------------------

    def join_group(self, request: JoinRequest) -> JoinResponse | Pending:
        return self._membership.join_group(request)

    def sync_group(self, request: SyncRequest) -> SyncResponse | Pending:
        return self._membership.sync_group(request)

    def heartbeat(self, request: HeartbeatRequest) -> ErrorResponse:
        return self._membership.heartbeat(request)

    def leave_group(self, request: LeaveRequest) -> LeaveResponse:
        return self._membership.leave_group(request)

    # --- offsets (offsets.py) ---------------------------------------------------------

    def commit_offsets(
        self, request: OffsetCommitRequest, *, fenced: bool = True
    ) -> ErrorResponse | Pending:
        return self._offsets.commit_offsets(request, fenced=fenced)

    def txn_commit_error(self, request: OffsetCommitRequest) -> str | None:
        """Why a TxnOffsetCommit may not commit (None: it may; nothing changes)."""
        return txn_commit_error(self._groups.get(request.group_id), request)

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        return self._offsets.fetch_offsets(group_id)

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> ErrorResponse | Pending:
        return self._offsets.delete_offsets(group_id, partitions)

    # --- groups as a whole ------------------------------------------------------------

    def describe_group(self, group_id: str) -> GroupDescription | None:
        group = self._groups.get(group_id)
        if group is None:
            return None
        return GroupDescription(group_id, group.state.value, group.metadata())

    def list_groups(self) -> list[tuple[str, str, str | None]]:
        """(group id, state, protocol type) of every group, sorted by id."""
        return [
            (g.group_id, g.state.value, g.protocol_type) for _, g in sorted(self._groups.items())
        ]

    def statistics(self) -> list[GroupStatistics]:
        """Every group's state, members, rebalances and committed offsets (for metrics)."""
        return [
            GroupStatistics(
                group_id,
                group.state.value,
                len(group.members),
                group.rebalances,
                {tp: committed.offset for tp, committed in group.offsets.items()},
            )
            for group_id, group in sorted(self._groups.items())
        ]

    def delete_group(self, group_id: str) -> ErrorResponse | Pending:
        """Kafka's DeleteGroups: only an Empty group; its offsets and metadata get tombstones."""
        group = self._groups.get(group_id)
        error = deletion_error(group)
        if error is not None:
            return ErrorResponse(error)
        assert group is not None
        reply = self._outbox.ticket()
        records = self._remove_group(group, self._clock_ms())
        self._outbox.append(FollowUp.REPLY, group_id, reply, records)
        return Pending(reply)

    def _cleanup(self, now: int) -> None:
        """Kafka's cleanupGroupMetadata: expire offsets past retention, then delete each
        Empty group left with nothing (no offsets, commits or MEMBER_ID_REQUIRED ids)."""
        retention_ms = self._config.offsets_retention_ms
        for group in list(self._groups.values()):
            records = self._offsets.expire(group, now, retention_ms)
            removable = group.is_in(_S.EMPTY) and not (
                group.offsets or group.pending_commits or group.pending_members
            )
            if removable:
                records.extend(self._remove_group(group, now))
            if records:
                self._outbox.append(FollowUp.NONE, group.group_id, 0, records)

    def _remove_group(self, group: Group, now: int) -> list[Record]:
        tombstones = self._offsets.delete_all(group)
        tombstones.append(group_record(group.group_id, None))
        group.transition(_S.DEAD, now)
        del self._groups[group.group_id]
        return tombstones

    def _restore(self, loaded: LoadedState) -> None:
        now = self._clock_ms()
        for group_id in sorted(set(loaded.groups) | set(loaded.offsets)):
            group = Group.restored(group_id, loaded.groups.get(group_id), now)
            group.offsets.update(loaded.offsets.get(group_id, {}))
            self._groups[group_id] = group
