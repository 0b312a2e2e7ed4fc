"""The coordinator's effects and tickets: what the driver must do, and what follows.

Every part of the coordinator (membership, rebalance, offsets) answers late requests
and writes `__consumer_offsets` through one `Outbox`, so tickets come from one counter
and the effects keep one order: the driver writes appends in emission order, and a
later record supersedes an earlier one. Kafka's CoordinatorRuntime plays this part
(records plus the response they complete); here it is plain data for the driver.

Thread safety: none; the coordinator's one driver task owns it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import NamedTuple

from broker.groups.messages import Append, Deliver, Effect, Record, Response


class FollowUp(enum.Enum):
    """What completing an Append does (its token says to what)."""

    STORE_ASSIGNMENT = "store_assignment"  # token: the generation whose assignment it is
    COMMIT = "commit"  # token: the ticket of the commit's Pending
    REPLY = "reply"  # token: the ticket of the Pending the append answers
    NONE = "none"


class AppendWaiter(NamedTuple):
    follow_up: FollowUp
    group_id: str
    token: int


class Outbox:
    """Tickets, the effects not yet drained, and the appends not yet acknowledged."""

    def __init__(self) -> None:
        self._effects: list[Effect] = []
        self._next_ticket = 1
        self._appends: dict[int, AppendWaiter] = {}

    def ticket(self) -> int:
        ticket = self._next_ticket
        self._next_ticket += 1
        return ticket

    def deliver(self, ticket: int, response: Response) -> None:
        self._effects.append(Deliver(ticket, response))

    def append(
        self, follow_up: FollowUp, group_id: str, token: int, records: Iterable[Record]
    ) -> int:
        """Emit an Append of `records`; its completion is routed by `follow_up`."""
        ticket = self.ticket()
        self._appends[ticket] = AppendWaiter(follow_up, group_id, token)
        self._effects.append(Append(ticket, tuple(records)))
        return ticket

    def completed(self, ticket: int) -> AppendWaiter:
        """Forget the acknowledged Append(ticket) and say what its completion does."""
        return self._appends.pop(ticket)

    def take(self) -> list[Effect]:
        effects, self._effects = self._effects, []
        return effects


__all__ = ["AppendWaiter", "FollowUp", "Outbox"]
