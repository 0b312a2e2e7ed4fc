"""Overview: version, uptime, listeners, disk, counts, and the live charts' JSON feed.

Counts cover the topics the principal may Describe (what `metadata` would show it).
The feed reads a handful of metric families from the broker's own registry, one
family at a time: never a whole scrape (whose per-partition collector walks every
log), so an open overview costs the broker a few dict reads every two seconds.
"""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator

from broker.console.base import Call
from broker.console.http import Response
from broker.console.render import esc, page, size, when
from broker.dispatch import SERVER_VERSION
from broker.security.acl import Operation, ResourceType
from protocol.errors import TidelogError

# Series the charts draw: (feed key, metric family, label to keep or None, kind, title, unit).
CHARTS = (
    ("records_in", "tidelog_records_in", "rate", "Produced records/s", "/s"),
    ("bytes_in", "tidelog_bytes_in", "rate", "Produced bytes/s", " B/s"),
    ("bytes_out", "tidelog_bytes_out", "rate", "Fetched bytes/s", " B/s"),
    ("connections", "tidelog_connections", "gauge", "Connections", ""),
)


def visible_topics(call: Call) -> list[str]:
    """The topic names the principal may Describe, sorted (names only: no log is read)."""
    may = call.actor.may
    return sorted(
        t for t in call.ctx.manager.topics() if may(Operation.DESCRIBE, ResourceType.TOPIC, t)
    )


def _counts(call: Call, topics: list[str]) -> tuple[int, int]:
    """Partitions and records (end - start offsets) of `topics`: attribute reads only."""
    manager = call.ctx.manager
    partitions = records = 0
    for topic in topics:
        try:
            for p in range(manager.partition_count(topic)):
                plog = manager.get_log(topic, p)
                partitions += 1
                records += plog.high_watermark - plog.log_start_offset
        except TidelogError:
            continue  # deleted while we counted
    return partitions, records


def _card(title: str, value: str) -> str:
    return f"<dt>{esc(title)}</dt><dd>{value}</dd>"


async def overview(call: Call) -> Response:
    ctx = call.ctx
    config = ctx.config
    topics = visible_topics(call)
    partitions, records = _counts(call, topics)
    disk = shutil.disk_usage(config.data_dir)
    uptime_s = int(time.time() - call.broker.started_ms / 1000)
    listeners = ", ".join(str(spec) for spec in config.listener_specs)
    if config.kafka_listen is not None:
        listeners += f", Kafka only {config.kafka_listen[0]}:{config.kafka_listen[1]}"
    cards = "".join(
        (
            _card("Version", esc(SERVER_VERSION)),
            _card(
                "Up since",
                f"{esc(when(call.broker.started_ms))} "
                f"({uptime_s // 3600} h {uptime_s // 60 % 60} min)",
            ),
            _card("Node id", esc(config.node_id)),
            _card("Listeners", esc(listeners)),
            _card("Data directory", f"<code>{esc(config.data_dir)}</code>"),
            _card("Free disk", f"{esc(size(disk.free))} of {esc(size(disk.total))}"),
            _card("Topics", f'<span id="topic-count">{len(topics)}</span>'),
            _card("Partitions", str(partitions)),
            _card("Records", f"{records:,}"),
        )
    )
    charts = "".join(
        f'<figure class="chart" data-series="{key}" data-kind="{kind}" data-unit="{esc(unit)}">'
        f'<figcaption>{esc(title)}: <span class="now">-</span></figcaption>'
        f'<svg role="img" aria-label="{esc(title)} over the last two minutes"></svg></figure>'
        for key, _, kind, title, unit in CHARTS
    )
    body = (
        f'<div class="cards"><dl class="card">{cards}</dl></div>'
        "<h2>Live</h2><p class=muted>From the broker's own metrics, every 2 s "
        "(needs JavaScript; the figures above do not).</p>"
        f'<div class="cards" data-source="/console/api/metrics">{charts}</div>'
    )
    return page(call.view, "overview", "Overview", body)


def _family_total(call: Call, name: str) -> float:
    total = 0.0
    collector = call.ctx.metrics.get(name)
    for family in collector.collect():
        for sample in family.samples:
            if not sample.name.endswith("_created"):
                total += sample.value
    return total


def _feed(call: Call) -> Iterator[tuple[str, float]]:
    for key, family, _, _, _ in CHARTS:
        yield key, _family_total(call, family)


async def metrics_feed(call: Call) -> Response:
    """`{"t": seconds, "values": {series: total}}`: the charts take rates client-side."""
    data = {"t": time.time(), "values": dict(_feed(call))}
    return Response(json.dumps(data).encode(), content_type="application/json")
