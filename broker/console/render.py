"""HTML building blocks: every value escaped here, the layout from templates/layout.html.

Pages are plain HTML (readable without JavaScript); static/console.js only draws the
live charts. Nothing secret is ever rendered: no password, key, token or credential
field reaches a page, and the CSRF token is per session.
"""

from __future__ import annotations

import html
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from importlib import resources
from string import Template
from urllib.parse import quote, urlencode

from broker.console.http import Response

ROOT = "/console"
NAV = (
    ("overview", "Overview", f"{ROOT}/"),
    ("topics", "Topics", f"{ROOT}/topics"),
    ("groups", "Consumer groups", f"{ROOT}/groups"),
    ("security", "Security", f"{ROOT}/security"),
)


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def url(*segments: object, **query: object) -> str:
    """A console URL: each segment quoted (topic names may hold any legal character)."""
    path = ROOT + "".join("/" + quote(str(s), safe="") for s in segments)
    params = {k: str(v) for k, v in query.items() if v is not None and v != ""}
    return path + ("?" + urlencode(params) if params else "")


def link(href: str, text: object) -> str:
    return f'<a href="{esc(href)}">{esc(text)}</a>'


@dataclass(frozen=True, slots=True)
class View:
    """What the layout needs from the request: who looks, the session's CSRF token."""

    principal: str | None
    csrf: str
    login_required: bool
    notice: str = ""
    problem: str = ""


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], caption: str = "") -> str:
    """A table of cells that are already HTML (escape values with `esc`)."""
    head = "".join(f'<th scope="col">{esc(h)}</th>' for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows)
    cap = f"<caption>{esc(caption)}</caption>" if caption else ""
    if not body:
        body = f'<tr><td colspan="{len(headers)}">nothing to show</td></tr>'
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def form(view: View, action: str, inner: str, submit: str, *, danger: bool = False) -> str:
    """A POST form with the session's CSRF token."""
    cls = ' class="danger"' if danger else ""
    return (
        f'<form method="post" action="{esc(action)}">'
        f'<input type="hidden" name="csrf" value="{esc(view.csrf)}">{inner}'
        f'<button type="submit"{cls}>{esc(submit)}</button></form>'
    )


def field(
    label: str,
    name: str,
    value: object = "",
    *,
    kind: str = "text",
    extra: str = "",
    form: str = "f",
) -> str:
    """A labelled input (the label's `for` names it: screen readers and clicks find it);
    `form` keeps ids unique when two forms of a page have a field of the same name."""
    ident = f"{form}-{name}"
    return (
        f'<div class="f"><label for="{ident}">{esc(label)}</label>'
        f'<input id="{ident}" name="{esc(name)}" type="{kind}" value="{esc(value)}"{extra}></div>'
    )


def select(label: str, name: str, options: Sequence[tuple[str, str]], chosen: str) -> str:
    ident = f"f-{name}"
    opts = "".join(
        f'<option value="{esc(v)}"{" selected" if v == chosen else ""}>{esc(t)}</option>'
        for v, t in options
    )
    return (
        f'<div class="f"><label for="{ident}">{esc(label)}</label>'
        f'<select id="{ident}" name="{esc(name)}">{opts}</select></div>'
    )


def pager(page: int, pages: int, make_url: object) -> str:
    """Previous/next links and where we are (`make_url(page)` builds each link)."""
    assert callable(make_url)
    parts = [f"page {page} of {max(pages, 1)}"]
    if page > 1:
        parts.insert(0, f'<a rel="prev" href="{esc(make_url(page - 1))}">previous</a>')
    if page < pages:
        parts.append(f'<a rel="next" href="{esc(make_url(page + 1))}">next</a>')
    return f'<nav class="pager" aria-label="pages">{" · ".join(parts)}</nav>'


def size(n: int | None) -> str:
    if n is None or n < 0:
        return "-"
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return str(n)


def when(ms: int | None) -> str:
    """A timestamp in ms as UTC ISO 8601 (with milliseconds), '-' for none."""
    if ms is None or ms < 0:
        return "-"
    seconds, millis = divmod(ms, 1000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(seconds)) + f".{millis:03d}Z"


@cache
def _template(name: str) -> Template:
    text = resources.files("broker.console").joinpath("templates", name).read_text("utf-8")
    return Template(text)


def page(view: View, active: str, title: str, body: str, *, status: str = "200 OK") -> Response:
    """A whole page in the layout (navigation, who is logged in, notices)."""
    nav = "".join(
        f'<li><a href="{href}"{" aria-current=page" if key == active else ""}>{esc(text)}</a></li>'
        for key, text, href in NAV
    )
    who = ""
    if view.principal is not None:
        logout = form(view, f"{ROOT}/logout", "", "Log out") if view.login_required else ""
        who = f'<span class="who">{esc(view.principal)}</span>{logout}'
    notices = ""
    if view.notice:
        notices += f'<p class="notice" role="status">{esc(view.notice)}</p>'
    if view.problem:
        notices += f'<p class="problem" role="alert">{esc(view.problem)}</p>'
    text = _template("layout.html").substitute(
        title=esc(title),
        nav=nav if view.principal is not None else "",
        who=who,
        notices=notices,
        body=body,
        root=ROOT,
    )
    return Response(text.encode("utf-8"), status)
