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
from broker.security.acl import ANONYMOUS
from broker.security.policy import Access, policy_for
from broker.security.session import current_session
from protocol.errors import SaslAuthenticationFailed

# What an unauthenticated connection may ask (Kafka: ApiVersions and the SASL APIs).
BEFORE_AUTHENTICATION = frozenset({"api_versions", "authenticate"})


def guard(api: str, handler: Handler) -> Handler:
    """`handler` behind the authentication gate and the API's authorization policy."""
    policy = policy_for(api)

    async def guarded(ctx: BrokerContext, body: Body) -> Answer | Deferred | None:
        security = ctx.security
        if security is None:
            return await handler(ctx, body)
        session = current_session()
        if session is not None and not session.authenticated and api not in BEFORE_AUTHENTICATION:
            audit.request_denied(ANONYMOUS, session.client_host, api, "Cluster", "-", "Any")
            ctx.metrics.get("tidelog_authorization_denied").labels(api).inc()
            session.request_close()
            raise SaslAuthenticationFailed(
                f"{api}: this listener requires SASL authentication first (authenticate)"
            )
        if not security.authorizer_enabled:
            return await handler(ctx, body)
        access = Access(
            ctx,
            security.acls.authorizer(),
            session.principal if session is not None else ANONYMOUS,
            session.client_host if session is not None else "memory",
            api,
        )
        return await policy(access, handler, ctx, body)

    return guarded
