"""The console's HTTP/1.0 requests and responses: parsed from the metrics listener's bytes.

The metrics listener (broker/metrics.py) reads a request head and hands it here when
the path is the console's. A form body is read up to `BODY_MAX_BYTES` (a console form
is a few fields; a test record's value is the largest); one request per connection,
as for /metrics.
"""

from __future__ import annotations

import email.utils
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlsplit

import trio

# The largest form body the console accepts (a produced test record included).
BODY_MAX_BYTES = 256 * 1024


class BadRequest(Exception):
    """The request cannot be read: answered 400 (or 413 for a body too large)."""

    def __init__(self, message: str, status: str = "400 Bad Request") -> None:
        super().__init__(message)
        self.status = status


@dataclass(frozen=True, slots=True)
class Request:
    """One parsed request: method, path segments, query and form fields, headers."""

    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]
    form: dict[str, str] = field(default_factory=dict)
    peer: str = "-"

    def arg(self, name: str, default: str = "") -> str:
        """A query field (GET) or a form field (POST)."""
        return self.form.get(name, self.query.get(name, default))

    def cookie(self, name: str) -> str | None:
        for part in self.headers.get("cookie", "").split(";"):
            key, _, value = part.strip().partition("=")
            if key == name:
                return value
        return None


@dataclass(slots=True)
class Response:
    """What a page answers; `render` adds the security headers every answer carries."""

    body: bytes
    status: str = "200 OK"
    content_type: str = "text/html; charset=utf-8"
    headers: list[tuple[str, str]] = field(default_factory=list)

    def render(self, *, head_only: bool = False) -> bytes:
        lines = [
            f"HTTP/1.0 {self.status}",
            f"Content-Type: {self.content_type}",
            f"Content-Length: {len(self.body)}",
            f"Date: {email.utils.formatdate(usegmt=True)}",
            "Connection: close",
            "Cache-Control: no-store",
            "X-Content-Type-Options: nosniff",
            "X-Frame-Options: DENY",
            "Referrer-Policy: same-origin",
            # No inline script or style anywhere: what an injected tag carries never runs.
            "Content-Security-Policy: default-src 'none'; script-src 'self'; "
            "style-src 'self'; img-src 'self' data:; connect-src 'self'; "
            "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
            *(f"{name}: {value}" for name, value in self.headers),
        ]
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head if head_only else head + self.body


def redirect(location: str, *, status: str = "303 See Other") -> Response:
    return Response(b"", status, "text/plain; charset=utf-8", [("Location", location)])


def _single(values: dict[str, list[str]]) -> dict[str, str]:
    return {key: items[-1] for key, items in values.items()}


def parse_head(received: bytes, peer: str) -> tuple[Request, bytes, int]:
    """The request of a head (and the body bytes read with it, and Content-Length)."""
    head, sep, rest = received.partition(b"\r\n\r\n")
    if not sep:
        head, _, rest = received.partition(b"\n\n")
    lines = head.decode("latin-1").splitlines()
    parts = lines[0].split() if lines else []
    if len(parts) < 2:
        raise BadRequest("malformed request line")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if colon:
            headers[name.strip().lower()] = value.strip()
    target = urlsplit(parts[1])
    query = _single(parse_qs(target.query, keep_blank_values=True))
    try:
        length = int(headers.get("content-length", "0") or 0)
    except ValueError as exc:
        raise BadRequest("Content-Length is not a number") from exc
    if length < 0:
        raise BadRequest("negative Content-Length")
    if length > BODY_MAX_BYTES:
        raise BadRequest("request body too large", "413 Content Too Large")
    request = Request(parts[0].upper(), target.path, query, headers, peer=peer)
    return request, rest, length


async def read_form(stream: trio.abc.Stream, request: Request, rest: bytes, length: int) -> Request:
    """`request` with its urlencoded form body read (up to `length` bytes)."""
    body = bytearray(rest[:length])
    while len(body) < length:
        chunk = await stream.receive_some(min(65536, length - len(body)))
        if not chunk:
            raise BadRequest("request body cut short")
        body += chunk
    if not body:
        return request
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/x-www-form-urlencoded":
        raise BadRequest("forms must be application/x-www-form-urlencoded")
    form = _single(parse_qs(body.decode("utf-8", "replace"), keep_blank_values=True))
    return Request(request.method, request.path, request.query, request.headers, form, request.peer)
