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

Thread safety: none; one driver task owns the coordinator.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace

from broker.groups.config import GroupConfig
from broker.groups.group import Group, GroupState, Member
from broker.groups.messages import (
    Append,
    CommittedOffset,
    Deliver,
    Effect,
    ErrorResponse,
    GroupDescription,
    GroupStatistics,
    HeartbeatRequest,
    JoinMember,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    LeaveResponse,
    MemberIdentity,
    OffsetCommitRequest,
    Pending,
    Record,
    Response,
    SyncRequest,
    SyncResponse,
    TopicPartition,
)
from broker.groups.offsets import commit_error, expired_offsets
from broker.groups.records import LoadedState, group_record, offset_record
from protocol.clock import ClockMs
from protocol.errors import (
    CoordinatorNotAvailable,
    FencedInstanceId,
    GroupIdNotFound,
    GroupMaxSizeReached,
    IllegalGeneration,
    InconsistentGroupProtocol,
    InvalidGroupId,
    InvalidSessionTimeout,
    MemberIdRequired,
    NonEmptyGroup,
    OffsetMetadataTooLarge,
    RebalanceInProgress,
    UnknownMemberId,
)
from protocol.offsets_schema import MAX_GROUP_CHARS, MAX_METADATA_CHARS

_S = GroupState

# What completing an Append does: make the leader's assignment effective (token: the
# generation), apply a commit and answer it, answer a request, or nothing.
_STORE_ASSIGNMENT = "store_assignment"
_COMMIT = "commit"
_REPLY = "reply"
_NO_FOLLOW_UP = "no_follow_up"


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
        self._new_member_id = member_id_factory
        self._groups: dict[str, Group] = {}
        self._effects: list[Effect] = []
        self._next_ticket = 1
        # Append ticket -> what its completion does.
        self._appends: dict[int, tuple[str, str, int]] = {}
        self._next_retention_check_ms = clock_ms() + config.offsets_retention_check_interval_ms
        if loaded is not None:
            self._restore(loaded)

    # --- the driver's side ------------------------------------------------------

    def take_effects(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects

    def next_deadline(self) -> int:
        """When `tick()` next has work (epoch ms); never later than the retention check."""
        deadlines = [self._next_retention_check_ms]
        for group in self._groups.values():
            deadlines.extend(group.pending_members.values())
            deadlines.extend(
                m.heartbeat_deadline_ms
                for m in group.members.values()
                if m.join_ticket is None and m.sync_ticket is None
            )
            if group.join_deadline_ms is not None:
                deadlines.append(group.join_deadline_ms)
            if group.sync_deadline_ms is not None and group.pending_sync:
                deadlines.append(group.sync_deadline_ms)
        return min(deadlines)

    def tick(self) -> None:
        """Expire sessions, end join and sync phases that timed out, expire offsets."""
        now = self._clock_ms()
        for group in list(self._groups.values()):
            self._expire_members(group, now)
            if group.join_deadline_ms is not None and group.join_deadline_ms <= now:
                self._on_join_deadline(group, now)
            if (
                group.sync_deadline_ms is not None
                and group.sync_deadline_ms <= now
                and group.pending_sync
            ):
                for member_id in sorted(group.pending_sync):
                    self._remove_member(group, member_id, now)
        if now >= self._next_retention_check_ms:
            self._next_retention_check_ms = now + self._config.offsets_retention_check_interval_ms
            self._expire_offsets(now)

    def append_completed(self, ticket: int, error: str | None = None) -> None:
        """The driver wrote (error None) or failed to write the records of Append(ticket)."""
        kind, group_id, token = self._appends.pop(ticket)
        group = self._groups.get(group_id)
        if kind == _STORE_ASSIGNMENT:
            if group is not None:
                self._on_assignment_stored(group, token, error)
        elif kind == _COMMIT:
            batch = group.pending_commits.pop(ticket, None) if group is not None else None
            if error is None and group is not None and batch is not None:
                group.offsets.update(batch)
            self._deliver(token, ErrorResponse(error and CoordinatorNotAvailable.code))
        elif kind == _REPLY:
            self._deliver(token, ErrorResponse(error and CoordinatorNotAvailable.code))

    # --- queries ------------------------------------------------------------------

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

    def fetch_offsets(self, group_id: str) -> dict[TopicPartition, CommittedOffset]:
        group = self._groups.get(group_id)
        return dict(group.offsets) if group is not None else {}

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
        fenced = self._instance_error(group, member_id, request.group_instance_id)
        if fenced is not None:
            return JoinResponse(fenced, member_id=member_id)
        member = group.members.get(member_id)
        if member is None:
            return JoinResponse(UnknownMemberId.code, member_id=member_id)
        unchanged = member.protocols == request.protocols
        if group.is_in(_S.COMPLETING_REBALANCE) and unchanged:
            return self._join_response(group, member)  # it missed the JoinResponse: resend
        if group.is_in(_S.STABLE) and unchanged and not group.is_leader(member_id):
            return self._join_response(group, member)
        return self._update_member_and_rebalance(group, member, request, now)

    def _instance_error(self, group: Group, member_id: str, instance: str | None) -> str | None:
        """FENCED_INSTANCE_ID when another member holds `instance`, UNKNOWN when nobody does."""
        if instance is None:
            return None
        owner = group.static_members.get(instance)
        if owner is None:
            return UnknownMemberId.code
        return None if owner == member_id else FencedInstanceId.code

    def _add_member_and_rebalance(
        self, group: Group, request: JoinRequest, member_id: str, now: int
    ) -> Pending:
        ticket = self._ticket()
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
        self._maybe_prepare_rebalance(group, now)
        self._try_complete_join(group, now)
        return Pending(ticket)

    def _update_member_and_rebalance(
        self, group: Group, member: Member, request: JoinRequest, now: int
    ) -> Pending:
        if member.join_ticket is not None:  # a duplicate join: the newer request waits
            self._deliver(member.join_ticket, JoinResponse(RebalanceInProgress.code))
        member.protocols = request.protocols
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = request.rebalance_timeout_ms
        ticket = member.join_ticket = self._ticket()
        self._maybe_prepare_rebalance(group, now)
        self._try_complete_join(group, now)
        return Pending(ticket)

    def _replace_static_member(
        self, group: Group, request: JoinRequest, new_id: str, now: int
    ) -> JoinResponse | Pending:
        """A static member restarted (new member id, same instance id): the old id is
        fenced. In Stable with unchanged protocols and not the leader, no rebalance."""
        old_id = group.static_members[request.group_instance_id]  # type: ignore[index]
        old = group.members.pop(old_id)
        if old.join_ticket is not None:
            self._deliver(old.join_ticket, JoinResponse(FencedInstanceId.code, member_id=old_id))
        if old.sync_ticket is not None:
            self._deliver(old.sync_ticket, SyncResponse(FencedInstanceId.code))
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
            self._append(
                _NO_FOLLOW_UP, group.group_id, 0, [group_record(group.group_id, group.metadata())]
            )
            return self._join_response(group, old)
        return self._update_member_and_rebalance(group, old, request, now)

    def _join_response(self, group: Group, member: Member) -> JoinResponse:
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

    # --- rebalance phases ---------------------------------------------------------

    def _maybe_prepare_rebalance(self, group: Group, now: int) -> None:
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY):
            self._prepare_rebalance(group, now)

    def _prepare_rebalance(self, group: Group, now: int) -> None:
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
        self._deliver(member.sync_ticket, response)  # type: ignore[arg-type]
        member.sync_ticket = None
        member.heartbeat_deadline_ms = now + member.session_timeout_ms

    def _try_complete_join(self, group: Group, now: int) -> None:
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
            self._append(
                _NO_FOLLOW_UP, group.group_id, 0, [group_record(group.group_id, group.metadata())]
            )
            return
        group.protocol_name = group.select_protocol()
        if group.leader_id not in group.members:
            group.leader_id = next(iter(group.members))
        group.transition(_S.COMPLETING_REBALANCE, now)
        for member in group.members.values():
            ticket, member.join_ticket = member.join_ticket, None
            member.heartbeat_deadline_ms = now + member.session_timeout_ms
            self._deliver(ticket, self._join_response(group, member))  # type: ignore[arg-type]
        group.pending_sync = set(group.members)
        group.sync_deadline_ms = now + group.max_rebalance_timeout_ms()

    # --- SyncGroup ----------------------------------------------------------------

    def sync_group(self, request: SyncRequest) -> SyncResponse | Pending:
        group = self._groups.get(request.group_id)
        error = self._member_error(
            group, request.member_id, request.group_instance_id, request.generation_id
        )
        if error is None and (
            (request.protocol_type is not None and request.protocol_type != group.protocol_type)  # type: ignore[union-attr]
            or (request.protocol_name is not None and request.protocol_name != group.protocol_name)  # type: ignore[union-attr]
        ):
            error = InconsistentGroupProtocol.code
        if error is not None:
            return SyncResponse(error)
        assert group is not None
        if group.is_in(_S.PREPARING_REBALANCE):
            return SyncResponse(RebalanceInProgress.code)
        member = group.members[request.member_id]
        group.pending_sync.discard(member.member_id)
        if group.is_in(_S.STABLE):
            return SyncResponse(None, group.protocol_type, group.protocol_name, member.assignment)
        if member.sync_ticket is not None:
            self._deliver(member.sync_ticket, SyncResponse(RebalanceInProgress.code))
        member.sync_ticket = self._ticket()
        if group.is_leader(member.member_id) and not group.assignment_in_flight:
            self._store_assignment(group, request.assignments)
        return Pending(member.sync_ticket)

    def _member_error(
        self, group: Group | None, member_id: str, instance: str | None, generation_id: int
    ) -> str | None:
        """The checks SyncGroup and Heartbeat share, in Kafka's order."""
        if group is None:
            return UnknownMemberId.code
        if group.is_in(_S.DEAD):
            return CoordinatorNotAvailable.code
        fenced = self._instance_error(group, member_id, instance)
        if fenced is not None:
            return fenced
        if member_id not in group.members:
            return UnknownMemberId.code
        if generation_id != group.generation_id:
            return IllegalGeneration.code
        return None

    def _store_assignment(self, group: Group, assignments: Mapping[str, bytes]) -> None:
        """The leader's assignment is written before anyone gets it (Kafka stores the
        group first); members the leader left out get empty bytes, unknown ids are ignored."""
        for member in group.members.values():
            member.assignment = assignments.get(member.member_id, b"")
        group.assignment_in_flight = True
        # The record describes the group once Stable, so it carries that state's timestamp.
        group.stable_since_ms = self._clock_ms()
        metadata = replace(group.metadata(), state_timestamp_ms=group.stable_since_ms)
        record = group_record(group.group_id, metadata)
        self._append(_STORE_ASSIGNMENT, group.group_id, group.generation_id, [record])

    def _on_assignment_stored(self, group: Group, generation_id: int, error: str | None) -> None:
        if not group.is_in(_S.COMPLETING_REBALANCE) or group.generation_id != generation_id:
            return  # the group moved on; its later record supersedes this one
        group.assignment_in_flight = False
        if error is not None:
            self._fail_pending_syncs(group, CoordinatorNotAvailable.code)
            self._prepare_rebalance(group, self._clock_ms())
            return
        group.transition(_S.STABLE, group.stable_since_ms)
        now = self._clock_ms()
        for member in group.members.values():
            if member.sync_ticket is not None:
                response = SyncResponse(
                    None, group.protocol_type, group.protocol_name, member.assignment
                )
                self._answer_sync(member, response, now)

    # --- Heartbeat and LeaveGroup -------------------------------------------------

    def heartbeat(self, request: HeartbeatRequest) -> ErrorResponse:
        group = self._groups.get(request.group_id)
        error = self._member_error(
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
            self._try_complete_join(group, now)
            return None
        if member_id not in group.members:
            return UnknownMemberId.code
        self._remove_member(group, member_id, now)
        return None

    # --- member removal -----------------------------------------------------------

    def _drop_member(self, group: Group, member_id: str) -> None:
        """Forget a member; its waiting requests get UNKNOWN_MEMBER_ID."""
        member = group.members.pop(member_id)
        if member.join_ticket is not None:
            self._deliver(
                member.join_ticket, JoinResponse(UnknownMemberId.code, member_id=member_id)
            )
        if member.sync_ticket is not None:
            self._deliver(member.sync_ticket, SyncResponse(UnknownMemberId.code))
        if member.group_instance_id is not None:
            group.static_members.pop(member.group_instance_id, None)
        group.pending_sync.discard(member_id)
        if group.is_leader(member_id):
            group.leader_id = next(iter(group.members), None)

    def _remove_member(self, group: Group, member_id: str, now: int) -> None:
        """A member left or died: the others rebalance."""
        self._drop_member(group, member_id)
        if group.is_in(_S.STABLE, _S.COMPLETING_REBALANCE):
            self._prepare_rebalance(group, now)
        self._try_complete_join(group, now)

    def _expire_members(self, group: Group, now: int) -> None:
        for member_id, deadline in list(group.pending_members.items()):
            if deadline <= now:
                del group.pending_members[member_id]
                self._try_complete_join(group, now)
        for member in list(group.members.values()):
            waiting = member.join_ticket is not None or member.sync_ticket is not None
            if (
                not waiting
                and member.heartbeat_deadline_ms <= now
                and member.member_id in group.members
            ):
                self._remove_member(group, member.member_id, now)

    # --- offsets --------------------------------------------------------------------

    def commit_offsets(self, request: OffsetCommitRequest) -> ErrorResponse | Pending:
        """Fenced by generation (offsets.py); the commit is answered once its records
        are appended, and only then visible to fetch_offsets."""
        if not request.group_id or len(request.group_id) > MAX_GROUP_CHARS:
            return ErrorResponse(InvalidGroupId.code)
        if any(len(metadata) > MAX_METADATA_CHARS for _, metadata in request.offsets.values()):
            return ErrorResponse(OffsetMetadataTooLarge.code)
        group = self._groups.get(request.group_id)
        error = commit_error(group, request)
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
        reply = self._ticket()
        ticket = self._append(
            _COMMIT,
            group.group_id,
            reply,
            [offset_record(group.group_id, tp, c) for tp, c in batch.items()],
        )
        group.pending_commits[ticket] = batch
        return Pending(reply)

    def delete_group(self, group_id: str) -> ErrorResponse | Pending:
        """Kafka's DeleteGroups: only an Empty group; its offsets and metadata get tombstones."""
        group = self._groups.get(group_id)
        if group is None or group.is_in(_S.DEAD):
            return ErrorResponse(GroupIdNotFound.code)
        if not group.is_in(_S.EMPTY) or group.pending_commits:
            return ErrorResponse(NonEmptyGroup.code)
        reply = self._ticket()
        self._append(_REPLY, group_id, reply, self._remove_group(group, self._clock_ms()))
        return Pending(reply)

    def delete_offsets(
        self, group_id: str, partitions: Iterable[TopicPartition]
    ) -> ErrorResponse | Pending:
        """Kafka's OffsetDelete for an Empty group: the listed partitions' offsets get
        tombstones (the answer waits for them). A group with members (or a commit in
        flight) is NON_EMPTY_GROUP: the broker does not read the members'
        subscriptions, which Kafka would use to allow unsubscribed topics."""
        group = self._groups.get(group_id)
        if group is None or group.is_in(_S.DEAD):
            return ErrorResponse(GroupIdNotFound.code)
        if not group.is_in(_S.EMPTY) or group.pending_commits:
            return ErrorResponse(NonEmptyGroup.code)
        gone = sorted(tp for tp in set(partitions) if tp in group.offsets)
        if not gone:
            return ErrorResponse(None)
        for tp in gone:
            del group.offsets[tp]
        reply = self._ticket()
        records = [offset_record(group_id, tp, None) for tp in gone]
        self._append(_REPLY, group_id, reply, records)
        return Pending(reply)

    def _remove_group(self, group: Group, now: int) -> list[Record]:
        tombstones = [offset_record(group.group_id, tp, None) for tp in sorted(group.offsets)]
        tombstones.append(group_record(group.group_id, None))
        group.offsets.clear()
        group.transition(_S.DEAD, now)
        del self._groups[group.group_id]
        return tombstones

    def _expire_offsets(self, now: int) -> None:
        retention_ms = self._config.offsets_retention_ms
        for group in list(self._groups.values()):
            expired = expired_offsets(group, now, retention_ms)
            records = [offset_record(group.group_id, tp, None) for tp in expired]
            for tp in expired:
                del group.offsets[tp]
            removable = group.is_in(_S.EMPTY) and not (
                group.offsets or group.pending_commits or group.pending_members
            )
            if removable:
                records.extend(self._remove_group(group, now))
            if records:
                self._append(_NO_FOLLOW_UP, group.group_id, 0, records)

    # --- restore and plumbing -----------------------------------------------------

    def _restore(self, loaded: LoadedState) -> None:
        now = self._clock_ms()
        for group_id in sorted(set(loaded.groups) | set(loaded.offsets)):
            group = Group.restored(group_id, loaded.groups.get(group_id), now)
            group.offsets.update(loaded.offsets.get(group_id, {}))
            self._groups[group_id] = group

    def _ticket(self) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    def _deliver(self, ticket: int, response: Response) -> None:
        self._effects.append(Deliver(ticket, response))

    def _append(self, kind: str, group_id: str, token: int, records: Iterable[Record]) -> int:
        ticket = self._ticket()
        self._appends[ticket] = (kind, group_id, token)
        self._effects.append(Append(ticket, tuple(records)))
        return ticket
