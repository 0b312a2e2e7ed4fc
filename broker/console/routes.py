"""URL -> page: one table, matched in order; captured segments are URL-decoded."""

from __future__ import annotations

import re
from urllib.parse import unquote

from broker.console.base import Page
from broker.console.pages import groups, overview, records, security, segments, topic, topics

_NAME = r"([^/]+)"
_PART = r"(\d+)"
ROUTES: tuple[tuple[str, str, Page], ...] = (
    ("GET", r"/", overview.overview),
    ("GET", r"/api/metrics", overview.metrics_feed),
    ("GET", r"/topics", topics.topics),
    ("POST", r"/topics/create", topics.create_topic),
    ("GET", rf"/topic/{_NAME}", topic.topic),
    ("POST", rf"/topic/{_NAME}/configs", topic.alter_configs),
    ("POST", rf"/topic/{_NAME}/delete-records", topic.delete_records),
    ("GET", rf"/topic/{_NAME}/delete", topic.confirm_delete),
    ("POST", rf"/topic/{_NAME}/delete", topic.delete_topic),
    ("GET", rf"/topic/{_NAME}/partition/{_PART}", segments.segments),
    ("GET", rf"/topic/{_NAME}/partition/{_PART}/records", records.records),
    ("POST", rf"/topic/{_NAME}/partition/{_PART}/produce", records.produce),
    ("GET", r"/groups", groups.groups),
    ("GET", rf"/group/{_NAME}", groups.group),
    ("POST", rf"/group/{_NAME}/reset", groups.reset),
    ("GET", rf"/api/group/{_NAME}/lag", groups.lag_feed),
    ("GET", r"/security", security.security),
    ("POST", r"/security/acls/add", security.add_acl),
    ("POST", r"/security/acls/delete", security.delete_acl),
    ("POST", r"/security/users/add", security.add_user),
    ("POST", r"/security/users/delete", security.delete_user),
)
_COMPILED = tuple((method, re.compile(pattern), page) for method, pattern, page in ROUTES)


def find_route(method: str, path: str) -> tuple[Page, tuple[str, ...]] | None:
    """The page for `path` (under /console) and its captured segments, or None."""
    inner = path.removeprefix("/console") or "/"
    wanted = "GET" if method == "HEAD" else method
    for route_method, pattern, page in _COMPILED:
        match = pattern.fullmatch(inner)
        if match is not None and route_method == wanted:
            return page, tuple(unquote(g) for g in match.groups())
    return None
