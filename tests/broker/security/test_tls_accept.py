"""The accept path's TLS step (broker/security/accept.py) and the reloading context (tls.py)."""

from __future__ import annotations

import shutil
from pathlib import Path

import trio
import trio.testing

from broker.security.accept import TLS_HANDSHAKE_TIMEOUT_S, secure_connection
from broker.security.listeners import ListenerSpec, SecurityProtocol
from broker.security.session import current_session
from broker.security.tls import TlsContextSource, client_context, principal_from_certificate
from tests.broker.security.conftest import Pki, make_pki

SSL_LISTENER = ListenerSpec(SecurityProtocol.SSL, "127.0.0.1", 0)


async def _tcp_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    client = await trio.open_tcp_stream("127.0.0.1", port)
    server = await listeners[0].accept()
    await listeners[0].aclose()
    return client, server


async def test_a_handshake_that_never_finishes_is_dropped(
    pki: Pki, autojump_clock: trio.testing.MockClock
) -> None:
    tls = TlsContextSource(str(pki.cert_file), str(pki.key_file))
    failures: list[str] = []
    client, server = await _tcp_pair()
    started = trio.current_time()
    result = await secure_connection(
        server, SSL_LISTENER, tls, on_handshake_failed=lambda host, exc: failures.append(host)
    )
    assert result is None and failures == ["127.0.0.1"]
    assert trio.current_time() - started >= TLS_HANDSHAKE_TIMEOUT_S
    assert await client.receive_some(10) == b""  # the broker closed it
    await client.aclose()


async def test_a_verified_client_certificate_names_the_session(pki: Pki) -> None:
    tls = TlsContextSource(
        str(pki.cert_file), str(pki.key_file), str(pki.ca_file), client_auth="requested"
    )
    cert, key = pki.client_cert("alice", organization_name="Example", organization_unit_name="x")
    context = client_context(str(pki.ca_file), cert, key)
    client_tcp, server_tcp = await _tcp_pair()
    principal = None

    async def serve() -> None:
        nonlocal principal
        stream = await secure_connection(server_tcp, SSL_LISTENER, tls)
        assert stream is not None
        session = current_session()
        assert session is not None and session.authenticated
        principal = session.principal
        await stream.send_all(b"hi")
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve)
        client = trio.SSLStream(client_tcp, context, server_hostname="127.0.0.1")
        await client.do_handshake()
        assert await client.receive_some(10) == b"hi"
        await trio.aclose_forcefully(client)
    assert principal == "User:CN=alice,OU=x,O=Example"


def test_context_reloads_changed_files_and_keeps_the_old_one_on_failure(tmp_path: Path) -> None:
    pki = make_pki(tmp_path / "a")
    now = [0.0]
    errors: list[Exception] = []
    tls = TlsContextSource(
        str(pki.cert_file),
        str(pki.key_file),
        on_reload_failed=errors.append,
        monotonic=lambda: now[0],
    )
    first = tls.context()
    now[0] += 5
    assert tls.context() is first  # nothing changed on disk
    pki.key_file.write_text("not a key")  # caught half way through a renewal
    now[0] += 5
    assert tls.context() is first and len(errors) == 1
    renewed = make_pki(tmp_path / "b")
    shutil.copy(renewed.cert_file, pki.cert_file)
    shutil.copy(renewed.key_file, pki.key_file)
    tls.request_reload()
    assert tls.context() is not first and tls.reloads == 1


def test_principal_escapes_rfc2253_specials() -> None:
    cert = {"subject": ((("organizationName", "A, B"),), (("commonName", "x=y+z"),))}
    assert principal_from_certificate(cert) == r"User:CN=x\=y\+z,O=A\, B"
    assert principal_from_certificate(None) is None
    assert principal_from_certificate({}) is None
