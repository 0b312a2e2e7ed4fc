"""A browser-like HTTP client for the console: one cookie jar, forms posted with the
page's CSRF token, redirects reported (not followed) so tests can see where they go."""

from __future__ import annotations

import http.client
import re
import ssl
from dataclasses import dataclass, field
from urllib.parse import urlencode

_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    text: str

    @property
    def location(self) -> str:
        return self.headers.get("location", "")


@dataclass
class Browser:
    """Requests to the console at host:port, keeping its session cookie like a browser."""

    host: str
    port: int
    tls: ssl.SSLContext | None = None
    cookies: dict[str, str] = field(default_factory=dict)
    csrf: str = ""

    def request(
        self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
    ) -> Reply:
        if self.tls is not None:
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                self.host, self.port, context=self.tls, timeout=30
            )
        else:
            conn = http.client.HTTPConnection(self.host, self.port, timeout=30)
        sent = dict(headers or {})
        if self.cookies:
            sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in self.cookies.items())
        try:
            conn.request(method, path, body=body or None, headers=sent)
            response = conn.getresponse()
            text = response.read().decode("utf-8", "replace")
            got = {k.lower(): v for k, v in response.getheaders()}
            for name, value in response.getheaders():
                if name.lower() == "set-cookie":
                    key, _, rest = value.partition("=")
                    self.cookies[key] = rest.split(";", 1)[0]
        finally:
            conn.close()
        found = _CSRF.search(text)
        if found:
            self.csrf = found.group(1)
        return Reply(response.status, got, text)

    def get(self, path: str) -> Reply:
        return self.request("GET", path)

    def post(
        self, path: str, fields: dict[str, str], *, csrf: str | None = None, **headers: str
    ) -> Reply:
        """POST a form with the session's CSRF token (or `csrf`, to test refusals)."""
        if not self.csrf:
            self.get("/console/topics")  # a page with a form, so with the token
        data = {"csrf": self.csrf if csrf is None else csrf, **fields}
        body = urlencode(data).encode()
        sent = {"Content-Type": "application/x-www-form-urlencoded", **headers}
        return self.request("POST", path, body, sent)

    def login(self, username: str, password: str) -> Reply:
        self.get("/console/login")
        reply = self.post("/console/login", {"username": username, "password": password})
        if reply.status == 303:
            self.get("/console/topics")  # the new session's CSRF token
        return reply
