"""`authenticate` (docs/protocol.md §9): SASL PLAIN and SCRAM over the msgpack protocol.

One exchange step per request, on the connection's `Session` (broker/security/):

- PLAIN: `{mechanism: "PLAIN", auth_bytes: NUL user NUL password}` -> complete; the
  password is checked against the user's stored SCRAM key (in a worker thread: PBKDF2
  takes milliseconds);
- SCRAM-SHA-256/512: client-first -> server-first (not complete), client-final ->
  server-final (complete).

A failure (wrong password, unknown user, malformed message, a step out of order)
is answered after `connection.failed.authentication.delay.ms` with
SASL_AUTHENTICATION_FAILED (or ILLEGAL_SASL_STATE), counted, audited, and the
connection closes. A mechanism the listener does not enable is
UNSUPPORTED_SASL_MECHANISM naming the enabled ones; the connection stays open so
the client can try another. Another login on a connection already logged in is
ILLEGAL_SASL_STATE (as Kafka answers a SaslAuthenticate after a successful one),
neither counted nor audited as a failed login, and the connection stays open.
"""

from __future__ import annotations

import trio

from broker import offload
from broker.context import BrokerContext
from broker.security import audit
from broker.security.service import BrokerSecurity
from broker.security.session import Session, current_session
from protocol.api_types import AuthenticateAnswer, AuthenticateRequest
from protocol.errors import (
    IllegalSaslState,
    SaslAuthenticationFailed,
    TidelogError,
    UnsupportedSaslMechanism,
)
from protocol.sasl.plain import parse_plain
from protocol.sasl.scram import ScramServer, scram_mechanism


async def authenticate(ctx: BrokerContext, body: AuthenticateRequest) -> AuthenticateAnswer:
    session = current_session()
    security = ctx.security
    if session is None or security is None or not session.protocol.sasl:
        raise IllegalSaslState("authenticate: this listener does not use SASL")
    mechanism = body["mechanism"]
    if mechanism not in security.mechanisms:
        enabled = ", ".join(sorted(security.mechanisms))
        raise UnsupportedSaslMechanism(f"mechanism {mechanism!r} is not enabled ({enabled})")
    if session.authenticated:  # refused as Kafka does, not a failed login (nothing tried)
        raise IllegalSaslState("authenticate: this connection is already authenticated")
    try:
        return await _step(ctx, security, session, mechanism, bytes(body["auth_bytes"]))
    except (SaslAuthenticationFailed, IllegalSaslState) as exc:
        await _failed(ctx, security, session, mechanism, exc)
        raise


async def _step(
    ctx: BrokerContext, security: BrokerSecurity, session: Session, mechanism: str, data: bytes
) -> AuthenticateAnswer:
    if session.exchange is not None and session.mechanism != mechanism:
        raise IllegalSaslState(f"authenticate: {mechanism} step during a {session.mechanism} one")
    if mechanism == "PLAIN":
        username, password = parse_plain(data)
        session.mechanism = "PLAIN"
        session.exchange = username  # for the audit line if the password is wrong
        ok = await offload.to_worker(security.credentials.check_password, username, password)
        if not ok:
            raise SaslAuthenticationFailed("authentication failed: invalid credentials")
        return _succeeded(ctx, session, mechanism, username, b"")
    if session.exchange is None:
        credentials = security.credentials
        server = ScramServer(
            scram_mechanism(mechanism),
            lambda user: credentials.lookup(mechanism, user),
            decoy=lambda user: credentials.decoy(mechanism, user),
        )
        session.exchange, session.mechanism = server, mechanism
        return {"auth_bytes": server.first(data), "complete": False, "principal": None}
    server = session.exchange
    assert isinstance(server, ScramServer)
    final = server.final(data)
    assert server.username is not None
    return _succeeded(ctx, session, mechanism, server.username, final)


def _succeeded(
    ctx: BrokerContext, session: Session, mechanism: str, username: str, final: bytes
) -> AuthenticateAnswer:
    session.principal = f"User:{username}"
    session.authenticated = True
    session.exchange = None
    ctx.metrics.get("tidelog_authentications").labels(mechanism, "success").inc()
    audit.authentication_succeeded(session, mechanism)
    return {"auth_bytes": final, "complete": True, "principal": session.principal}


async def _failed(
    ctx: BrokerContext,
    security: BrokerSecurity,
    session: Session,
    mechanism: str,
    exc: TidelogError,
) -> None:
    """Count, audit, wait (slows guessing), then close once the answer is out."""
    exchange = session.exchange
    username = exchange if isinstance(exchange, str) else getattr(exchange, "tried_username", "")
    session.exchange = None
    ctx.metrics.get("tidelog_authentications").labels(mechanism, "failure").inc()
    audit.authentication_failed(session, mechanism, username or "", exc.message)
    session.request_close()
    await trio.sleep(security.failed_auth_delay_s)
