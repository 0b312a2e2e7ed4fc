"""The console's login page: a broker user's password checked against its SCRAM entry.

The password is derived with the stored salt and compared with StoredKey
(`CredentialStore.check_password`, the check PLAIN logins get), in a worker thread
(PBKDF2 takes milliseconds). An unknown name costs the same as a wrong password and
gets the same answer, after the broker's failed-authentication delay; both outcomes
are audited as any other login is.
"""

from __future__ import annotations

import trio

from broker import offload
from broker.console.http import Response
from broker.console.render import ROOT, View, field, form, page
from broker.context import BrokerContext
from broker.security import audit
from broker.security.credentials import check_username
from broker.security.listeners import SecurityProtocol
from broker.security.session import Session

MECHANISM = "console-password"
_PASSWORD_INPUT = " autocomplete=current-password required"


def login_page(
    view: View, username: str = "", problem: str = "", status: str = "200 OK"
) -> Response:
    inner = field(
        "User name", "username", username, extra=" autocomplete=username required"
    ) + field("Password", "password", kind="password", extra=_PASSWORD_INPUT)
    body = (
        "<p>Log in with a broker user (<code>tidelog users add</code>). "
        "What you may see and do is what its ACLs allow.</p>"
        + form(view, f"{ROOT}/login", inner, "Log in")
    )
    shown = View(None, view.csrf, view.login_required, problem=problem)
    return page(shown, "", "Log in", body, status=status)


async def check_login(
    ctx: BrokerContext, username: str, password: str, client: str, tls: bool, delay_s: float
) -> str | None:
    """The principal `username` logs in as, or None (after the failed-login delay)."""
    protocol = SecurityProtocol.SASL_SSL if tls else SecurityProtocol.SASL_PLAINTEXT
    session = Session(protocol, client)
    security = ctx.security
    try:
        check_username(username)
        valid = True
    except ValueError:
        valid = False
    ok = (
        valid
        and bool(password)
        and security is not None
        and await offload.to_worker(security.credentials.check_password, username, password)
    )
    if not ok:
        await trio.sleep(delay_s)
        audit.authentication_failed(
            session, MECHANISM, username[:255], "wrong user name or password"
        )
        return None
    session.principal = f"User:{username}"
    audit.authentication_succeeded(session, MECHANISM)
    return session.principal


__all__ = ["check_login", "login_page"]
