"""A synchronous in-memory driver for the coordinator: what the trio server will do,
minus sockets. Appends go to a list (the `__consumer_offsets` log) and are acknowledged
at once (or failed, when `fail_appends` is set); deliveries are kept by ticket."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

from broker.groups import (
    Append,
    Deliver,
    GroupConfig,
    GroupCoordinator,
    JoinRequest,
    Pending,
    load_records,
)
from broker.groups.messages import Record, Response

SESSION_MS = 10_000
REBALANCE_MS = 30_000
CONFIG = GroupConfig(group_initial_rebalance_delay_ms=0)


@dataclass
class FakeClock:
    now_ms: int = 1_000_000

    def __call__(self) -> int:
        return self.now_ms


@dataclass
class Driver:
    config: GroupConfig = CONFIG
    clock: FakeClock = field(default_factory=FakeClock)
    log: list[Record] = field(default_factory=list)
    delivered: dict[int, Response] = field(default_factory=dict)
    fail_appends: str | None = None
    # Hold appends until flush_appends(), as a real log write takes time.
    defer_appends: bool = False
    queued: list[Append] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._ids = itertools.count(1)
        self.coordinator = self._open()

    def _open(self) -> GroupCoordinator:
        return GroupCoordinator(
            self.config,
            self.clock,
            member_id_factory=lambda client: f"{client or 'member'}-{next(self._ids)}",
            loaded=load_records(self.log) if self.log else None,
        )

    def restart(self) -> None:
        """A new coordinator rebuilt from the log; unanswered requests are lost (and the
        new coordinator numbers its tickets afresh)."""
        self.delivered.clear()
        self.queued.clear()
        self.coordinator = self._open()

    def pump(self) -> None:
        while effects := self.coordinator.take_effects():
            for effect in effects:
                if isinstance(effect, Deliver):
                    assert effect.ticket not in self.delivered, "answered twice"
                    self.delivered[effect.ticket] = effect.response
                elif self.defer_appends:
                    self.queued.append(effect)
                else:
                    self._write(effect)

    def _write(self, append: Append) -> None:
        if self.fail_appends is None:
            self.log.extend(append.records)
        self.coordinator.append_completed(append.ticket, self.fail_appends)

    def flush_appends(self) -> None:
        """Write the held appends in the order they were emitted."""
        while self.queued:
            self._write(self.queued.pop(0))
            self.pump()

    def call(self, method: str, request: object) -> Response | Pending:
        result = getattr(self.coordinator, method)(request)
        self.pump()
        return result

    def answer(self, result: Response | Pending) -> Response | None:
        """The response now, or None while it is still pending."""
        if isinstance(result, Pending):
            return self.delivered.get(result.ticket)
        return result

    def advance(self, ms: int) -> None:
        self.clock.now_ms += ms
        self.coordinator.tick()
        self.pump()


def join_request(
    member_id: str = "",
    *,
    group: str = "g",
    protocols: tuple[tuple[str, bytes], ...] = (("range", b"m"),),
    instance: str | None = None,
    client: str = "c",
    protocol_type: str = "consumer",
    session_ms: int = SESSION_MS,
) -> JoinRequest:
    return JoinRequest(
        group_id=group,
        member_id=member_id,
        protocol_type=protocol_type,
        protocols=protocols,
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=REBALANCE_MS,
        group_instance_id=instance,
        client_id=client,
    )
