"""The phases of a classic rebalance and the timers that end them (Kafka's state machine).

Kafka's GroupMetadataManager drives a ClassicGroup through PreparingRebalance (the join
phase), CompletingRebalance (waiting for the leader's assignment) and Stable, and expires
sessions and late phases with timers. This class is that machinery, apart from the
requests that set it going (membership.py validates JoinGroup, SyncGroup, Heartbeat and
LeaveGroup, then calls in here): every transition of `group.VALID_PREVIOUS` except Dead
(the coordinator's) happens here, so the invariants of tests/broker/groups/test_model.py
are kept in one place.

Thread safety: none; the coordinator's one driver task owns it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import replace

from broker.groups.config import GroupConfig
from broker.groups.group import Group, GroupState, Member
from broker.groups.messages import JoinMember, JoinResponse, SyncResponse
from broker.groups.outbox import FollowUp, Outbox
from broker.groups.records import group_record
from protocol.clock import ClockMs
from protocol.errors import CoordinatorNotAvailable, RebalanceInProgress, UnknownMemberId

_S = GroupState


class Rebalancer:
    """Moves groups between rebalance phases; answers the joins and syncs they hold."""

    def __init__(self, config: GroupConfig, clock_ms: ClockMs, outbox: Outbox) -> None:
        self._config = config
        self._clock_ms = clock_ms
        self._outbox = outbox

    # --- timers -------------------------------------------------------------------

    def deadlines(self, group: Group) -> Iterator[int]:
        """When `tick(group)` has work: sessions, MEMBER_ID_REQUIRED ids, phase ends."""
        yield from group.pending_members.values()
        yield from (
            m.heartbeat_deadline_ms
            for m in group.members.values()
            if m.join_ticket is None and m.sync_ticket is None
        )
        if group.join_deadline_ms is not None:
            yield group.join_deadline_ms
        if group.sync_deadline_ms is not None and group.pending_sync:
            yield group.sync_deadline_ms

    def tick(self, group: Group, now: int) -> None:
        """Expire sessions; end a join phase or a sync phase that timed out."""
        self._expire_members(group, now)
        if group.join_deadline_ms is not None and group.join_deadline_ms <= now:
            self._on_join_deadline(group, now)
        if (
            group.sync_deadline_ms is not None
            and group.sync_deadline_ms <= now
            and group.pending_sync
        ):
            for member_id in sorted(group.pending_sync):
                self.remove_member(group, member_id, now)

    def _expire_members(self, group: Group, now: int) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
                self.try_complete_join(group, now)
        for member in list(group.members.values()):
            waiting = member.join_ticket is not None or member.sync_ticket is not None
            if (
                not waiting
                and member.heartbeat_deadline_ms <= now
                and member.member_id in group.members
            ):
                self.remove_member(group, member.member_id, now)

    # --- the join phase -----------------------------------------------------------

    def maybe_prepare(self, group: Group, now: int) -> None:
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY):
            self.prepare(group, now)

    def prepare(self, group: Group, now: int) -> None:
        """Enter PreparingRebalance: waiting syncs learn of the new rebalance; the join
        phase lasts the longest rebalance timeout (from Empty: Kafka's initial delay)."""
        if group.is_in(_S.COMPLETING_REBALANCE):
            self._fail_pending_syncs(group, RebalanceInProgress.code)
        was_empty = group.is_in(_S.EMPTY)
        group.transition(_S.PREPARING_REBALANCE, now)
        group.rebalances += 1
        group.pending_sync.clear()
        group.sync_deadline_ms = None
        rebalance_ms = group.max_rebalance_timeout_ms()
        delay_ms = self._config.group_initial_rebalance_delay_ms
        group.initial_delay = was_empty and delay_ms > 0
        group.new_member_added = False
        if group.initial_delay:
            group.join_deadline_ms = now + min(delay_ms, rebalance_ms)
            group.initial_budget_deadline_ms = now + rebalance_ms
        else:
            group.join_deadline_ms = now + rebalance_ms

    def try_complete_join(self, group: Group, now: int) -> None:
        if group.is_in(_S.PREPARING_REBALANCE) and not group.initial_delay and group.all_joined():
            self._complete_join(group, now)

    def _on_join_deadline(self, group: Group, now: int) -> None:
        if (
            group.initial_delay
            and group.new_member_added
            and now < group.initial_budget_deadline_ms
        ):
            group.new_member_added = False
            delay_ms = self._config.group_initial_rebalance_delay_ms
            group.join_deadline_ms = min(now + delay_ms, group.initial_budget_deadline_ms)
            return
        group.initial_delay = False
        self._complete_join(group, now)

    def _complete_join(self, group: Group, now: int) -> None:
        """End the join phase: members that did not rejoin are removed; the rest get
        the new generation (the leader also the members' metadata)."""
        group.join_deadline_ms = None
        for member_id in [m for m, member in group.members.items() if member.join_ticket is None]:
            self._drop_member(group, member_id)
        group.generation_id += 1
        if not group.members:
            group.protocol_name = None
            group.leader_id = None
            group.transition(_S.EMPTY, now)
            self.store_metadata(group)
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(_S.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            ticket, member.join_ticket = member.join_ticket, None
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            self._outbox.deliver(ticket, self.join_response(group, member))  # type: ignore[arg-type]
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now + group.max_rebalance_timeout_ms()

    def join_response(self, group: Group, member: Member) -> JoinResponse:
        members: tuple[JoinMember, ...] = ()
        if group.is_leader(member.member_id) and group.protocol_name is not None:
            members = tuple(
                JoinMember(m.member_id, m.group_instance_id, m.metadata_for(group.protocol_name))
                for m in group.members.values()
            )
        return JoinResponse(
            None,
            generation_id=group.generation_id,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader_id=group.leader_id or "",
            member_id=member.member_id,
            members=members,
        )

    def store_metadata(self, group: Group) -> None:
        """Write the group's metadata as it is now; nothing waits for the write."""
        record = group_record(group.group_id, group.metadata())
        self._outbox.append(FollowUp.NONE, group.group_id, 0, [record])

    # --- the sync phase -----------------------------------------------------------

    def store_assignment(self, group: Group, assignments: Mapping[str, bytes]) -> None:
        """The leader's assignment is written before anyone gets it (Kafka stores the
        group first); members the leader left out get empty bytes, unknown ids are ignored."""
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        group.assignment_in_flight = True
        # The record describes the group once Stable, so it carries that state's timestamp.
        group.stable_since_ms = self._clock_ms()
        metadata = replace(group.metadata(), state_timestamp_ms=group.stable_since_ms)
        record = group_record(group.group_id, metadata)
        self._outbox.append(
            FollowUp.STORE_ASSIGNMENT, group.group_id, group.generation_id, [record]
        )

    def assignment_stored(self, group: Group, generation_id: int, error: str | None) -> None:
        if not group.is_in(_S.COMPLETING_REBALANCE) or group.generation_id != generation_id:
            return  # the group moved on; its later record supersedes this one
        group.assignment_in_flight = False
        if error is not None:
            self._fail_pending_syncs(group, CoordinatorNotAvailable.code)
            self.prepare(group, self._clock_ms())
            return
        group.transition(_S.STABLE, group.stable_since_ms)
        now = self._clock_ms()
        for member in group.members.values():
            if member.sync_ticket is not None:
                response = SyncResponse(
                    None, group.protocol_type, group.protocol_name, member.assignment
                )
                self._answer_sync(member, response, now)

    def _fail_pending_syncs(self, group: Group, error: str) -> None:
        now = self._clock_ms()
        for member in group.members.values():
            if member.sync_ticket is not None:
                self._answer_sync(member, SyncResponse(error), now)
        group.assignment_in_flight = False

    def _answer_sync(self, member: Member, response: SyncResponse, now: int) -> None:
        """Answer a waiting SyncGroup and start the member's next session, as Kafka's
        completeAndScheduleNextHeartbeatExpiration: its old deadline passed while it
        waited (waiting members are not expired), and must not expire it at once."""
        self._outbox.deliver(member.sync_ticket, response)  # type: ignore[arg-type]
        member.sync_ticket = None
        member.heartbeat_deadline_ms = now + member.session_timeout_ms

    # --- member removal -----------------------------------------------------------

    def remove_member(self, group: Group, member_id: str, now: int) -> None:
        """A member left or died: the others rebalance."""
        self._drop_member(group, member_id)
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self.prepare(group, now)
        self.try_complete_join(group, now)

    def _drop_member(self, group: Group, member_id: str) -> None:
        """Forget a member; its waiting requests get UNKNOWN_MEMBER_ID."""
        member = group.members.pop(member_id)
        if member.join_ticket is not None:
            self._outbox.deliver(
                member.join_ticket, JoinResponse(UnknownMemberId.code, member_id=member_id)
            )
        if member.sync_ticket is not None:
            self._outbox.deliver(member.sync_ticket, SyncResponse(UnknownMemberId.code))
        if member.group_instance_id is not None:
            group.static_members.pop(member.group_instance_id, None)
        group.pending_sync.discard(member_id)
        if group.is_leader(member_id):
            group.leader_id = next(iter(group.members), None)


__all__ = ["Rebalancer"]
