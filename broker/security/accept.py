"""The accept path: admission, TLS (before the protocol sniff), then the session.

Admission comes first (`Admission`): a connection counts against `max.connections`
and `max.connections.per.ip` from the moment it is accepted, before its TLS
handshake, so peers that never finish one cannot hold more slots than the limits
(issue 38 #2); one over a limit is closed at once. `serve_listener` accepts, and
when accept fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS,
ENOMEM) it backs off, doubling up to `ACCEPT_BACKOFF_MAX_S`, and reports it once
per `ACCEPT_REPORT_INTERVAL_S` instead of retrying in a loop.

`secure_connection(stream, listener, tls, ...)` runs in the new connection's task,
before the connection code (broker/connection.py, or the Kafka connection):

1. on an `SSL://` or `SASL_SSL://` listener, wrap the TCP stream in
   `trio.SSLStream` and finish the handshake within `TLS_HANDSHAKE_TIMEOUT_S`; a
   failed or stalled handshake (plaintext sent to a TLS port, an unknown or expired
   client certificate, a peer that never finishes) closes the stream and returns None;
2. build the connection's `Session` (principal from the client certificate if one was
   verified, else `User:ANONYMOUS`; unauthenticated until SASL on `SASL_*` listeners)
   and set it in the task's context;
3. on a `SASL_*` listener, hand back a stream that reports end-of-stream once the
   session asks to close (after a failed authentication), so any connection loop
   answers what it has read and closes, without knowing why.
"""

from __future__ import annotations

import errno
import math
import ssl
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import trio

from broker.security.listeners import ListenerSpec
from broker.security.session import Session, set_session
from broker.security.tls import TlsContextSource, principal_from_certificate

# A TLS handshake must finish within this long (a peer that stalls holds a slot).
TLS_HANDSHAKE_TIMEOUT_S = 10.0
# accept's errors that mean "no room for another connection now", not a broken listener.
ACCEPT_CAPACITY_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})
# The first wait after such an error, doubled while they last, up to the max.
ACCEPT_BACKOFF_S = 0.1
ACCEPT_BACKOFF_MAX_S = 2.0
# At most one report (log line) of accept running out of room this often.
ACCEPT_REPORT_INTERVAL_S = 10.0


@dataclass
class Admission:
    """Connections accepted and not yet closed, in all and by client host: counted from
    accept (before the TLS handshake) until the connection ends."""

    max_connections: int
    max_per_host: int
    total: int = 0
    by_host: Counter[str] = field(default_factory=Counter)

    def admit(self, host: str) -> str | None:
        """Count a connection from `host`; or the reason it is refused (uncounted)."""
        if self.total >= self.max_connections:
            return "limit"
        if self.by_host[host] >= self.max_per_host:
            return "ip_limit"
        self.total += 1
        self.by_host[host] += 1
        return None

    def leave(self, host: str) -> None:
        """An admitted connection from `host` has ended."""
        self.total -= 1
        self.by_host[host] -= 1
        if not self.by_host[host]:
            del self.by_host[host]


async def serve_listener(
    listener: trio.abc.Listener[trio.SocketStream],
    handler: Callable[[trio.SocketStream], Awaitable[None]],
    handler_nursery: trio.Nursery,
    on_exhausted: Callable[[OSError, int], None],
) -> None:
    """Accept on `listener` forever, each connection served by `handler` in
    `handler_nursery`; out of descriptors or memory, back off and call
    `on_exhausted(error, failures since the last report)` once per report interval."""
    backoff = ACCEPT_BACKOFF_S
    failures, reported = 0, -math.inf
    async with listener:
        while True:
            try:
                stream = await listener.accept()
            except OSError as exc:
                if exc.errno not in ACCEPT_CAPACITY_ERRNOS:
                    raise
                failures += 1
                now = trio.current_time()
                if now - reported >= ACCEPT_REPORT_INTERVAL_S:
                    on_exhausted(exc, failures)
                    failures, reported = 0, now
                await trio.sleep(backoff)
                backoff = min(backoff * 2, ACCEPT_BACKOFF_MAX_S)
                continue
            backoff = ACCEPT_BACKOFF_S
            handler_nursery.start_soon(handler, stream)


class ClosableStream(trio.abc.Stream):
    """A stream whose reads end (b"") once its session asks to close.

    A read in progress is cancelled then; `socket` is the TCP socket when there is no
    TLS layer (so fetch answers can still go out with sendfile), else None.
    """

    def __init__(self, inner: trio.abc.Stream, session: Session) -> None:
        self.inner = inner
        self._session = session
        self._receiving: trio.CancelScope | None = None
        self.socket = getattr(inner, "socket", None)
        session.on_close.append(self._cancel_receive)

    @property
    def transport_stream(self) -> trio.abc.Stream:
        """The TCP stream underneath (for the peer address and TCP state checks)."""
        return getattr(self.inner, "transport_stream", self.inner)

    def _cancel_receive(self) -> None:
        if self._receiving is not None:
            self._receiving.cancel()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        if self._session.close_requested.is_set():
            return b""
        data: bytes | bytearray = b""
        with trio.CancelScope() as self._receiving:
            data = await self.inner.receive_some(max_bytes)
        self._receiving = None
        return b"" if self._session.close_requested.is_set() else data

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        send_eof = getattr(self.inner, "send_eof", None)
        if send_eof is not None:
            await send_eof()

    async def aclose(self) -> None:
        await self.inner.aclose()


def client_host(stream: trio.abc.Stream) -> str:
    sock = getattr(stream, "socket", None)
    try:
        return str(sock.getpeername()[0]) if sock is not None else "memory"
    except OSError:
        return "unknown"


async def secure_connection(
    stream: trio.SocketStream,
    listener: ListenerSpec,
    tls: TlsContextSource | None,
    *,
    on_handshake_failed: Callable[[str, BaseException], None] | None = None,
) -> trio.abc.Stream | None:
    """The stream to serve and its session set in context; None if TLS failed (closed)."""
    host = client_host(stream)
    served: trio.abc.Stream = stream
    principal = None
    if listener.protocol.tls:
        assert tls is not None, "a TLS listener without a TLS context"
        ssl_stream = trio.SSLStream(stream, tls.context(), server_side=True)
        try:
            with trio.fail_after(TLS_HANDSHAKE_TIMEOUT_S):
                await ssl_stream.do_handshake()
        except (trio.BrokenResourceError, trio.TooSlowError, ssl.SSLError, OSError) as exc:
            if on_handshake_failed is not None:
                on_handshake_failed(host, exc)
            await trio.aclose_forcefully(stream)
            return None
        principal = principal_from_certificate(ssl_stream.getpeercert())
        served = ssl_stream
    session = Session(protocol=listener.protocol, client_host=host)
    if principal is not None:
        session.principal = principal
    session.authenticated = not listener.protocol.sasl
    set_session(session)
    # Only a SASL listener ever closes a connection for failing to authenticate.
    return ClosableStream(served, session) if listener.protocol.sasl else served
