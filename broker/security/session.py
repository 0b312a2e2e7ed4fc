"""Who is on the other end of a connection: one `Session` per connection, in a ContextVar.

The accept wrapper (broker/security/accept.py) creates the session and sets it in the
connection's task before any protocol code runs, so every task the connection starts
(reader, handler, writer, a deferred produce) sees the same one, and so does any
codec (msgpack today, Kafka's next) without a parameter threaded through it. The
gate (broker/authz/) reads it to authenticate and authorize.

A connection created outside the accept wrapper (tests that drive
`serve_connection` over a memory stream) has no session: it is treated as an
unauthenticated-listener PLAINTEXT connection of `User:ANONYMOUS`.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import trio

from broker.security.acl import ANONYMOUS
from broker.security.listeners import SecurityProtocol


@dataclass
class Session:
    """One connection's identity and its authentication progress."""

    protocol: SecurityProtocol
    client_host: str
    principal: str = ANONYMOUS
    # A SASL listener starts unauthenticated; others are authenticated from the start
    # (anonymously, or by the TLS client certificate).
    authenticated: bool = True
    # The SASL exchange in progress (mechanism name, its server state), if any.
    exchange: Any = None
    mechanism: str = ""
    # The mechanism a Kafka client chose with SaslHandshake (SaslAuthenticate then
    # carries only the bytes).
    handshake_mechanism: str = ""
    # Set to end the connection once what it has been answered is sent.
    close_requested: trio.Event = field(default_factory=trio.Event)
    on_close: list[Callable[[], None]] = field(default_factory=list)

    def request_close(self) -> None:
        """Stop reading this connection: it answers what it has read, then closes."""
        self.close_requested.set()
        for hook in self.on_close:
            hook()


_CURRENT: ContextVar[Session | None] = ContextVar("tidelog_session", default=None)


def current_session() -> Session | None:
    """The session of the connection whose task is running, or None (no accept wrapper)."""
    return _CURRENT.get()


def set_session(session: Session) -> None:
    """Make `session` the current task's (and so its future child tasks') session."""
    _CURRENT.set(session)
