"""One test per transition and error of the coordinator, driven through driver.Driver."""

from __future__ import annotations

from dataclasses import replace

import pytest

from broker.groups import (
    ErrorResponse,
    GroupConfig,
    HeartbeatRequest,
    JoinResponse,
    LeaveRequest,
    MemberIdentity,
    OffsetCommitRequest,
    Pending,
    SyncRequest,
    SyncResponse,
)
from tests.broker.groups.driver import REBALANCE_MS, SESSION_MS, Driver, join_request


def join_new(d: Driver, client: str = "c", **kwargs: object) -> tuple[str, Pending]:
    """MEMBER_ID_REQUIRED, then the rejoin with the given id (which waits)."""
    first = d.call("join_group", join_request(client=client, **kwargs))
    assert isinstance(first, JoinResponse) and first.error == "MEMBER_ID_REQUIRED"
    pending = d.call("join_group", join_request(first.member_id, client=client, **kwargs))
    assert isinstance(pending, Pending)
    return first.member_id, pending


def stable_group(d: Driver, count: int = 2) -> list[str]:
    """A Stable group of `count` members; the first is the leader. Returns member ids."""
    ids = []
    pendings = []
    for i in range(count):
        member_id, pending = join_new(d, client=f"m{i}")
        ids.append(member_id)
        pendings.append(pending)
        if i == 0:  # alone, its join completes at once
            pendings[0] = d.call("join_group", join_request(member_id))
    if count > 1:
        for i, member_id in enumerate(ids):
            if d.answer(pendings[i]) is None or i == 0:
                pendings[i] = d.call("join_group", join_request(member_id))
    generation = d.coordinator.describe_group("g").metadata.generation_id
    syncs = [d.call("sync_group", SyncRequest("g", m, generation)) for m in ids[1:]]
    leader = d.call(
        "sync_group",
        SyncRequest("g", ids[0], generation, {m: m.encode() for m in ids}),
    )
    assert d.coordinator.describe_group("g").state == "Stable"
    for m, s in zip(ids, [leader, *syncs], strict=True):
        assert d.answer(s) == SyncResponse(None, "consumer", "range", m.encode())
    return ids


def state(d: Driver, group: str = "g") -> str:
    return d.coordinator.describe_group(group).state


def generation(d: Driver) -> int:
    return d.coordinator.describe_group("g").metadata.generation_id


# --- JoinGroup -------------------------------------------------------------------------


def test_first_join_requires_member_id_then_completes_as_leader():
    d = Driver()
    member_id, pending = join_new(d)
    response = d.answer(pending)
    assert response.error is None and response.member_id == member_id
    assert response.leader_id == member_id and response.generation_id == 1
    assert [m.member_id for m in response.members] == [member_id]
    assert state(d) == "CompletingRebalance"


def test_join_waits_for_all_known_members():
    d = Driver()
    a, b = stable_group(d)
    join_a = d.call("join_group", join_request(a, protocols=(("range", b"x"),)))
    assert d.answer(join_a) is None and state(d) == "PreparingRebalance"
    join_b = d.call("join_group", join_request(b))
    ra, rb = d.answer(join_a), d.answer(join_b)
    assert ra.generation_id == rb.generation_id == 3
    assert ra.leader_id == rb.leader_id == a
    assert {m.member_id for m in ra.members} == {a, b} and rb.members == ()


def test_join_timeout_removes_members_that_did_not_rejoin():
    d = Driver()
    a, b = stable_group(d)
    join_a = d.call("join_group", join_request(a, protocols=(("range", b"y"),)))
    d.advance(SESSION_MS - 1)
    assert d.coordinator.heartbeat(HeartbeatRequest("g", b, 2)).error == "REBALANCE_IN_PROGRESS"
    d.advance(REBALANCE_MS)
    assert d.answer(join_a).generation_id == 3
    assert [m.member_id for m in d.coordinator.describe_group("g").metadata.members] == [a]


def test_old_clients_join_without_member_id_required():
    d = Driver()
    request = replace(join_request(client="old"), require_known_member_id=False)
    response = d.answer(d.call("join_group", request))
    assert response.error is None and response.member_id.startswith("old-")


def test_unknown_member_id_on_join():
    d = Driver()
    stable_group(d, 1)
    assert d.call("join_group", join_request("ghost")).error == "UNKNOWN_MEMBER_ID"
    assert d.call("join_group", join_request("x", group="nope")).error == "UNKNOWN_MEMBER_ID"


@pytest.mark.parametrize(
    ("session_ms", "error"),
    [(5_999, "INVALID_SESSION_TIMEOUT"), (1_800_001, "INVALID_SESSION_TIMEOUT"), (6_000, None)],
    ids=["below-min", "above-max", "at-min"],
)
def test_session_timeout_bounds(session_ms, error):
    d = Driver()
    first = d.call("join_group", join_request(session_ms=session_ms))
    assert first.error == (error or "MEMBER_ID_REQUIRED")


def test_invalid_group_id():
    d = Driver()
    assert d.call("join_group", join_request(group="")).error == "INVALID_GROUP_ID"


def test_inconsistent_protocol_type_and_no_common_assignor():
    d = Driver()
    stable_group(d, 1)
    other_type = join_request(protocol_type="connect")
    assert d.call("join_group", other_type).error == "INCONSISTENT_GROUP_PROTOCOL"
    no_common = join_request(protocols=(("sticky", b""),))
    assert d.call("join_group", no_common).error == "INCONSISTENT_GROUP_PROTOCOL"
    empty = join_request(group="fresh", protocols=())
    assert d.call("join_group", empty).error == "INCONSISTENT_GROUP_PROTOCOL"


def join_together(protocol_lists: list[tuple[tuple[str, bytes], ...]]) -> JoinResponse:
    """All members join within the initial delay; the leader's JoinResponse."""
    d = Driver(config=GroupConfig(group_initial_rebalance_delay_ms=3_000))
    pendings = []
    for i, protocols in enumerate(protocol_lists):
        first = d.call("join_group", join_request(client=f"m{i}", protocols=protocols))
        pendings.append(d.call("join_group", join_request(first.member_id, protocols=protocols)))
    d.advance(3_000)  # new members arrived during the delay: it is extended once
    assert d.answer(pendings[0]) is None
    d.advance(3_000)
    return d.answer(pendings[0])


def test_protocol_selection_most_votes_among_common():
    leader = join_together(
        [
            (("sticky", b"0"), ("range", b"0"), ("roundrobin", b"0")),  # votes range
            (("roundrobin", b"1"), ("range", b"1")),  # votes roundrobin
            (("roundrobin", b"2"), ("sticky", b"2"), ("range", b"2")),  # votes roundrobin
        ]
    )
    assert leader.protocol_name == "roundrobin"  # sticky is not supported by m1
    assert [m.metadata for m in leader.members] == [b"0", b"1", b"2"]


def test_protocol_selection_tie_is_broken_by_name():
    leader = join_together(
        [(("roundrobin", b""), ("range", b"")), (("range", b""), ("roundrobin", b""))]
    )
    assert leader.protocol_name == "range"


def test_static_member_rejoin_keeps_assignment_without_rebalance():
    d = Driver()
    leader, _ = join_new(d, client="l")
    first = d.call("join_group", join_request(client="s", instance="i-1"))
    assert isinstance(first, Pending)  # static members get no MEMBER_ID_REQUIRED
    d.call("join_group", join_request(leader))
    static_id = d.answer(first).member_id
    d.call("sync_group", SyncRequest("g", static_id, 2))
    d.call("sync_group", SyncRequest("g", leader, 2, {leader: b"L", static_id: b"S"}))
    assert state(d) == "Stable"
    restarted = d.call("join_group", join_request(client="s", instance="i-1"))
    assert restarted.error is None and restarted.generation_id == 2
    assert restarted.member_id != static_id and state(d) == "Stable"
    sync = d.call("sync_group", SyncRequest("g", restarted.member_id, 2, group_instance_id="i-1"))
    assert sync.assignment == b"S"
    old = HeartbeatRequest("g", static_id, 2, group_instance_id="i-1")
    assert d.coordinator.heartbeat(old).error == "FENCED_INSTANCE_ID"


def test_group_max_size():
    d = Driver(config=GroupConfig(group_initial_rebalance_delay_ms=0, group_max_size=1))
    stable_group(d, 1)
    assert d.call("join_group", join_request(client="x")).error == "GROUP_MAX_SIZE_REACHED"


def test_initial_rebalance_delay_collects_joiners():
    d = Driver(config=GroupConfig(group_initial_rebalance_delay_ms=3_000))
    a, join_a = join_new(d, client="a")
    assert d.answer(join_a) is None and state(d) == "PreparingRebalance"
    d.advance(2_000)
    b, join_b = join_new(d, client="b")
    d.advance(1_000)  # the delay is extended once because b arrived
    assert d.answer(join_a) is None
    d.advance(3_000)
    assert d.answer(join_a).generation_id == d.answer(join_b).generation_id == 1
    assert {m.member_id for m in d.answer(join_a).members} == {a, b}


# --- SyncGroup -------------------------------------------------------------------------


def test_followers_wait_for_the_leader():
    d = Driver()
    stable_group(d, 3)  # asserts each member got its own assignment from the leader


def test_sync_errors():
    d = Driver()
    a, b = stable_group(d)
    assert d.call("sync_group", SyncRequest("g", "ghost", 2)).error == "UNKNOWN_MEMBER_ID"
    assert d.call("sync_group", SyncRequest("g", a, 1)).error == "ILLEGAL_GENERATION"
    assert d.call("sync_group", SyncRequest("nope", a, 2)).error == "UNKNOWN_MEMBER_ID"
    bad = SyncRequest("g", a, 2, protocol_name="sticky")
    assert d.call("sync_group", bad).error == "INCONSISTENT_GROUP_PROTOCOL"
    d.call("join_group", join_request(a, protocols=(("range", b"z"),)))
    assert d.call("sync_group", SyncRequest("g", b, 2)).error == "REBALANCE_IN_PROGRESS"


def test_waiting_sync_gets_rebalance_in_progress_when_a_member_joins():
    d = Driver()
    a, pending = join_new(d, client="a")
    follower_sync = None
    b, join_b = join_new(d, client="b")
    d.call("join_group", join_request(a))
    assert d.answer(join_b).generation_id == 2
    follower_sync = d.call("sync_group", SyncRequest("g", b, 2))
    assert d.answer(follower_sync) is None
    join_new(d, client="c")
    assert d.answer(follower_sync) == SyncResponse("REBALANCE_IN_PROGRESS")
    assert d.answer(pending) is not None


def test_failed_store_of_assignment_fails_syncs_and_rebalances():
    d = Driver()
    a, _ = join_new(d)
    d.fail_appends = "STORAGE_ERROR"
    sync = d.call("sync_group", SyncRequest("g", a, 1, {a: b"x"}))
    assert d.answer(sync) == SyncResponse("COORDINATOR_NOT_AVAILABLE")
    assert state(d) == "PreparingRebalance"


def test_members_that_never_sync_are_removed_after_the_rebalance_timeout():
    d = Driver()
    a, _ = join_new(d, client="a")
    b, _join_b = join_new(d, client="b")
    join_a = d.call("join_group", join_request(a))
    d.call("sync_group", SyncRequest("g", a, 2, {a: b"A", b: b"B"}))
    assert state(d) == "Stable"
    for _ in range(REBALANCE_MS // 5_000):
        d.advance(5_000)
        d.coordinator.heartbeat(HeartbeatRequest("g", a, 2))
        d.coordinator.heartbeat(HeartbeatRequest("g", b, 2))
    assert state(d) == "PreparingRebalance"
    assert b not in {m.member_id for m in d.coordinator.describe_group("g").metadata.members}
    assert d.answer(join_a) is not None


# --- Heartbeat, LeaveGroup, session expiry ---------------------------------------------


def test_heartbeat_per_state():
    d = Driver()
    a, b = stable_group(d)
    assert d.coordinator.heartbeat(HeartbeatRequest("g", a, 2)) == ErrorResponse(None)
    assert d.coordinator.heartbeat(HeartbeatRequest("g", a, 1)).error == "ILLEGAL_GENERATION"
    assert d.coordinator.heartbeat(HeartbeatRequest("g", "x", 2)).error == "UNKNOWN_MEMBER_ID"
    assert d.coordinator.heartbeat(HeartbeatRequest("h", a, 2)).error == "UNKNOWN_MEMBER_ID"
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(b),)))
    assert d.coordinator.heartbeat(HeartbeatRequest("g", a, 2)).error == "REBALANCE_IN_PROGRESS"


def test_session_expiry_removes_a_silent_member_and_rebalances():
    d = Driver()
    a, _b = stable_group(d)
    d.advance(SESSION_MS - 1)
    d.coordinator.heartbeat(HeartbeatRequest("g", a, 2))
    d.advance(1)
    assert state(d) == "PreparingRebalance"
    rejoin = d.call("join_group", join_request(a))
    assert d.answer(rejoin).generation_id == 3
    assert [m.member_id for m in d.answer(rejoin).members] == [a]


def test_leave_and_last_leave_empties_the_group():
    d = Driver()
    a, b = stable_group(d)
    leave = d.call("leave_group", LeaveRequest("g", (MemberIdentity(b), MemberIdentity("x"))))
    assert leave.members == ((MemberIdentity(b), None), (MemberIdentity("x"), "UNKNOWN_MEMBER_ID"))
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(a),)))
    assert state(d) == "Empty" and generation(d) == 3
    assert d.call("leave_group", LeaveRequest("nope", ())).error == "UNKNOWN_MEMBER_ID"


def test_leader_leaving_hands_leadership_on():
    d = Driver()
    a, b = stable_group(d)
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(a),)))
    rejoin = d.call("join_group", join_request(b))
    assert d.answer(rejoin).leader_id == b


def test_pending_member_expires_and_cannot_rejoin():
    d = Driver()
    stable_group(d, 1)
    first = d.call("join_group", join_request(client="late"))
    assert state(d) == "Stable"  # a pending member does not start a rebalance
    d.advance(SESSION_MS)
    assert d.call("join_group", join_request(first.member_id)).error == "UNKNOWN_MEMBER_ID"


def test_static_leave_by_instance_id_and_fencing():
    d = Driver()
    first = d.call("join_group", join_request(client="s", instance="i"))
    member_id = d.answer(first).member_id
    fenced = LeaveRequest("g", (MemberIdentity("other", "i"),))
    assert d.call("leave_group", fenced).members[0][1] == "FENCED_INSTANCE_ID"
    ok = LeaveRequest("g", (MemberIdentity("", "i"),))
    assert d.call("leave_group", ok).members[0][1] is None
    assert member_id and state(d) == "Empty"


# --- offsets ---------------------------------------------------------------------------


def commit(d: Driver, member: str = "", gen: int = -1, group: str = "g", offset: int = 7):
    return d.answer(
        d.call("commit_offsets", OffsetCommitRequest(group, {("t", 0): (offset, "")}, member, gen))
    )


def test_commit_fencing():
    d = Driver()
    a, b = stable_group(d)
    assert commit(d, a, 2).error is None
    assert commit(d, a, 1).error == "ILLEGAL_GENERATION"
    assert commit(d, "ghost", 2).error == "UNKNOWN_MEMBER_ID"
    assert commit(d).error == "UNKNOWN_MEMBER_ID"  # outside the group, group not empty
    d.call("join_group", join_request(a, protocols=(("range", b"q"),)))
    assert commit(d, b, 2, offset=8).error is None  # allowed while preparing (Kafka)
    d.call("join_group", join_request(b))
    assert commit(d, b, 3).error == "REBALANCE_IN_PROGRESS"
    assert d.coordinator.fetch_offsets("g")[("t", 0)].offset == 8


def test_commit_outside_group_management():
    d = Driver()
    assert commit(d, group="simple").error is None
    assert state(d, "simple") == "Empty"
    assert commit(d, "m", 0, group="other").error == "ILLEGAL_GENERATION"
    a, b = stable_group(d)
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(a), MemberIdentity(b))))
    assert commit(d).error is None  # the group is Empty again
    assert commit(d, a, -1).error is None  # generation -1 into an Empty group: any member id


def test_commit_is_visible_only_once_appended():
    d = Driver()
    pending = d.coordinator.commit_offsets(OffsetCommitRequest("s", {("t", 1): (3, "m")}))
    assert d.coordinator.fetch_offsets("s") == {}
    d.pump()
    assert d.answer(pending) == ErrorResponse(None)
    assert d.coordinator.fetch_offsets("s")[("t", 1)][:2] == (3, "m")


def test_failed_commit_append_is_reported_and_not_applied():
    d = Driver(fail_appends="STORAGE_ERROR")
    assert commit(d, group="s").error == "COORDINATOR_NOT_AVAILABLE"
    assert d.coordinator.fetch_offsets("s") == {}


def test_offsets_of_an_empty_group_expire_after_retention():
    config = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
    d = Driver(config=config)
    a, _b = stable_group(d)
    assert commit(d, a, 2).error is None
    d.advance(5 * 60_000)  # members died, the group became Empty at their death
    assert state(d) == "Empty"
    d.advance(config.offsets_retention_check_interval_ms)
    assert d.coordinator.describe_group("g") is None  # offsets gone, then the group
    assert (b"\x91\xa1g", None) in d.log


def test_offsets_of_a_live_group_do_not_expire():
    config = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
    d = Driver(config=config)
    a, b = stable_group(d)
    commit(d, a, 2)
    for _ in range(config.offsets_retention_check_interval_ms // 5_000 + 1):
        d.advance(5_000)
        for m in (a, b):
            d.coordinator.heartbeat(HeartbeatRequest("g", m, 2))
    assert d.coordinator.fetch_offsets("g")[("t", 0)].offset == 7


def test_delete_group():
    d = Driver()
    [a] = stable_group(d, 1)
    assert d.coordinator.delete_group("g").error == "NON_EMPTY_GROUP"
    assert d.coordinator.delete_group("nope").error == "GROUP_ID_NOT_FOUND"
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(a),)))
    commit(d)
    deleted = d.call("delete_group", "g")
    assert d.answer(deleted) == ErrorResponse(None)
    d.restart()
    assert d.coordinator.describe_group("g") is None and d.coordinator.fetch_offsets("g") == {}


def test_restart_rebuilds_stable_group_and_offsets():
    d = Driver()
    a, b = stable_group(d)
    commit(d, a, 2)
    before = d.coordinator.describe_group("g")
    offsets = d.coordinator.fetch_offsets("g")
    d.restart()
    assert d.coordinator.describe_group("g") == before
    assert d.coordinator.fetch_offsets("g") == offsets
    assert d.coordinator.heartbeat(HeartbeatRequest("g", b, 2)) == ErrorResponse(None)


def test_next_deadline_tracks_sessions():
    d = Driver()
    _a, _b = stable_group(d)
    assert d.coordinator.next_deadline() == d.clock.now_ms + SESSION_MS


def test_a_member_removed_while_waiting_gets_unknown_member_id():
    d = Driver()
    a, _ = join_new(d, client="a")
    b, _join_b = join_new(d, client="b")
    d.call("join_group", join_request(a))
    waiting_sync = d.call("sync_group", SyncRequest("g", b, 2))
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(b),)))
    assert d.answer(waiting_sync) == SyncResponse("UNKNOWN_MEMBER_ID")
    assert state(d) == "PreparingRebalance"  # waiting for a to rejoin
    c, waiting_join = join_new(d, client="c")
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(c),)))
    assert d.answer(waiting_join) == JoinResponse("UNKNOWN_MEMBER_ID", member_id=c)


# --- appends that take time --------------------------------------------------------------


def test_a_rebalance_during_the_assignment_write_supersedes_it():
    d = Driver()
    a, _ = join_new(d, client="a")
    b, _join_b = join_new(d, client="b")
    d.call("join_group", join_request(a))
    follower = d.call("sync_group", SyncRequest("g", b, 2))
    d.defer_appends = True
    leader = d.call("sync_group", SyncRequest("g", a, 2, {a: b"A", b: b"B"}))
    assert d.answer(leader) is None and state(d) == "CompletingRebalance"
    join_new(d, client="c")  # a rebalance starts while the record is being written
    assert d.answer(leader) == d.answer(follower) == SyncResponse("REBALANCE_IN_PROGRESS")
    d.flush_appends()
    assert state(d) == "PreparingRebalance" and generation(d) == 2
    d.restart()  # the written record is generation 2's assignment, as Kafka would reload
    assert state(d) == "Stable"
    assert [m.assignment for m in d.coordinator.describe_group("g").metadata.members] == [
        b"A",
        b"B",
    ]


def test_an_offset_with_a_commit_in_flight_does_not_expire():
    config = GroupConfig(group_initial_rebalance_delay_ms=0, offsets_retention_minutes=1)
    d = Driver(config=config)
    assert commit(d, group="s", offset=1).error is None
    d.clock.now_ms += 2 * 60_000  # the first commit is past retention
    d.defer_appends = True
    pending = d.call("commit_offsets", OffsetCommitRequest("s", {("t", 0): (2, "")}))
    d.advance(config.offsets_retention_check_interval_ms)
    d.flush_appends()
    assert d.answer(pending) == ErrorResponse(None)
    assert d.coordinator.fetch_offsets("s")[("t", 0)].offset == 2
    d.restart()
    assert d.coordinator.fetch_offsets("s")[("t", 0)].offset == 2


def test_delete_is_refused_while_a_commit_is_in_flight():
    d = Driver(defer_appends=True)
    d.call("commit_offsets", OffsetCommitRequest("s", {("t", 0): (2, "")}))
    assert d.coordinator.delete_group("s").error == "NON_EMPTY_GROUP"
    d.flush_appends()
    assert d.answer(d.call("delete_group", "s")) is None  # answered once written
    d.flush_appends()
    d.restart()
    assert d.coordinator.describe_group("s") is None


def test_delete_offsets_of_an_empty_group():
    d = Driver()
    [a] = stable_group(d, 1)
    offsets = {("t", 0): (2, ""), ("t", 1): (3, ""), ("u", 0): (4, "")}
    d.call("commit_offsets", OffsetCommitRequest("g", offsets, a, 1))
    assert d.coordinator.delete_offsets("g", [("t", 0)]) == ErrorResponse("NON_EMPTY_GROUP")
    assert d.coordinator.delete_offsets("nope", [("t", 0)]).error == "GROUP_ID_NOT_FOUND"
    d.call("leave_group", LeaveRequest("g", (MemberIdentity(a),)))
    deleted = d.coordinator.delete_offsets("g", [("t", 0), ("t", 1), ("t", 9)])
    d.pump()
    assert d.answer(deleted) == ErrorResponse(None)
    assert set(d.coordinator.fetch_offsets("g")) == {("u", 0)}
    assert d.coordinator.delete_offsets("g", [("t", 0)]) == ErrorResponse(None)  # nothing left
    d.restart()
    assert set(d.coordinator.fetch_offsets("g")) == {("u", 0)}
