"""Topics: a searchable, paginated list, and the create form.

Only names are listed and filtered (the manager's name list, then the principal's
Describe right, then the search); `metadata` is asked for the one page shown, so
10,000 topics cost one sort of names per view, not 10,000 descriptions.
"""

from __future__ import annotations

from typing import Any

from broker.console.base import Call, back, int_arg
from broker.console.http import Response
from broker.console.pages.overview import visible_topics
from broker.console.render import View, esc, field, form, link, page, pager, size, table, url
from protocol.errors import InvalidRequest

PAGE_SIZES = (25, 50, 100, 200)
DEFAULT_PAGE_SIZE = 50


def parse_configs(text: str) -> dict[str, str]:
    """`key=value` pairs, one a line or comma-separated (the CLI's `--config` form)."""
    out: dict[str, str] = {}
    for item in text.replace(",", "\n").splitlines():
        item = item.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise InvalidRequest(f"configs: expected key=value, got {item!r}")
        out[key.strip()] = value.strip()
    return out


def _policy(call: Call, entry: dict[str, Any]) -> str:
    configs = entry.get("configs") or {}
    defaults = call.ctx.config.log_config
    policy = configs.get("cleanup.policy", ",".join(sorted(defaults.cleanup_policy)))
    retention = configs.get("retention.ms", defaults.retention_ms)
    return esc(f"{policy}, retention.ms={retention}")


def _row(call: Call, entry: dict[str, Any]) -> list[str]:
    name = entry["topic"]
    if entry.get("error"):
        return [esc(name), "-", "-", "-", "-", esc(entry["error"])]
    parts = entry.get("partitions") or []
    records = sum(p["high_watermark"] - p["log_start_offset"] for p in parts)
    return [
        link(url("topic", name), name),
        str(len(parts)),
        f"{records:,}",
        size(sum(p["size_bytes"] for p in parts)),
        str(sum(p["segments"] for p in parts)),
        _policy(call, entry),
    ]


def _create_form(view: View) -> str:
    inner = (
        f"{field('Name', 'topic', extra=' required maxlength=249')}"
        f"{field('Partitions', 'partitions', 1, kind='number', extra=' min=1 max=10000')}"
        f"{field('Configs (key=value, comma-separated)', 'configs', extra=' size=40')}"
    )
    return "<h2>Create a topic</h2>" + form(view, url("topics", "create"), inner, "Create topic")


async def topics(call: Call) -> Response:
    search = call.request.arg("q").strip()
    per_page = int_arg(call, "size", DEFAULT_PAGE_SIZE, PAGE_SIZES[0], PAGE_SIZES[-1])
    names = visible_topics(call)
    if search:
        needle = search.lower()
        names = [n for n in names if needle in n.lower()]
    pages = max(1, -(-len(names) // per_page))
    current = int_arg(call, "page", 1, 1, pages)
    shown = names[(current - 1) * per_page : current * per_page]
    answer = await call.actor.call("metadata", {"topics": shown}) if shown else {"topics": []}
    rows = [_row(call, entry) for entry in answer["topics"]]
    search_form = (
        '<form method="get" action="/console/topics" role="search">'
        f"{field('Search topics', 'q', search, kind='search')}"
        '<button type="submit">Search</button></form>'
    )
    matching = f" matching {esc(repr(search))}" if search else ""
    summary = f'<p id="topic-total">{len(names):,} topics{matching}</p>'
    body = (
        search_form
        + summary
        + table(("Topic", "Partitions", "Records", "Size", "Segments", "Policy"), rows)
        + pager(current, pages, lambda n: url("topics", q=search, page=n, size=per_page))
        + _create_form(call.view)
    )
    return page(call.view, "topics", "Topics", body)


async def create_topic(call: Call) -> Response:
    form_ = call.request.form
    name = form_.get("topic", "").strip()
    body = {
        "topic": name,
        "partitions": int_arg(call, "partitions", 1, 1, 1_000_000),
        "configs": parse_configs(form_.get("configs", "")),
        "validate_only": False,
    }
    await call.actor.change("create_topic", name, "create_topic", body)
    return back(url("topic", name), notice=f"created topic {name}")
