"""The console as the metrics listener's mount: sessions, CSRF, login, then the page.

Order of checks for each request: static files (no session); the session cookie (a
new session if none); for a POST, the session's CSRF token and, when the browser
sends one, an Origin that is this very host; the login (when the broker
authenticates); then the route, run as the session's principal (broker/console/
acting.py). Answers are HTTP/1.0, one per connection, as for /metrics.
"""

from __future__ import annotations

import time
from functools import cache
from importlib import resources
from urllib.parse import urlsplit

import trio

from broker.console.acting import Actor
from broker.console.base import Broker, Call
from broker.console.http import BadRequest, Request, Response, parse_head, read_form, redirect
from broker.console.login import check_login, login_page
from broker.console.render import ROOT, View, esc, page
from broker.console.routes import find_route
from broker.console.sessions import COOKIE, ConsoleSession, SessionStore
from broker.console.settings import ConsoleSettings
from broker.context import BrokerContext
from broker.logging import get_logger
from broker.security.acl import ANONYMOUS
from compaction.service import CleanerService
from protocol.errors import TidelogError

log = get_logger(component="console")

STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}
# Error codes answered with HTTP's own statuses (the rest are 400).
_FORBIDDEN_SUFFIX = "AUTHORIZATION_FAILED"
_NOT_FOUND = frozenset({"UNKNOWN_TOPIC_OR_PARTITION", "GROUP_ID_NOT_FOUND"})


@cache
def _static(name: str) -> bytes | None:
    folder = resources.files("broker.console").joinpath("static")
    entry = folder.joinpath(name)
    if "/" in name or name.startswith(".") or not entry.is_file():
        return None
    return entry.read_bytes()


class Console:
    """The web console; serves 503 until `attach` gives it the running broker."""

    def __init__(self, settings: ConsoleSettings) -> None:
        self.settings = settings
        self.sessions = SessionStore(settings.idle_timeout_s)
        self.broker: Broker | None = None
        self._started_ms = int(time.time() * 1000)

    def attach(self, ctx: BrokerContext, cleaner: CleanerService | None) -> None:
        self.broker = Broker(ctx, cleaner, self._started_ms)

    def claims(self, path: str) -> bool:
        path = path.split("?", 1)[0]
        return path == "/" or path == ROOT or path.startswith(ROOT + "/")

    async def serve(self, stream: trio.abc.Stream, received: bytes) -> None:
        peer = _peer(stream)
        try:
            request, rest, length = parse_head(received, peer)
            if request.method == "POST":
                request = await read_form(stream, request, rest, length)
            response = await self.answer(request)
        except BadRequest as exc:
            response = Response(f"{exc}\n".encode(), exc.status, "text/plain; charset=utf-8")
        except Exception:
            # A bug in one page costs that page: the listener and /metrics keep serving.
            log.exception("console_request_failed")
            response = Response(
                b"internal error (see the broker's log)\n",
                "500 Internal Server Error",
                "text/plain; charset=utf-8",
            )
        head_only = received[:5].upper().startswith(b"HEAD")
        await stream.send_all(response.render(head_only=head_only))

    async def answer(self, request: Request) -> Response:
        path = request.path.rstrip("/") or "/"
        if path in ("/", ROOT):
            path = ROOT + "/"
        if request.method not in ("GET", "HEAD", "POST"):
            return Response(b"GET, HEAD or POST\n", "405 Method Not Allowed", "text/plain")
        if path.startswith(f"{ROOT}/static/"):
            body = _static(path.removeprefix(f"{ROOT}/static/"))
            if body is None:
                return Response(b"not found\n", "404 Not Found", "text/plain")
            kind = STATIC_TYPES.get("." + path.rsplit(".", 1)[-1], "application/octet-stream")
            return Response(body, content_type=kind)
        cookie: str | None = None
        session_id = request.cookie(COOKIE) or ""
        session = self.sessions.get(session_id)
        if session is None:
            principal = None if self.settings.login_required else ANONYMOUS
            session_id, session = self.sessions.create(principal)
            cookie = session_id
        response = await self._checked(request, path, session_id, session)
        if isinstance(response, tuple):
            response, cookie = response
        if cookie is not None:
            response.headers.append(("Set-Cookie", self._cookie(cookie)))
        return response

    async def _checked(
        self, request: Request, path: str, session_id: str, session: ConsoleSession
    ) -> Response | tuple[Response, str]:
        view = View(
            session.principal,
            session.csrf,
            self.settings.login_required,
            notice=request.query.get("notice", ""),
            problem=request.query.get("problem", ""),
        )
        if request.method == "POST" and not self._csrf_ok(request, session):
            log.warning("console_csrf_refused", client=request.peer, path=path)
            return page(
                view,
                "",
                "Refused",
                "<p>This form is stale or was not sent by the "
                "console (CSRF check). Reload the page and try again.</p>",
                status="403 Forbidden",
            )
        if self.broker is None:
            return page(
                view,
                "",
                "Starting",
                "<p>The broker is still starting.</p>",
                status="503 Service Unavailable",
            )
        if path == f"{ROOT}/login":
            return await self._login(request, view, session_id)
        if path == f"{ROOT}/logout" and request.method == "POST":
            self.sessions.end(session_id)
            return redirect(f"{ROOT}/login" if self.settings.login_required else f"{ROOT}/")
        if session.principal is None:
            if path.startswith(f"{ROOT}/api/"):
                return Response(
                    b'{"error": "login required"}', "401 Unauthorized", "application/json"
                )
            return redirect(f"{ROOT}/login")
        return await self._route(request, path, view, session.principal)

    async def _route(self, request: Request, path: str, view: View, principal: str) -> Response:
        assert self.broker is not None
        found = find_route(request.method, path)
        if found is None:
            return page(view, "", "Not found", "<p>No such page.</p>", status="404 Not Found")
        handler, params = found
        actor = Actor(self.broker.ctx, principal, request.peer, self.settings.tls)
        actor.enter()
        try:
            return await handler(Call(request, actor, view, params, self.broker))
        except TidelogError as exc:
            status = "400 Bad Request"
            if exc.code.endswith(_FORBIDDEN_SUFFIX):
                status = "403 Forbidden"
            elif exc.code in _NOT_FOUND:
                status = "404 Not Found"
            body = f"<p><strong>{esc(exc.code)}</strong>: {esc(exc.message)}</p>"
            return page(
                view, "", "Refused" if status.startswith("403") else "Error", body, status=status
            )

    async def _login(
        self, request: Request, view: View, session_id: str
    ) -> Response | tuple[Response, str]:
        if not self.settings.login_required:
            return redirect(f"{ROOT}/")
        if request.method != "POST":
            return login_page(view)
        assert self.broker is not None
        username = request.form.get("username", "")
        principal = await check_login(
            self.broker.ctx,
            username,
            request.form.get("password", ""),
            request.peer,
            self.settings.tls,
            self.settings.failed_login_delay_s,
        )
        if principal is None:
            return login_page(view, username, "Wrong user name or password.", "401 Unauthorized")
        self.sessions.end(session_id)
        new_id, _ = self.sessions.create(principal)
        return redirect(f"{ROOT}/"), new_id

    def _csrf_ok(self, request: Request, session: ConsoleSession) -> bool:
        if not session.csrf_matches(request.form.get("csrf", "")):
            return False
        origin = request.headers.get("origin")
        if origin is None or origin == "null":
            return origin is None
        return urlsplit(origin).netloc == request.headers.get("host", "")

    def _cookie(self, session_id: str) -> str:
        secure = "; Secure" if self.settings.tls else ""
        return f"{COOKIE}={session_id}; Path={ROOT}; HttpOnly; SameSite=Strict{secure}"


def _peer(stream: trio.abc.Stream) -> str:
    inner = getattr(stream, "transport_stream", stream)
    sock = getattr(inner, "socket", None)
    try:
        return str(sock.getpeername()[0]) if sock is not None else "-"
    except OSError:
        return "-"
