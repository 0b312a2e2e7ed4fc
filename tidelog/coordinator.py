"""The `Consumer`'s group side (Kafka's ConsumerCoordinator): `subscribe` and the
rebalances it brings, and the positions stored on the broker (`commit`, auto-commit).

Apart from the fetcher because none of it is on the read path: a poll asks it once
whether to rejoin or auto-commit. Joining and heartbeats are `tidelog.group_member`'s;
this module is the glue between that member and the consumer's positions. Rebalances
are eager, as in kafka-python: commit and revoke everything, join, assign.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from protocol.errors import IllegalGeneration, RebalanceInProgress, TidelogError, UnknownMemberId
from protocol.offsets_schema import OffsetAndMetadata, commit_offsets
from tidelog.fetcher import Fetcher
from tidelog.group_member import CommitFailedError, GroupMember, GroupSettings
from tidelog.positions import Positions, TopicPartition
from tidelog.security import Security

# A rebalance listener: called with the partitions taken away or handed over.
RebalanceCallback = Callable[[set[TopicPartition]], None]


@dataclass
class Subscription:
    """A subscribed consumer's topics, membership and listeners."""

    topics: tuple[str, ...]
    member: GroupMember
    on_assign: RebalanceCallback | None
    on_revoke: RebalanceCallback | None
    next_commit: float = 0.0  # time.monotonic() of the next auto-commit


@dataclass(frozen=True, slots=True)
class MemberConnection:
    """How a `GroupMember` connects (its own connection, for the heartbeat thread)."""

    bootstrap_servers: str
    client_id: str | None
    request_timeout_ms: int
    security: Security


class ConsumerCoordinator:
    """Group membership and committed positions for one consumer. Not thread-safe."""

    def __init__(
        self,
        fetcher: Fetcher,
        positions: Positions,
        group_settings: GroupSettings | None,
        connection: MemberConnection,
        *,
        enable_auto_commit: bool,
        auto_commit_interval_ms: int,
    ) -> None:
        self.enable_auto_commit = enable_auto_commit
        self.auto_commit_interval_ms = auto_commit_interval_ms
        self.subscription: Subscription | None = None
        self._fetcher = fetcher
        self._positions = positions
        self._group_settings = group_settings
        self._connection = connection

    def subscribe(
        self,
        topics: Iterable[str],
        on_assign: RebalanceCallback | None,
        on_revoke: RebalanceCallback | None,
    ) -> None:
        if self._group_settings is None:
            raise ValueError("subscribe() needs a group_id")
        wanted = tuple(sorted(set(topics)))
        if not wanted:
            raise ValueError("subscribe() needs at least one topic")
        if self.subscription is not None:
            self.subscription.topics = wanted
            self.subscription.member.mark_rejoin()
            return
        connection = self._connection
        member = GroupMember(
            connection.bootstrap_servers,
            self._group_settings,
            client_id=connection.client_id,
            request_timeout_ms=connection.request_timeout_ms,
            security=connection.security,
        )
        self.subscription = Subscription(wanted, member, on_assign, on_revoke)
        self._positions.assign([])

    def leave_group(self) -> None:
        """Commit (with auto-commit) while still a member, so the commit is fenced; leave."""
        subscription = self.subscription
        if subscription is None:
            return
        try:
            self._auto_commit_quietly()
        finally:
            self.subscription = None
            subscription.member.close()

    def ensure_group(self) -> None:
        """Rejoin if the heartbeat thread saw a rebalance; auto-commit when due."""
        subscription = self.subscription
        if subscription is None:
            return
        if subscription.member.needs_rejoin():
            self._rebalance(subscription)
        if self.enable_auto_commit and time.monotonic() >= subscription.next_commit:
            self._auto_commit_quietly()

    def _rebalance(self, subscription: Subscription) -> None:
        """Eager: commit and revoke everything, join, then take the new assignment
        (positions of partitions kept are kept)."""
        states = self._positions.states
        previous = set(states)
        if subscription.member.generation >= 0:
            self._auto_commit_quietly()
            if subscription.on_revoke is not None:
                subscription.on_revoke(previous)
        partitions = subscription.member.join(subscription.topics, previous, self._partition_counts)
        self._positions.assign(TopicPartition(*tp) for tp in partitions)
        subscription.next_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        if subscription.on_assign is not None:
            subscription.on_assign(set(states))

    def _auto_commit_quietly(self) -> None:
        """Commit positions if auto-commit is on; a refusal means a rebalance is
        coming, which the next poll handles (kafka-python logs and goes on)."""
        subscription = self.subscription
        if not self.enable_auto_commit or subscription is None:
            return
        subscription.next_commit = time.monotonic() + self.auto_commit_interval_ms / 1000
        started = [
            tp for tp, state in self._positions.states.items() if state.position() is not None
        ]
        if not started:
            return
        try:
            self.commit({tp: self._fetcher.position(tp) for tp in started})
        except (CommitFailedError, OSError):
            return  # the group moved on or the broker is away: the next poll rejoins
        except TidelogError as exc:
            if not exc.retriable:
                raise

    def _partition_counts(self, topics: Iterable[str]) -> dict[str, int]:
        counts = {}
        for entry in self._fetcher.free_client().metadata(list(topics)):
            if entry["error"] is None:
                counts[entry["topic"]] = len(entry["partitions"])
        return counts

    # -- committed positions -------------------------------------------------------

    def commit(self, offsets: Mapping[TopicPartition, int] | None) -> None:
        """Store positions under the group (default: every assigned partition's)."""
        group = self.require_group()
        if offsets is None:
            offsets = {tp: self._fetcher.position(tp) for tp in self._positions.states}
        if not offsets:
            return
        positions: dict[tuple[str, int], OffsetAndMetadata | int] = dict(offsets.items())
        client = self._fetcher.free_client()
        if self.subscription is None:
            client.call(commit_offsets(group, positions))
            return
        member = self.subscription.member
        try:
            client.call(commit_offsets(group, positions, **member.commit_fields()))
        except (IllegalGeneration, UnknownMemberId, RebalanceInProgress) as exc:
            member.mark_rejoin(forget_member_id=isinstance(exc, UnknownMemberId))
            raise CommitFailedError(
                f"group {group}: commit refused ({exc.code}); the group rebalanced and "
                "these partitions may belong to another member: poll to rejoin"
            ) from exc

    def require_group(self) -> str:
        group_id = self._fetcher.group_id
        if group_id is None:
            raise ValueError("commit() and committed() need a group_id")
        return group_id
