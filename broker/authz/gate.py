"""The handler layer's security check, shared by every codec (msgpack and Kafka).

`guard(api, handler)` wraps a handler from broker/dispatch.py's table. Before the
handler runs:

1. on a `SASL_*` listener, a connection that has not authenticated may only call
   `api_versions` and `authenticate`; anything else is answered
   SASL_AUTHENTICATION_FAILED, audited, and the connection closes;
2. with `authorizer=on`, the API's policy (broker/security/policy.py) checks the
   ACLs for the session's principal and host, and answers denied parts with
   Kafka's codes.

A context without security (`ctx.security is None`) runs the handler unchanged.
"""

from __future__ import annotations

from broker.context import Answer, Body, BrokerContext, Deferred, Handler
from broker.security import audit
from broker.security.acl import ANONYMOUS, Operation, ResourceType
from broker.security.policy import Access, policy_for
from broker.security.session import current_session
from protocol.errors import SaslAuthenticationFailed

# What an unauthenticated connection may ask (Kafka: ApiVersions and the SASL APIs).
BEFORE_AUTHENTICATION = frozenset({"api_versions", "authenticate"})


def guard(api: str, handler: Handler) -> Handler:
    """`handler` behind the authentication gate and the API's authorization policy."""
    policy = policy_for(api)

    async def guarded(ctx: BrokerContext, body: Body) -> Answer | Deferred[Answer] | None:
        security = ctx.security
        if security is None:
            return await handler(ctx, body)
        if api not in BEFORE_AUTHENTICATION:
            _require_login(ctx, api)
        if not security.authorizer_enabled:
            return await handler(ctx, body)
        return await policy(_access(ctx, api), handler, ctx, body)

    return guarded


def permits(ctx: BrokerContext, api: str, op: Operation, rtype: ResourceType, name: str) -> bool:
    """The authorizer's answer for a check with no native handler to guard (Kafka's
    FindCoordinator, DescribeCluster, OffsetDelete, a broker's configs): True when no
    authorizer runs; a denial is audited and counted as the policies' are. Before a
    SASL login it raises, as a guarded handler does."""
    security = ctx.security
    if security is None:
        return True
    _require_login(ctx, api)
    return not security.authorizer_enabled or _access(ctx, api).require(op, rtype, name)


def allows(ctx: BrokerContext, op: Operation, rtype: ResourceType, name: str) -> bool:
    """`permits` without the audit: for a right that is one of two ways in (Create on
    the cluster, else on the topic), whose absence alone is no denial."""
    security = ctx.security
    if security is None:
        return True
    _require_login(ctx, "-")
    return not security.authorizer_enabled or _access(ctx, "-").allowed(op, rtype, name)


def _require_login(ctx: BrokerContext, api: str) -> None:
    """Before a SASL login only the exchange itself is served: the rest is refused,
    audited, and the connection closes."""
    session = current_session()
    if session is not None and not session.authenticated:
        audit.request_denied(ANONYMOUS, session.client_host, api, "Cluster", "-", "Any")
        ctx.metrics.get("tidelog_authorization_denied").labels(api).inc()
        session.request_close()
        raise SaslAuthenticationFailed(
            f"{api}: this listener requires SASL authentication first (authenticate)"
        )


def _access(ctx: BrokerContext, api: str) -> Access:
    """The current session's view of the authorizer (`ctx.security` is set)."""
    assert ctx.security is not None
    session = current_session()
    return Access(
        ctx,
        ctx.security.acls.authorizer(),
        session.principal if session is not None else ANONYMOUS,
        session.client_host if session is not None else "memory",
        api,
    )
