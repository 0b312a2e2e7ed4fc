"""The gate every msgpack API row runs behind (broker/dispatch.py's table).

`guard(api, handler, row)` wraps a handler. Before it runs, from the row's
declaration (`broker.security.requires`):

1. on a `SASL_*` listener, a connection that has not authenticated is refused
   unless the row is `before_login`: SASL_AUTHENTICATION_FAILED, audited, and the
   connection closes;
2. with `authorizer=on`, the row's `whole` right is checked (refused with the
   resource type's authorization error), then its `each` right through the row's
   shape (broker/authz/rules.py), which answers denied entries beside the others.

A row without a declaration gets `UNDECLARED` (All on the cluster): closed by
default. A context without security (`ctx.security is None`) runs the handler
unchanged. The Kafka registry (broker/kafka/registry.py) gates its rows the same
way with the same login check and `Requires`.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.authz.access import access_for, refuse_unless, require_login
from broker.authz.rules import Shape
from broker.context import Answer, Body, BrokerContext, Deferred, Handler
from broker.security.acl import CLUSTER_NAME, ResourceType
from broker.security.requires import UNDECLARED, Requires


@dataclass(frozen=True, slots=True)
class NativeApi:
    """One row of the msgpack API table: the handler and what it needs."""

    handler: Handler
    requires: Requires = UNDECLARED
    # How the denied entries of `requires.each` are answered (required with `each`).
    shape: Shape | None = None

    def __post_init__(self) -> None:
        if (self.requires.each is None) != (self.shape is None):
            raise ValueError(f"{self.handler.__name__}: an `each` right needs its shape, no other")


def whole_name(requires: Requires, body: Body) -> str:
    """The name of the resource `requires.whole` is checked on."""
    assert requires.whole is not None
    if requires.whole.resource is ResourceType.CLUSTER:
        return CLUSTER_NAME
    assert requires.name_from is not None
    return str(body[requires.name_from])


def guard(api: str, handler: Handler, row: NativeApi | None) -> Handler:
    """`handler` behind the login gate and the row's declared rights."""
    requires = row.requires if row is not None else UNDECLARED
    shape = row.shape if row is not None else None

    async def guarded(ctx: BrokerContext, body: Body) -> Answer | Deferred[Answer] | None:
        if ctx.security is None:
            return await handler(ctx, body)
        if not requires.before_login:
            require_login(ctx, api)
        access = access_for(ctx, api)
        if access is None:
            return await handler(ctx, body)
        if requires.whole is not None:
            refuse_unless(access, requires.whole, whole_name(requires, body))
        if requires.each is not None and shape is not None:
            return await shape(access, requires.each, handler, ctx, body)
        return await handler(ctx, body)

    return guarded
