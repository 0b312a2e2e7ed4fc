"""The broker's TLS server context: TLS 1.2+ only, optional client certificates, live reload.

`TlsContextSource.context()` is asked once per accepted connection. It rebuilds the
`ssl.SSLContext` when a certificate, key or CA file changed on disk (checked at most
every `RELOAD_CHECK_INTERVAL_S`, or at once after `request_reload()`: SIGHUP), so a
renewed certificate is served without a restart; connections already open keep the
one they negotiated. A rebuild that fails (say, the key and certificate are caught
half way through a renewal) keeps the previous context and is reported to
`on_reload_failed`; the next check tries again.

`principal_from_certificate` names a client by its certificate's subject, as Kafka's
default principal builder does: `User:` + the distinguished name in RFC 2253 order
(`User:CN=alice,OU=eng,O=Example`).
"""

from __future__ import annotations

import os
import ssl
import time
from collections.abc import Callable
from typing import Any

# How stale the served certificate may get after a renewal, without a SIGHUP.
RELOAD_CHECK_INTERVAL_S = 1.0
CLIENT_AUTH_MODES = {
    "none": ssl.CERT_NONE,
    "requested": ssl.CERT_OPTIONAL,
    "required": ssl.CERT_REQUIRED,
}


def server_context(certfile: str, keyfile: str, cafile: str, client_auth: str) -> ssl.SSLContext:
    """A fresh server context; raises ssl.SSLError / OSError naming the bad file."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    context.verify_mode = CLIENT_AUTH_MODES[client_auth]
    if cafile:
        context.load_verify_locations(cafile)
    return context


def client_context(
    cafile: str | None = None,
    certfile: str | None = None,
    keyfile: str | None = None,
    *,
    check_hostname: bool = True,
) -> ssl.SSLContext:
    """What our clients use: verify the broker (system CAs unless `cafile`), TLS 1.2+."""
    context = ssl.create_default_context(cafile=cafile)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.check_hostname = check_hostname
    if certfile:
        context.load_cert_chain(certfile, keyfile)
    return context


class TlsContextSource:
    """The current server context of the TLS listeners (and the metrics endpoint)."""

    def __init__(
        self,
        certfile: str,
        keyfile: str,
        cafile: str = "",
        client_auth: str = "none",
        *,
        on_reload_failed: Callable[[Exception], None] | None = None,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._files = tuple(f for f in (certfile, keyfile, cafile) if f)
        self._args = (certfile, keyfile, cafile, client_auth)
        self._on_reload_failed = on_reload_failed
        self._monotonic = monotonic
        self._stamp = self._stamps()
        self._context = server_context(*self._args)  # a bad file fails the start
        self._checked = monotonic()
        self.reloads = 0

    def _stamps(self) -> tuple[tuple[int, int, int], ...]:
        out = []
        for path in self._files:
            try:
                st = os.stat(path)
                out.append((st.st_ino, st.st_mtime_ns, st.st_size))
            except OSError:
                out.append((0, 0, 0))
        return tuple(out)

    def request_reload(self) -> None:
        """Check the files on the next `context()` call (what SIGHUP does)."""
        self._checked = self._monotonic() - RELOAD_CHECK_INTERVAL_S

    def context(self) -> ssl.SSLContext:
        now = self._monotonic()
        if now - self._checked >= RELOAD_CHECK_INTERVAL_S:
            self._checked = now
            stamp = self._stamps()
            if stamp != self._stamp:
                try:
                    self._context = server_context(*self._args)
                    self._stamp = stamp
                    self.reloads += 1
                except (ssl.SSLError, OSError) as exc:
                    if self._on_reload_failed is not None:
                        self._on_reload_failed(exc)
        return self._context


def principal_from_certificate(cert: dict[str, Any] | None) -> str | None:
    """`User:<subject DN, RFC 2253 order>` of a verified peer certificate, or None."""
    if not cert or not cert.get("subject"):
        return None
    parts = []
    for rdn in reversed(cert["subject"]):
        parts.append("+".join(f"{_SHORT.get(k, k)}={_escape(v)}" for k, v in rdn))
    return "User:" + ",".join(parts)


_SHORT = {
    "commonName": "CN",
    "organizationName": "O",
    "organizationalUnitName": "OU",
    "countryName": "C",
    "stateOrProvinceName": "ST",
    "localityName": "L",
    "domainComponent": "DC",
    "emailAddress": "EMAILADDRESS",
}


def _escape(value: str) -> str:
    out = "".join("\\" + ch if ch in ',+"\\<>;=' else ch for ch in value)
    if out.startswith((" ", "#")):
        out = "\\" + out
    return out[:-1] + "\\ " if out.endswith(" ") else out
