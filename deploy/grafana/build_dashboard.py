"""Writes deploy/grafana/tidelog.json, the Grafana dashboard, from the panel table below.

The dashboard is generated so that its PromQL lives in one readable table;
tests/integration/test_prometheus_deploy.py checks that the JSON is up to date
and that every metric it queries exists in a real broker's scrape. Run
`python deploy/grafana/build_dashboard.py` after editing the table.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).with_name("tidelog.json")
DASHBOARD_UID = "tidelog-overview"
# Grafana 10/11 dashboard JSON schema version.
SCHEMA_VERSION = 39
PANEL_WIDTH = 12
PANEL_HEIGHT = 8
# Selector every query carries: the dashboard variables.
SEL = 'instance=~"$instance"'
TSEL = 'instance=~"$instance", topic=~"$topic"'
RATE = "[$__rate_interval]"


def _q(expr: str, legend: str) -> dict[str, str]:
    return {"expr": expr, "legend": legend}


def _quantiles(metric: str, by: str, extra: str = "") -> list[dict[str, str]]:
    """p50/p99/p999 of a histogram, grouped by `by` (may be empty)."""
    group = f"le, {by}" if by else "le"
    label = f"{{{{{by}}}}} " if by else ""
    sel = SEL + (f", {extra}" if extra else "")
    return [
        _q(
            f"histogram_quantile({q}, sum by ({group}) (rate({metric}_bucket{{{sel}}}{RATE})))",
            f"{label}p{name}",
        )
        for q, name in ((0.5, "50"), (0.99, "99"), (0.999, "99.9"))
    ]


# (row title, [(panel title, unit, description, [queries])])
ROWS: list[tuple[str, list[tuple[str, str, str, list[dict[str, str]]]]]] = [
    (
        "Throughput",
        [
            (
                "Records in / s",
                "short",
                "Records appended by produce, per topic.",
                [
                    _q(
                        f"sum by (topic) (rate(tidelog_records_in_total{{{TSEL}}}{RATE}))",
                        "{{topic}}",
                    )
                ],
            ),
            (
                "Bytes in and out / s",
                "Bps",
                "Batch bytes appended by produce and returned by fetch.",
                [
                    _q(
                        f"sum by (topic) (rate(tidelog_bytes_in_total{{{TSEL}}}{RATE}))",
                        "in {{topic}}",
                    ),
                    _q(
                        f"sum by (topic) (rate(tidelog_bytes_out_total{{{TSEL}}}{RATE}))",
                        "out {{topic}}",
                    ),
                ],
            ),
            (
                "Requests / s by API",
                "reqps",
                "Requests answered, by API.",
                [_q(f"sum by (api) (rate(tidelog_requests_total{{{SEL}}}{RATE}))", "{{api}}")],
            ),
            (
                "Connections",
                "short",
                "Open client connections and requests read but not yet answered.",
                [
                    _q(f"sum(tidelog_connections{{{SEL}}})", "open"),
                    _q(f"sum(tidelog_inflight_requests{{{SEL}}})", "in flight"),
                ],
            ),
        ],
    ),
    (
        "Latency",
        [
            (
                "Request latency by API",
                "s",
                "From a request's arrival to its response being written.",
                _quantiles("tidelog_request_duration_seconds", "api"),
            ),
            (
                "Produce latency",
                "s",
                "Produce only: acks=-1 produces include the group-commit fsync.",
                _quantiles("tidelog_request_duration_seconds", "", 'api="produce"'),
            ),
            (
                "fsync latency",
                "s",
                "One fsync of a partition (group commit for acks=-1).",
                _quantiles("tidelog_log_flush_duration_seconds", ""),
            ),
            (
                "Group commit size",
                "short",
                "Produce requests acknowledged by one fsync, on average.",
                [
                    _q(
                        f"sum(rate(tidelog_group_commit_waiters_sum{{{SEL}}}{RATE})) / "
                        f"sum(rate(tidelog_group_commit_waiters_count{{{SEL}}}{RATE}))",
                        "requests per fsync",
                    )
                ],
            ),
        ],
    ),
    (
        "Errors",
        [
            (
                "Error responses / s",
                "reqps",
                "Requests answered with an error code, by API and code.",
                [
                    _q(
                        "sum by (api, error) "
                        f'(rate(tidelog_requests_total{{{SEL}, error!="none"}}{RATE}))',
                        "{{api}} {{error}}",
                    )
                ],
            ),
            (
                "Connections closed / s by reason",
                "short",
                "eof is normal; bad_frame, truncated_frame and limit point at clients.",
                [
                    _q(
                        f"sum by (reason) (rate(tidelog_connections_closed_total{{{SEL}}}{RATE}))",
                        "{{reason}}",
                    )
                ],
            ),
        ],
    ),
    (
        "Logs",
        [
            (
                "Log size by topic",
                "bytes",
                "Bytes in the topic's segments (all partitions).",
                [_q(f"sum by (topic) (tidelog_log_size_bytes{{{TSEL}}})", "{{topic}}")],
            ),
            (
                "Segments by topic",
                "short",
                "Segments in the topic's partitions.",
                [_q(f"sum by (topic) (tidelog_log_segments{{{TSEL}}})", "{{topic}}")],
            ),
            (
                "Log end offset by partition",
                "short",
                "Offset the next appended record will get.",
                [_q(f"tidelog_log_end_offset{{{TSEL}}}", "{{topic}}-{{partition}}")],
            ),
            (
                "Log start offset by partition",
                "short",
                "First offset still in the log (rises with retention and delete_records).",
                [_q(f"tidelog_log_start_offset{{{TSEL}}}", "{{topic}}-{{partition}}")],
            ),
            (
                "Offline partitions",
                "short",
                "Partitions refusing writes after a write or fsync error (until restart).",
                [_q(f"sum(tidelog_log_offline{{{SEL}}})", "offline")],
            ),
            (
                "Records out / s",
                "short",
                "Records in the batches returned by fetch, per topic.",
                [
                    _q(
                        f"sum by (topic) (rate(tidelog_records_out_total{{{TSEL}}}{RATE}))",
                        "{{topic}}",
                    )
                ],
            ),
        ],
    ),
    (
        "Retention",
        [
            (
                "Segments deleted / s by reason",
                "short",
                "Retention deletions: time, size or log start offset (docs/retention.md).",
                [
                    _q(
                        "sum by (reason) "
                        f"(rate(tidelog_retention_deleted_segments_total{{{TSEL}}}{RATE}))",
                        "{{reason}}",
                    )
                ],
            ),
            (
                "Bytes deleted / s by topic",
                "Bps",
                "Bytes of the segments retention deleted.",
                [
                    _q(
                        "sum by (topic) "
                        f"(rate(tidelog_retention_deleted_bytes_total{{{TSEL}}}{RATE}))",
                        "{{topic}}",
                    )
                ],
            ),
        ],
    ),
    (
        # Issue 39 (docs/tiered-storage.md). Upload side: broker/tiered/start.py; read
        # side: broker/component_metrics.py and broker/metrics.py.
        "Tiered storage",
        [
            (
                "Segments pending upload",
                "short",
                "Rolled segments of tiered topics not yet in the object store; a backlog that "
                "does not shrink fires TidelogTieredUploadStuck.",
                [
                    _q(f"sum(tidelog_remote_upload_pending_segments{{{SEL}}})", "segments"),
                    _q(f"sum(tidelog_remote_partitions_failing{{{SEL}}})", "partitions failing"),
                ],
            ),
            (
                "Upload lag",
                "s",
                "Age of the oldest rolled segment not yet uploaded (0: none waits); rising "
                "for 15 minutes fires TidelogTieredUploadLagRising.",
                [
                    _q(f"max(tidelog_remote_upload_lag_seconds{{{SEL}}})", "lag"),
                ],
            ),
            (
                "Uploaded bytes / s and remote errors",
                "Bps",
                "Segment bytes copied to the store per second, and failed uploads, remote "
                "deletions and sweeps per second by error kind.",
                [
                    _q(
                        f"sum(rate(tidelog_remote_uploaded_bytes_total{{{SEL}}}{RATE}))", "uploaded"
                    ),
                    _q(
                        f"sum by (kind) (rate(tidelog_remote_errors_total{{{SEL}}}{RATE}))",
                        "errors {{kind}}",
                    ),
                ],
            ),
            (
                "Remote tier size",
                "bytes",
                "Bytes of readable segments in the store, and of rolled segments waiting.",
                [
                    _q(f"sum(tidelog_remote_bytes{{{SEL}}})", "in the store"),
                    _q(f"sum(tidelog_remote_upload_pending_bytes{{{SEL}}})", "pending upload"),
                ],
            ),
            (
                "Remote read latency",
                "s",
                "Reads below the local log start: chunk cache or object store GETs, "
                "timeouts included.",
                _quantiles("tidelog_remote_read_duration_seconds", ""),
            ),
            (
                "Remote reads: GETs and errors / s",
                "reqps",
                "GETs the read path sent to the store, and reads that failed "
                "(REMOTE_STORAGE_ERROR to the client).",
                [
                    _q(f"sum(rate(tidelog_remote_gets_total{{{SEL}}}{RATE}))", "GETs"),
                    _q(f"sum(rate(tidelog_remote_read_errors_total{{{SEL}}}{RATE}))", "errors"),
                ],
            ),
            (
                "Chunk cache hit ratio",
                "percentunit",
                "Share of remote chunk reads served from the on-disk cache; a low ratio "
                "with a full cache means the working set is larger than the cache.",
                [
                    _q(
                        f"sum(rate(tidelog_remote_cache_hits_total{{{SEL}}}{RATE})) / "
                        f"(sum(rate(tidelog_remote_cache_hits_total{{{SEL}}}{RATE})) + "
                        f"sum(rate(tidelog_remote_cache_misses_total{{{SEL}}}{RATE})))",
                        "chunks",
                    ),
                    _q(
                        f"sum(rate(tidelog_remote_index_cache_hits_total{{{SEL}}}{RATE})) / "
                        f"(sum(rate(tidelog_remote_index_cache_hits_total{{{SEL}}}{RATE})) + "
                        f"sum(rate(tidelog_remote_index_cache_misses_total{{{SEL}}}{RATE})))",
                        "indexes",
                    ),
                ],
            ),
            (
                "Chunk cache size",
                "bytes",
                "Bytes of remote chunks on disk against the cap, and evictions per minute.",
                [
                    _q(f"sum(tidelog_remote_cache_size_bytes{{{SEL}}})", "cached"),
                    _q(f"sum(tidelog_remote_cache_capacity_bytes{{{SEL}}})", "capacity"),
                    _q(f"sum(tidelog_remote_index_cache_size_bytes{{{SEL}}})", "indexes"),
                ],
            ),
        ],
    ),
    (
        "Cleaner",
        [
            (
                "Cleaner bytes / s",
                "Bps",
                "Bytes the log cleaner read and wrote.",
                [
                    _q(f"sum(rate(tidelog_cleaner_read_bytes_total{{{SEL}}}{RATE}))", "read"),
                    _q(
                        f"sum(rate(tidelog_cleaner_written_bytes_total{{{SEL}}}{RATE}))",
                        "written",
                    ),
                ],
            ),
            (
                "Dirty ratio by partition",
                "percentunit",
                "Cleanable / (clean + cleanable) bytes; cleaned above min.cleanable.dirty.ratio.",
                [_q(f"tidelog_cleaner_dirty_ratio{{{TSEL}}}", "{{topic}}-{{partition}}")],
            ),
            (
                "Cleaner health",
                "short",
                "Uncleanable partitions and the longest compaction delay (s).",
                [
                    _q(f"sum(tidelog_cleaner_uncleanable_partitions{{{SEL}}})", "uncleanable"),
                    _q(
                        f"max(tidelog_cleaner_max_compaction_delay_seconds{{{SEL}}})",
                        "max compaction delay (s)",
                    ),
                ],
            ),
        ],
    ),
    (
        "Consumer groups",
        [
            (
                "Consumer lag by group",
                "short",
                "Records between each group's committed offsets and the high watermarks.",
                [
                    _q(
                        f"sum by (group) (tidelog_consumer_group_lag{{{TSEL}}})",
                        "{{group}}",
                    )
                ],
            ),
            (
                "Members and rebalances",
                "short",
                "Members per group, and rebalances started per minute.",
                [
                    _q(f"sum by (group) (tidelog_consumer_group_members{{{SEL}}})", "{{group}}"),
                    _q(
                        f"sum by (group) (rate(tidelog_consumer_group_rebalances_total{{{SEL}}}"
                        f"{RATE})) * 60",
                        "{{group}} rebalances/min",
                    ),
                ],
            ),
        ],
    ),
    (
        "Runtime",
        [
            (
                "Event-loop lateness",
                "s",
                "How late a 100 ms heartbeat wakes: anything blocking the loop shows here.",
                _quantiles("tidelog_event_loop_lateness_seconds", ""),
            ),
            (
                "Long polls and readiness",
                "short",
                "Fetches waiting for data, and 1 when /readyz answers 200.",
                [
                    _q(f"sum(tidelog_longpoll_waiters{{{SEL}}})", "long-poll waiters"),
                    _q(f"min(tidelog_ready{{{SEL}}})", "ready"),
                ],
            ),
        ],
    ),
]


def _panel(
    pid: int, x: int, y: int, title: str, unit: str, desc: str, queries: list[dict[str, str]]
) -> dict[str, Any]:
    return {
        "id": pid,
        "type": "timeseries",
        "title": title,
        "description": desc,
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": PANEL_HEIGHT, "w": PANEL_WIDTH, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom"}},
        "targets": [
            {
                "refId": chr(ord("A") + i),
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "expr": q["expr"],
                "legendFormat": q["legend"],
            }
            for i, q in enumerate(queries)
        ],
    }


def _variable(name: str, query: str) -> dict[str, Any]:
    return {
        "name": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"selected": True, "text": "All", "value": "$__all"},
        "refresh": 2,
        "sort": 1,
    }


def build() -> dict[str, Any]:
    """The dashboard as a dict."""
    panels: list[dict[str, Any]] = []
    pid, y = 1, 0
    for row_title, row_panels in ROWS:
        panels.append(
            {
                "id": pid,
                "type": "row",
                "title": row_title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
                "panels": [],
            }
        )
        pid, y = pid + 1, y + 1
        for i, (title, unit, desc, queries) in enumerate(row_panels):
            x = (i % 2) * PANEL_WIDTH
            panels.append(_panel(pid, x, y, title, unit, desc, queries))
            pid += 1
            if i % 2 == 1 or i == len(row_panels) - 1:
                y += PANEL_HEIGHT
    return {
        "uid": DASHBOARD_UID,
        "title": "Tidelog",
        "description": (
            "Tidelog broker: throughput, latency, errors, logs, retention, tiered storage, cleaner."
        ),
        "tags": ["tidelog"],
        "timezone": "utc",
        "schemaVersion": SCHEMA_VERSION,
        "version": 1,
        "editable": True,
        "refresh": "10s",
        "time": {"from": "now-1h", "to": "now"},
        "templating": {
            "list": [
                {
                    "name": "datasource",
                    "type": "datasource",
                    "query": "prometheus",
                    "current": {"text": "Prometheus", "value": "prometheus"},
                },
                _variable("instance", "label_values(tidelog_build_info, instance)"),
                _variable("topic", "label_values(tidelog_log_end_offset, topic)"),
            ]
        },
        "annotations": {"list": []},
        "panels": panels,
    }


def render() -> str:
    return json.dumps(build(), indent=2) + "\n"


if __name__ == "__main__":
    OUTPUT.write_text(render(), encoding="utf-8")
    print(f"wrote {OUTPUT}")
