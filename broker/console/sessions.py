"""Console sessions: a random id in an HttpOnly cookie, a CSRF token, an idle expiry.

A session is made on a visitor's first request (so the login form itself carries a
CSRF token); logging in replaces it with a new id (no fixation), logging out or
`console.session.timeout.ms` without a request ends it, and none outlives
`SESSION_MAX_AGE_S`. Only the SHA-256 of an id is kept, so the table holds nothing a
cookie can be made from. Sessions live in memory: a restart logs everyone out.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections import OrderedDict
from dataclasses import dataclass

import trio

COOKIE = "tidelog_console"
# No session lives longer than this, however busy (a stolen cookie ages out).
SESSION_MAX_AGE_S = 12 * 3600.0
# Sessions kept at most; the least recently used goes first (a flood of visitors
# without cookies cannot grow the table without bound).
MAX_SESSIONS = 10_000
TOKEN_BYTES = 32


@dataclass(slots=True)
class ConsoleSession:
    """One browser's session: who is logged in (None: nobody yet) and its CSRF token."""

    principal: str | None
    csrf: str
    created: float
    last_seen: float

    def csrf_matches(self, offered: str) -> bool:
        return hmac.compare_digest(offered.encode(), self.csrf.encode())


def _digest(session_id: str) -> str:
    return hashlib.sha256(session_id.encode()).hexdigest()


class SessionStore:
    """The live sessions, by the digest of their id."""

    def __init__(self, idle_timeout_s: float) -> None:
        self.idle_timeout_s = idle_timeout_s
        self._sessions: OrderedDict[str, ConsoleSession] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, session_id: str | None) -> ConsoleSession | None:
        """The live session of a cookie's id (its idle clock restarted), or None."""
        if not session_id:
            return None
        key = _digest(session_id)
        session = self._sessions.get(key)
        if session is None:
            return None
        now = trio.current_time()
        if now - session.last_seen > self.idle_timeout_s or now - session.created > (
            SESSION_MAX_AGE_S
        ):
            del self._sessions[key]
            return None
        session.last_seen = now
        self._sessions.move_to_end(key)
        return session

    def create(self, principal: str | None) -> tuple[str, ConsoleSession]:
        """A new session and the id its cookie carries."""
        while len(self._sessions) >= MAX_SESSIONS:
            self._sessions.popitem(last=False)
        session_id = secrets.token_urlsafe(TOKEN_BYTES)
        now = trio.current_time()
        session = ConsoleSession(principal, secrets.token_urlsafe(TOKEN_BYTES), now, now)
        self._sessions[_digest(session_id)] = session
        return session_id, session

    def end(self, session_id: str | None) -> None:
        if session_id:
            self._sessions.pop(_digest(session_id), None)
