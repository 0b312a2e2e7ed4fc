"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup: who may do what, in Kafka's order.

Kafka's GroupMetadataManager checks each classic-group request (group id, session
timeout, protocols, static instance ids, generation) and updates the member it names
before the rebalance machinery acts on it. This class is that first half: it validates,
adds, updates, fences and removes members, then hands the group to `Rebalancer`
(rebalance.py), which owns the phases and their timers. Separate so the request rules
and the state machine can each be read in one sitting.

Thread safety: none; the coordinator's one driver task owns it.
"""

from __future__ import annotations

from collections.abc import Callable

from broker.groups.config import GroupConfig
from broker.groups.group import Group, GroupState, Member
from broker.groups.messages import (
    ErrorResponse,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    MemberIdentity,
    Pending,
    SyncRequest,
    SyncResponse,
)
from broker.groups.outbox import Outbox
from broker.groups.rebalance import Rebalancer
from protocol.clock import ClockMs
from protocol.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)
from protocol.offsets_schema import MAX_GROUP_CHARS

_S = GroupState


class Membership:
    """The member-facing requests over the coordinator's groups (shared, not owned)."""

    def __init__(
        self,
        groups: dict[str, Group],
        config: GroupConfig,
        clock_ms: ClockMs,
        new_member_id: Callable[[str], str],
        outbox: Outbox,
        rebalancer: Rebalancer,
    ) -> None:
        self._groups = groups
        self._config = config
        self._clock_ms = clock_ms
        self._new_member_id = new_member_id
        self._outbox = outbox
        self._rebalancer = rebalancer

    # --- JoinGroup ----------------------------------------------------------------

    def join_group(self, request: JoinRequest) -> JoinResponse | Pending:
        now = self._clock_ms()
        error = self._join_request_error(request)
        if error is not None:
            return JoinResponse(error, member_id=request.member_id)
        group = self._groups.get(request.group_id)
        if not request.member_id:
            if group is None:
                group = self._groups[request.group_id] = Group(request.group_id)
            return self._join_new_member(group, request, now)
        if group is None:
            return JoinResponse(UnknownMemberId.code, member_id=request.member_id)
        return self._join_known_member(group, request, now)

    def _join_request_error(self, request: JoinRequest) -> str | None:
        if not request.group_id or len(request.group_id) > MAX_GROUP_CHARS:
            return InvalidGroupId.code
        low = self._config.group_min_session_timeout_ms
        high = self._config.group_max_session_timeout_ms
        if not low <= request.session_timeout_ms <= high:
            return InvalidSessionTimeout.code
        return None

    def _join_new_member(
        self, group: Group, request: JoinRequest, now: int
    ) -> JoinResponse | Pending:
        if group.is_in(_S.DEAD):
            return JoinResponse(CoordinatorNotAvailable.code)
        if not group.supports(request.protocol_type, request.protocols):
            return JoinResponse(InconsistentGroupProtocol.code)
        member_id = self._new_member_id(request.client_id)
        instance = request.group_instance_id
        if instance is not None and instance in group.static_members:
            return self._replace_static_member(group, request, member_id, now)
        if len(group.members) + len(group.pending_members) >= self._config.group_max_size:
            return JoinResponse(GroupMaxSizeReached.code)
        if instance is not None or not request.require_known_member_id:
            return self._add_member_and_rebalance(group, request, member_id, now)
        group.pending_members[member_id] = now + request.session_timeout_ms
        return JoinResponse(MemberIdRequired.code, member_id=member_id)

    def _join_known_member(
        self, group: Group, request: JoinRequest, now: int
    ) -> JoinResponse | Pending:
        member_id = request.member_id
        if group.is_in(_S.DEAD):
            return JoinResponse(CoordinatorNotAvailable.code, member_id=member_id)
        if not group.supports(request.protocol_type, request.protocols):
            return JoinResponse(InconsistentGroupProtocol.code, member_id=member_id)
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            return self._add_member_and_rebalance(group, request, member_id, now)
        fenced = _instance_error(group, member_id, request.group_instance_id)
        if fenced is not None:
            return JoinResponse(fenced, member_id=member_id)
        member = group.members.get(member_id)
        if member is None:
            return JoinResponse(UnknownMemberId.code, member_id=member_id)
        unchanged = member.protocols == request.protocols
        if group.is_in(_S.COMPLETING_REBALANCE) and unchanged:
            # It missed the JoinResponse: resend.
            return self._rebalancer.join_response(group, member)
        if group.is_in(_S.STABLE) and unchanged and not group.is_leader(member_id):
            return self._rebalancer.join_response(group, member)
        return self._update_member_and_rebalance(group, member, request, now)

    def _add_member_and_rebalance(
        self, group: Group, request: JoinRequest, member_id: str, now: int
    ) -> Pending:
        ticket = self._outbox.ticket()
        member = Member(
            member_id=member_id,
            group_instance_id=request.group_instance_id,
            client_id=request.client_id,
            client_host=request.client_host,
            session_timeout_ms=request.session_timeout_ms,
            rebalance_timeout_ms=request.rebalance_timeout_ms,
            protocol_type=request.protocol_type,
            protocols=request.protocols,
            heartbeat_deadline_ms=now + request.session_timeout_ms,
            join_ticket=ticket,
        )
        if not group.members:
            group.protocol_type = request.protocol_type
        group.members[member_id] = member
        if request.group_instance_id is not None:
            group.static_members[request.group_instance_id] = member_id
        if group.leader_id is None:
            group.leader_id = member_id
        if group.is_in(_S.PREPARING_REBALANCE) and group.initial_delay:
            group.new_member_added = True
        self._rebalancer.maybe_prepare(group, now)
        self._rebalancer.try_complete_join(group, now)
        return Pending(ticket)

    def _update_member_and_rebalance(
        self, group: Group, member: Member, request: JoinRequest, now: int
    ) -> Pending:
        if member.join_ticket is not None:  # a duplicate join: the newer request waits
            self._outbox.deliver(member.join_ticket, JoinResponse(RebalanceInProgress.code))
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        ticket = member.join_ticket = self._outbox.ticket()
        self._rebalancer.maybe_prepare(group, now)
        self._rebalancer.try_complete_join(group, now)
        return Pending(ticket)

    def _replace_static_member(
        self, group: Group, request: JoinRequest, new_id: str, now: int
    ) -> JoinResponse | Pending:
        """A static member restarted (new member id, same instance id): the old id is
        fenced. In Stable with unchanged protocols and not the leader, no rebalance."""
        old_id = group.static_members[request.group_instance_id]  # type: ignore[index]
        old = group.members.pop(old_id)
        if old.join_ticket is not None:
            self._outbox.deliver(
                old.join_ticket, JoinResponse(FencedInstanceId.code, member_id=old_id)
            )
        if old.sync_ticket is not None:
            self._outbox.deliver(old.sync_ticket, SyncResponse(FencedInstanceId.code))
        old.join_ticket = old.sync_ticket = None
        old.member_id = new_id
        group.members[new_id] = old
        group.static_members[request.group_instance_id] = new_id  # type: ignore[index]
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        was_leader = group.is_leader(old_id)
        if was_leader:
            group.leader_id = new_id
        old.heartbeat_deadline_ms = now + request.session_timeout_ms
        if group.is_in(_S.STABLE) and old.protocols == request.protocols and not was_leader:
            # Kafka stores the group so a restart knows the new member id.
            self._rebalancer.store_metadata(group)
            return self._rebalancer.join_response(group, old)
        return self._update_member_and_rebalance(group, old, request, now)

    # --- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------

    def sync_group(self, request: SyncRequest) -> SyncResponse | Pending:
        group = self._groups.get(request.group_id)
        error = _member_error(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return SyncResponse(error)
        assert group is not None
        if (request.protocol_type is not None and request.protocol_type != group.protocol_type) or (
            request.protocol_name is not None and request.protocol_name != group.protocol_name
        ):
            return SyncResponse(InconsistentGroupProtocol.code)
        if group.is_in(_S.PREPARING_REBALANCE):
            return SyncResponse(RebalanceInProgress.code)
        member = group.members[request.member_id]
        group.pending_sync.discard(member.member_id)
        if group.is_in(_S.STABLE):
            return SyncResponse(None, group.protocol_type, group.protocol_name, member.assignment)
        if member.sync_ticket is not None:
            self._outbox.deliver(member.sync_ticket, SyncResponse(RebalanceInProgress.code))
        member.sync_ticket = self._outbox.ticket()
        if group.is_leader(member.member_id) and not group.assignment_in_flight:
            self._rebalancer.store_assignment(group, request.assignments)
        return Pending(member.sync_ticket)

    def heartbeat(self, request: HeartbeatRequest) -> ErrorResponse:
        group = self._groups.get(request.group_id)
        error = _member_error(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        if error is not None:
            return ErrorResponse(error)
        assert group is not None
        member = group.members[request.member_id]
        member.heartbeat_deadline_ms = self._clock_ms() + member.session_timeout_ms
        if group.is_in(_S.PREPARING_REBALANCE):
            return ErrorResponse(RebalanceInProgress.code)
        return ErrorResponse(None)

    def leave_group(self, request: LeaveRequest) -> LeaveResponse:
        group = self._groups.get(request.group_id)
        if group is None:
            return LeaveResponse(UnknownMemberId.code)
        if group.is_in(_S.DEAD):
            return LeaveResponse(CoordinatorNotAvailable.code)
        now = self._clock_ms()
        results = tuple((who, self._leave_one(group, who, now)) for who in request.members)
        return LeaveResponse(None, results)

    def _leave_one(self, group: Group, who: MemberIdentity, now: int) -> str | None:
        member_id = who.member_id
        if who.group_instance_id is not None:
            owner = group.static_members.get(who.group_instance_id)
            if owner is None:
                return UnknownMemberId.code
            if member_id and member_id != owner:
                return FencedInstanceId.code
            member_id = owner
        if member_id in group.pending_members:
            del group.pending_members[member_id]
            self._rebalancer.try_complete_join(group, now)
            return None
        if member_id not in group.members:
            return UnknownMemberId.code
        self._rebalancer.remove_member(group, member_id, now)
        return None


def _instance_error(group: Group, member_id: str, instance: str | None) -> str | None:
    """FENCED_INSTANCE_ID when another member holds `instance`, UNKNOWN when nobody does."""
    if instance is None:
        return None
    owner = group.static_members.get(instance)
    if owner is None:
        return UnknownMemberId.code
    return None if owner == member_id else FencedInstanceId.code


def _member_error(
    group: Group | None, member_id: str, instance: str | None, generation_id: int
) -> str | None:
    """The checks SyncGroup and Heartbeat share, in Kafka's order."""
    if group is None:
        return UnknownMemberId.code
    if group.is_in(_S.DEAD):
        return CoordinatorNotAvailable.code
    fenced = _instance_error(group, member_id, instance)
    if fenced is not None:
        return fenced
    if member_id not in group.members:
        return UnknownMemberId.code
    if generation_id != group.generation_id:
        return IllegalGeneration.code
    return None


__all__ = ["Membership"]
