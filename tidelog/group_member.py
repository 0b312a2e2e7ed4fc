"""One consumer's membership of a group: join and sync in the caller's thread,
heartbeats in a background thread (kafka-python's ConsumerCoordinator, eager protocol).

    member = GroupMember(bootstrap, GroupSettings("g", assignors=("range",)))
    partitions = member.join(topics, owned=(), partition_counts=counts)
    ...  # while member.needs_rejoin() is False, `partitions` are this member's
    member.close()  # LeaveGroup: the others rebalance at once

The join dance: JoinGroup (a new member is answered MEMBER_ID_REQUIRED with its id
and joins again), then SyncGroup. The leader (the member the broker names) runs the
assignor the group selected over every member's subscription and sends the plan in
its SyncGroup; everyone gets its part back. Errors that mean "join again"
(REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION) loop; retriable
broker errors wait `RETRY_BACKOFF_S` and loop; anything else is raised.

The heartbeat thread uses its own connection (a JoinGroup may wait for the whole
rebalance on the main one) and only sets a flag: the caller rejoins on its next
poll, as in kafka-python. A member whose process dies stops heartbeating and is
removed by the broker after `session_timeout_ms`.

Thread safety: `join`, `commit_fields` and `close` from one thread; the heartbeat
thread shares only `_lock`-guarded fields.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.errors import (
    ERRORS,
    FencedInstanceId,
    IllegalGeneration,
    MemberIdRequired,
    RebalanceInProgress,
    TidelogError,
    UnknownMemberId,
    error_from_wire,
)
from tidelog.assignors import (
    ASSIGNORS,
    Assignor,
    assign_group,
    decode_assignment,
    decode_subscription,
    encode_subscription,
)
from tidelog.client import Client
from tidelog.security import PLAINTEXT, Security

TopicPartition = tuple[str, int]
PartitionCounts = Callable[[Iterable[str]], Mapping[str, int]]

# kafka-python's defaults.
DEFAULT_SESSION_TIMEOUT_MS = 10_000
DEFAULT_HEARTBEAT_INTERVAL_MS = 3_000
DEFAULT_MAX_POLL_INTERVAL_MS = 300_000  # also the rebalance timeout, as in Kafka
DEFAULT_ASSIGNORS = ("range", "roundrobin")
PROTOCOL_TYPE = "consumer"  # Kafka consumers' type: the group is the same kind
# Pause before trying again after a retriable broker error (kafka-python's retry_backoff_ms).
RETRY_BACKOFF_S = 0.1
# Most join attempts in one rebalance before giving up (each waits on the broker).
MAX_JOIN_ATTEMPTS = 100

# Errors after which the member must (re)join; UNKNOWN_MEMBER_ID also drops the id.
_REJOIN = {RebalanceInProgress.code, IllegalGeneration.code, UnknownMemberId.code}


class CommitFailedError(TidelogError):
    """A commit refused because the group rebalanced: the partitions may belong to
    another member now (kafka-python's CommitFailedError). Poll again to rejoin."""

    code = "COMMIT_FAILED"


@dataclass(frozen=True, slots=True)
class GroupSettings:
    group_id: str
    assignors: Sequence[str] = DEFAULT_ASSIGNORS
    session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS
    heartbeat_interval_ms: int = DEFAULT_HEARTBEAT_INTERVAL_MS
    rebalance_timeout_ms: int = DEFAULT_MAX_POLL_INTERVAL_MS
    group_instance_id: str | None = None

    def __post_init__(self) -> None:
        unknown = [name for name in self.assignors if name not in ASSIGNORS]
        if unknown or not self.assignors:
            raise ValueError(
                f"partition_assignment_strategy: {unknown or 'none'}; "
                f"known: {', '.join(sorted(ASSIGNORS))}"
            )
        if not 0 < self.heartbeat_interval_ms < self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be > 0 and < session_timeout_ms")


def _retriable(code: str) -> bool:
    cls = ERRORS.get(code)
    return cls is not None and cls.retriable


class GroupMember:
    """A member of one group, over its own two connections."""

    def __init__(
        self,
        bootstrap_servers: str,
        settings: GroupSettings,
        *,
        client_id: str | None,
        request_timeout_ms: int,
        security: Security = PLAINTEXT,
    ) -> None:
        self.settings = settings
        self._client = Client(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._heartbeats = Client(
            bootstrap_servers,
            client_id=client_id,
            request_timeout_ms=request_timeout_ms,
            security=security,
        )
        self._client_id = client_id or ""
        self._lock = threading.Lock()
        self._member_id = ""
        self._generation = -1
        self._rejoin = True
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- state shared with the heartbeat thread --------------------------------------

    def needs_rejoin(self) -> bool:
        with self._lock:
            return self._rejoin

    def mark_rejoin(self, *, forget_member_id: bool = False) -> None:
        with self._lock:
            self._rejoin = True
            if forget_member_id:
                self._member_id = ""

    def commit_fields(self) -> dict[str, Any]:
        """What a fenced commit carries: this member's generation and ids."""
        with self._lock:
            return {
                "generation": self._generation,
                "member_id": self._member_id,
                "group_instance_id": self.settings.group_instance_id,
            }

    @property
    def generation(self) -> int:
        with self._lock:
            return self._generation

    # -- joining ------------------------------------------------------------------------

    def join(
        self,
        topics: Iterable[str],
        owned: Iterable[TopicPartition],
        partition_counts: PartitionCounts,
    ) -> list[TopicPartition]:
        """Join (or rejoin) and return this member's partitions for the new generation."""
        topics, owned = sorted(set(topics)), sorted(owned)
        for _ in range(MAX_JOIN_ATTEMPTS):
            joined = self._join_once(topics, owned)
            if joined is None:
                continue
            assignment = self._sync(joined, partition_counts)
            if assignment is None:
                continue
            with self._lock:
                self._generation = joined["generation"]
                self._rejoin = False
            self._start_heartbeats()
            return sorted(decode_assignment(assignment).partitions) if assignment else []
        raise RebalanceInProgress(
            f"group {self.settings.group_id}: no stable generation after "
            f"{MAX_JOIN_ATTEMPTS} join attempts"
        )

    def _assignor(self, name: str) -> Assignor:
        return ASSIGNORS[name]()

    def _join_once(self, topics: list[str], owned: list[TopicPartition]) -> dict[str, Any] | None:
        with self._lock:
            member_id, generation = self._member_id, self._generation
        body = {
            "group": self.settings.group_id,
            "member_id": member_id,
            "group_instance_id": self.settings.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocols": [
                {
                    "name": name,
                    "metadata": _encode(self._assignor(name), topics, owned, generation),
                }
                for name in self.settings.assignors
            ],
            "session_timeout_ms": self.settings.session_timeout_ms,
            "rebalance_timeout_ms": self.settings.rebalance_timeout_ms,
            "client_id": self._client_id,
        }
        answer = self._client.request(
            "join_group", body, wait_ms=self.settings.rebalance_timeout_ms
        )
        error = answer["error"]
        if error == MemberIdRequired.code:
            with self._lock:
                self._member_id = answer["member_id"]
            return None
        if error is not None:
            self._on_error(error, answer.get("message"))
            return None
        with self._lock:
            self._member_id = answer["member_id"]
        return answer

    def _sync(self, joined: dict[str, Any], partition_counts: PartitionCounts) -> bytes | None:
        plan: dict[str, bytes] = {}
        if joined["leader"] == joined["member_id"]:
            members = [
                (m["member_id"], m["group_instance_id"], bytes(m["metadata"]))
                for m in joined["members"]
            ]
            wanted = {t for _, _, meta in members for t in decode_subscription(meta).topics}
            counts = dict(partition_counts(sorted(wanted)))
            plan = assign_group(self._assignor(joined["protocol"]), counts, members)
        body = {
            "group": self.settings.group_id,
            "member_id": joined["member_id"],
            "generation": joined["generation"],
            "group_instance_id": self.settings.group_instance_id,
            "protocol_type": PROTOCOL_TYPE,
            "protocol": joined["protocol"],
            "assignments": [{"member_id": m, "assignment": a} for m, a in plan.items()],
        }
        answer = self._client.request(
            "sync_group", body, wait_ms=self.settings.rebalance_timeout_ms
        )
        if answer["error"] is not None:
            self._on_error(answer["error"], answer.get("message"))
            return None
        return bytes(answer["assignment"])

    def _on_error(self, code: str, message: str | None) -> None:
        """Loop on what a rejoin fixes, back off on retriable errors, raise the rest."""
        if code == UnknownMemberId.code:
            self.mark_rejoin(forget_member_id=True)
        elif code in _REJOIN:
            self.mark_rejoin()
        elif _retriable(code):
            time.sleep(RETRY_BACKOFF_S)
        else:
            raise error_from_wire(code, message)

    # -- heartbeats -----------------------------------------------------------------------

    def _start_heartbeats(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._heartbeat_loop, name="tidelog-heartbeat", daemon=True
            )
            self._thread.start()

    def _heartbeat_loop(self) -> None:
        interval_s = self.settings.heartbeat_interval_ms / 1000
        while not self._stop.wait(interval_s):
            with self._lock:
                member_id, generation, rejoin = self._member_id, self._generation, self._rejoin
            if rejoin or generation < 0:
                continue  # the owner is (re)joining
            body = {
                "group": self.settings.group_id,
                "member_id": member_id,
                "generation": generation,
                "group_instance_id": self.settings.group_instance_id,
            }
            try:
                error = self._heartbeats.request("heartbeat", body)["error"]
            except (OSError, TidelogError):
                continue  # the connection reopens on the next beat
            if error == UnknownMemberId.code or error == FencedInstanceId.code:
                self.mark_rejoin(forget_member_id=True)
            elif error in _REJOIN:
                self.mark_rejoin()

    # -- leaving --------------------------------------------------------------------------

    def close(self) -> None:
        """Stop heartbeating and leave the group so it rebalances now. A static member
        (`group_instance_id`) does not leave, as in Kafka: restarted within its session
        timeout, it gets its partitions back without a rebalance."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            member_id, self._generation, self._rejoin = self._member_id, -1, True
        if member_id and self.settings.group_instance_id is None:
            body = {
                "group": self.settings.group_id,
                "members": [{"member_id": member_id, "group_instance_id": None}],
            }
            try:
                self._client.request("leave_group", body)
            except (OSError, TidelogError):
                pass  # the broker removes the member after its session timeout anyway
        self._client.close()
        self._heartbeats.close()


def _encode(assignor: Assignor, topics: list[str], owned: list[TopicPartition], gen: int) -> bytes:
    return encode_subscription(assignor.subscription(topics, owned, gen))
