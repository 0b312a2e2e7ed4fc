"""The coordinator against a small reference model (hypothesis stateful).

Clients behave like Kafka consumers (rejoin after MEMBER_ID_REQUIRED, the leader runs a
real assignor from tidelog.assignors), but hypothesis picks who does what and when:
joins, syncs, heartbeats, leaves, commits from members and from outside the group,
time passing (members die by session and rebalance timeouts), and restarts that rebuild
the coordinator from the records it asked to append. Checked after every step:

- one generation at a time: every successful JoinResponse and SyncResponse carries the
  group's current generation;
- every member of a Stable group holds exactly the leader's assignment for it, and
  no partition is assigned twice (and all are assigned);
- a commit is accepted exactly when the model's fencing rule says so;
- committed offsets are those of the accepted commits; a restart rebuilds them and the
  metadata of the last Stable or Empty generation.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from broker.groups import (
    GroupMetadata,
    HeartbeatRequest,
    JoinResponse,
    LeaveRequest,
    MemberIdentity,
    OffsetCommitRequest,
    Pending,
    SyncRequest,
    SyncResponse,
)
from tests.broker.groups.driver import Driver, join_request
from tidelog.assignors import (
    ASSIGNORS,
    Assignment,
    MemberSubscription,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)

TOPIC = "t"
PARTITIONS = 5
CLIENTS = 3
PREFERENCES = [("roundrobin", "range"), ("range", "roundrobin"), ("sticky", "range")]
PROTOCOLS = [
    tuple(
        (name, encode_subscription(ASSIGNORS[name]().subscription([TOPIC], [], -1)))
        for name in pref
    )
    for pref in PREFERENCES
]
STATIC = CLIENTS - 1
INSTANCES = [None] * (CLIENTS - 1) + ["instance-s"]  # the last client is a static member
NEVER_STORED = GroupMetadata(None, 0, None, None, None, ())


@dataclass
class Client:
    index: int
    member_id: str = ""
    generation: int = -1
    join: JoinResponse | None = None
    outstanding: tuple[str, int] | None = None  # (kind, ticket)
    assignment: bytes | None = None


@dataclass
class Observed:
    """What this step delivered, to check against the group afterwards."""

    joins: list[JoinResponse] = field(default_factory=list)
    syncs: list[tuple[Client, SyncResponse]] = field(default_factory=list)


class GroupModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d = Driver()
        self.clients = [Client(i) for i in range(CLIENTS)]
        # (generation, leader) -> the assignment the leader sent (generations repeat after a
        # restart that lost an unfinished rebalance, as in Kafka; member ids never do)
        self.leader_maps: dict[tuple[int, str], dict[str, bytes]] = {}
        self.offsets: dict[int, int] = {}  # partition -> offset of the last accepted commit
        self.durable: GroupMetadata | None = None
        self.static_ids: set[str] = set()  # every member id the static client had
        self.seen = Observed()

    # --- plumbing -------------------------------------------------------------------

    def group(self):
        return self.d.coordinator.describe_group("g")

    def settle(self) -> None:
        """Hand delivered answers to their clients."""
        self._settle()
        self.one_generation_at_a_time()

    def _settle(self) -> None:
        for client in self.clients:
            if client.outstanding is None:
                continue
            kind, ticket = client.outstanding
            response = self.d.delivered.pop(ticket, None)
            if response is None:
                continue
            client.outstanding = None
            if kind == "join":
                self.on_join(client, response)
            else:
                self.on_sync(client, response)

    def on_join(self, client: Client, response: JoinResponse) -> None:
        if response.error is None:
            self.seen.joins.append(response)
            if client.index == STATIC:
                self.static_ids.add(response.member_id)
            client.member_id, client.generation, client.join = (
                response.member_id,
                response.generation_id,
                response,
            )
        elif response.error == "UNKNOWN_MEMBER_ID":
            client.member_id, client.generation, client.join = "", -1, None

    def on_sync(self, client: Client, response: SyncResponse) -> None:
        if response.error is None:
            self.seen.syncs.append((client, response))
            client.assignment = response.assignment

    def send(self, client: Client, kind: str, result) -> None:
        if isinstance(result, Pending):
            client.outstanding = (kind, result.ticket)
        elif kind == "join":
            self.on_join(client, result)
        else:
            self.on_sync(client, result)
        self.settle()

    # --- rules ----------------------------------------------------------------------

    @rule(i=st.integers(0, CLIENTS - 1))
    def join(self, i: int) -> None:
        client = self.clients[i]
        if client.outstanding is not None:
            return
        instance = INSTANCES[i]
        request = join_request(
            client.member_id, protocols=PROTOCOLS[i], client=f"c{i}", instance=instance
        )
        result = self.d.call("join_group", request)
        if isinstance(result, JoinResponse) and result.error == "MEMBER_ID_REQUIRED":
            client.member_id = result.member_id
            request = join_request(client.member_id, protocols=PROTOCOLS[i], client=f"c{i}")
            result = self.d.call("join_group", request)
        if isinstance(result, JoinResponse) and result.error in (
            "FENCED_INSTANCE_ID",
            "UNKNOWN_MEMBER_ID",
        ):
            client.member_id, client.generation, client.join = "", -1, None
        self.send(client, "join", result)

    @rule(i=st.integers(0, CLIENTS - 1))
    def sync(self, i: int) -> None:
        client = self.clients[i]
        if client.outstanding is not None or client.join is None:
            return
        assignments: dict[str, bytes] = {}
        if client.join.leader_id == client.member_id and client.join.members:
            assignor = ASSIGNORS[client.join.protocol_name]()
            subs = [
                MemberSubscription(
                    m.member_id, m.group_instance_id, decode_subscription(m.metadata)
                )
                for m in client.join.members
            ]
            plan = assignor.assign({TOPIC: PARTITIONS}, subs)
            assignments = {m: encode_assignment(Assignment(tuple(tps))) for m, tps in plan.items()}
            self.leader_maps[(client.generation, client.member_id)] = assignments
        request = SyncRequest("g", client.member_id, client.generation, assignments, INSTANCES[i])
        self.send(client, "sync", self.d.call("sync_group", request))

    @rule()
    def everyone_joins(self) -> None:
        for i in range(CLIENTS):
            self.join(i)

    @rule()
    def everyone_syncs(self) -> None:
        """Followers first, so they wait for the leader's assignment."""
        leaders_last = sorted(
            range(CLIENTS),
            key=lambda i: (
                self.clients[i].join is not None
                and self.clients[i].join.leader_id == self.clients[i].member_id
            ),
        )
        for i in leaders_last:
            self.sync(i)

    @rule()
    def static_member_restarts(self) -> None:
        """The static client restarts: it forgets its member id and rejoins with its
        group.instance.id; its old incarnation's requests are lost."""
        client = self.clients[STATIC]
        self.clients[STATIC] = Client(STATIC)
        if client.outstanding is not None:
            self.d.delivered.pop(client.outstanding[1], None)
        self.join(STATIC)

    @rule(i=st.integers(0, CLIENTS - 1))
    def heartbeat(self, i: int) -> None:
        client = self.clients[i]
        if client.member_id:
            request = HeartbeatRequest("g", client.member_id, client.generation, INSTANCES[i])
            self.d.call("heartbeat", request)
            self.settle()

    @rule(i=st.integers(0, CLIENTS - 1))
    def leave(self, i: int) -> None:
        client = self.clients[i]
        if client.member_id:
            who = MemberIdentity(client.member_id, INSTANCES[i])
            self.d.call("leave_group", LeaveRequest("g", (who,)))
            client.member_id, client.generation, client.join = "", -1, None
            self.settle()

    @rule(
        i=st.integers(-1, CLIENTS - 1),
        partition=st.integers(0, PARTITIONS - 1),
        offset=st.integers(0, 10**6),
    )
    def commit(self, i: int, partition: int, offset: int) -> None:
        """i == -1: a client outside group management (generation -1, no member id)."""
        member_id, generation = (
            ("", -1) if i < 0 else (self.clients[i].member_id, self.clients[i].generation)
        )
        group = self.group()
        if group is None:
            allowed = generation < 0  # Kafka: a commit outside group management
        elif generation < 0 and group.state == "Empty":
            allowed = True
        elif not member_id and generation < 0:
            allowed = False
        else:
            allowed = (
                member_id in {m.member_id for m in group.metadata.members}
                and generation == group.metadata.generation_id
                and group.state in ("Stable", "PreparingRebalance")
            )
        request = OffsetCommitRequest(
            "g", {(TOPIC, partition): (offset, "")}, member_id, generation
        )
        result = self.d.call("commit_offsets", request)
        answer = self.d.answer(result)
        self.d.delivered.pop(getattr(result, "ticket", None), None)
        assert (answer.error is None) == allowed, (answer, group)
        if allowed:
            self.offsets[partition] = offset

    @rule()
    def delete(self) -> None:
        group = self.group()
        result = self.d.call("delete_group", "g")
        answer = self.d.answer(result)
        self.d.delivered.pop(getattr(result, "ticket", None), None)
        allowed = group is not None and group.state == "Empty"
        assert (answer.error is None) == allowed, (answer, group)
        if allowed:
            self.offsets.clear()
            self.durable = None
            assert self.group() is None

    @rule(ms=st.sampled_from([500, 3_000, 9_999, 10_000, 31_000]))
    def advance(self, ms: int) -> None:
        self.d.advance(ms)
        # The driver sleeps until next_deadline(): a tick leaves nothing already due.
        assert self.d.coordinator.next_deadline() > self.d.clock.now_ms
        self.settle()

    @rule()
    def silence(self) -> None:
        """Nobody speaks for three rebalance timeouts: every waiting request is answered
        (a join phase and a sync wait each end within one)."""
        for _ in range(3):
            self.advance(31_000)
        assert all(client.outstanding is None for client in self.clients)

    @rule()
    def restart(self) -> None:
        committed_before = self.d.coordinator.fetch_offsets("g")
        self.d.restart()
        for client in self.clients:
            client.outstanding = None  # their connections broke; they will retry
        group = self.group()
        # Generations after the rebuilt one will be handed out again.
        rebuilt = (group.metadata.generation_id, group.metadata.leader_id) if group else None
        self.leader_maps = {k: v for k, v in self.leader_maps.items() if k == rebuilt}
        assert self.d.coordinator.fetch_offsets("g") == committed_before
        if self.durable is None:
            assert group is None or group.metadata == NEVER_STORED
        else:
            assert group is not None and group.metadata == self.durable

    # --- invariants -----------------------------------------------------------------

    def one_generation_at_a_time(self) -> None:
        """Checked after every coordinator call, when its answers are handed out."""
        group = self.group()
        for response in self.seen.joins:
            assert group is not None and response.generation_id == group.metadata.generation_id
        for client, _ in self.seen.syncs:
            assert client.generation == group.metadata.generation_id
        self.seen = Observed()

    @invariant()
    def stable_members_hold_the_leaders_assignment(self) -> None:
        group = self.group()
        if group is None or group.state != "Stable":
            return
        meta = group.metadata
        leader_map = self.leader_maps.get((meta.generation_id, meta.leader_id))
        if leader_map is not None:  # None: rebuilt after a restart; checked by restart()
            for member in meta.members:
                # a static member that restarted keeps its predecessor's assignment
                ids = self.static_ids if member.group_instance_id else {member.member_id}
                given = [leader_map[m] for m in ids if m in leader_map]
                assert [member.assignment] == (given or [b""])
        owned = [tp for m in meta.members for tp in decode_assignment(m.assignment).partitions]
        assert sorted(owned) == [(TOPIC, p) for p in range(PARTITIONS)]

    @invariant()
    def offsets_are_the_accepted_commits(self) -> None:
        stored = self.d.coordinator.fetch_offsets("g")
        assert {tp[1]: c.offset for tp, c in stored.items()} == self.offsets

    @invariant()
    def durable_metadata_is_tracked(self) -> None:
        group = self.group()
        if group is None:  # never created, deleted, or removed Empty with no offsets
            self.durable = None
            return
        if group.state == "Stable" or (group.state == "Empty" and group.metadata.generation_id > 0):
            self.durable = group.metadata


GroupModel.TestCase.settings = settings(max_examples=300, stateful_step_count=60, deadline=None)
TestGroupModel = GroupModel.TestCase


def test_a_sync_answered_at_the_sync_deadline_starts_a_fresh_session() -> None:
    """The state machine found this: three members join, a static one restarts, all join
    again, only the first syncs, then silence. At the sync deadline the others are
    removed and the first's sync is answered REBALANCE_IN_PROGRESS; its heartbeat
    deadline had passed while it waited, so without a fresh session the tick left it
    already due (Kafka restarts the session whenever it answers a member)."""
    state = GroupModel()
    for step in ("everyone_joins", "restart", "everyone_joins", "everyone_joins"):
        getattr(state, step)()
    state.static_member_restarts()
    state.everyone_joins()
    state.sync(i=0)
    state.silence()  # asserts after every tick that nothing is already due
    state.teardown()
