"""The console acts as its logged-in principal through the broker's own API table.

Every read and every change goes through `handler_for(api)` (broker/dispatch.py): the
same handlers, the same ACL gate (broker/authz/) and the same audit a client's
request gets, with a `Session` (broker/security/session.py) naming the principal and
the browser's address. Each change is also audited as a console action, succeeded
or refused, so an operator can tell what was done through the console.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.authz.access import allows
from broker.context import BrokerContext, Deferred
from broker.dispatch import handler_for
from broker.security.acl import Operation, ResourceType
from broker.security.audit import audit_log
from broker.security.listeners import SecurityProtocol
from broker.security.session import Session, set_session
from protocol.errors import TidelogError, error_from_wire


@dataclass(frozen=True, slots=True)
class Actor:
    """One request's principal, acting on the broker in-process."""

    ctx: BrokerContext
    principal: str
    client: str
    tls: bool

    def enter(self) -> None:
        """Make this principal the current task's session (the gate reads it)."""
        protocol = SecurityProtocol.SASL_SSL if self.tls else SecurityProtocol.SASL_PLAINTEXT
        set_session(Session(protocol, self.client, self.principal, authenticated=True))

    async def call(self, api: str, body: Mapping[str, Any]) -> Any:
        """The answer of `api` to `body`, as a client would get it (TidelogError if refused)."""
        answer = await handler_for(api)(self.ctx, dict(body))
        if isinstance(answer, Deferred):
            answer = await answer.finish()
        return answer

    async def change(self, action: str, target: str, api: str, body: Mapping[str, Any]) -> Any:
        """`call` for a state change, audited as a console action either way."""
        try:
            answer = await self.call(api, body)
            error = nested_error(answer)
            if error is not None:
                raise error
        except TidelogError as exc:
            self.audit(action, target, exc.code)
            raise
        self.audit(action, target, "ok")
        return answer

    def audit(self, action: str, target: str, outcome: str) -> None:
        audit_log.info(
            "console_action",
            principal=self.principal,
            client=self.client,
            action=action,
            target=target,
            outcome=outcome,
        )

    def may(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        """Whether the ACLs allow it (no audit: for what a page lists or offers)."""
        return allows(self.ctx, op, rtype, name)


def first_error(entries: list[Mapping[str, Any]]) -> TidelogError | None:
    """The first per-entry error of an answer (a partition, a group), as an exception."""
    for entry in entries:
        code = entry.get("error")
        if code:
            return error_from_wire(str(code), entry.get("message"))
    return None


def nested_error(answer: Any) -> TidelogError | None:
    """The first error inside an answer's topics and partitions, groups or results."""
    if not isinstance(answer, Mapping):
        return None
    for key in ("topics", "groups", "results"):
        entries = answer.get(key) or []
        error = first_error(entries)
        if error is not None:
            return error
        for entry in entries:
            error = first_error(entry.get("partitions") or [])
            if error is not None:
                return error
    return None
