"""`tidelog retention explain TOPIC [--partition N] [--format json]`.

Asks the broker (`explain_retention` API) what the next retention pass will do
with each segment and why, and prints one table per partition with the reason
under each segment, or the raw answer as JSON. It answers "why is my old data
still here?" without reading any file on the broker.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from broker.cli.common import (
    EXIT_ERROR,
    EXIT_OK,
    Subcommands,
    bootstrap_parent,
    cli_client,
    format_parent,
    print_out,
)
from protocol.retention_schema import explain_retention
from retention.explain import format_duration_ms


def register(subparsers: Subcommands) -> None:
    """Add the `retention` command group to the `tidelog` parser's subparsers."""
    retention = subparsers.add_parser(
        "retention",
        help="inspect retention: which segments go and why",
        description="Inspect retention: which segments the next pass deletes, and why.",
    )
    sub = retention.add_subparsers(dest="retention_command", metavar="COMMAND", required=True)
    explain = sub.add_parser(
        "explain",
        parents=[bootstrap_parent(), format_parent()],
        help="per segment: size, newest timestamp, age and the verdict with its reason",
        description=(
            "For each segment of TOPIC: base offset, size, largest timestamp and age, and "
            "whether the next retention pass deletes it (by time, size or log start offset) "
            "or keeps it (active segment, within retention, high watermark, blocked by an "
            "earlier segment, compact policy, timestamp in the future), with the reason."
        ),
        epilog="example: tidelog retention explain events --partition 0",
    )
    explain.add_argument("topic", metavar="TOPIC")
    explain.add_argument("--partition", "-p", type=int, metavar="N", help="only this partition")
    explain.set_defaults(func=run_explain)


def run_explain(args: argparse.Namespace) -> int:
    """Print the broker's explanation; exit 1 when a partition reports an error."""
    partitions = None if args.partition is None else [args.partition]
    with cli_client(args) as client:
        answer = client.call(explain_retention(args.topic, partitions))
    if args.format == "json":
        print_out(json.dumps({"topic": args.topic, "partitions": answer}, indent=2))
    else:
        print_out(render_text(args.topic, answer))
    return EXIT_ERROR if any(p.get("error") for p in answer) else EXIT_OK


def format_bytes(size: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def format_timestamp(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _limit(value: int | None, fmt: Callable[[int], str]) -> str:
    return "-1 (unlimited)" if value is None or value < 0 else f"{value} ({fmt(value)})"


def render_text(topic: str, partitions: Sequence[dict[str, Any]]) -> str:
    lines: list[str] = []
    for p in partitions:
        head = f"{topic}-{p['partition']}"
        if p.get("error"):
            lines.append(f"{head}: error {p['error']}: {p.get('message') or ''}".rstrip())
            lines.append("")
            continue
        segs = p["segments"]
        lines.append(
            f"{head}: log start {p['log_start_offset']}, high watermark "
            f"{p['high_watermark']}, end {p['log_end_offset']}, {len(segs)} segment(s), "
            f"{format_bytes(p['size_bytes'])}"
        )
        lines.append(
            f"  cleanup.policy={','.join(p['cleanup_policy'])}  "
            f"retention.ms={_limit(p['retention_ms'], format_duration_ms)}  "
            f"retention.bytes={_limit(p['retention_bytes'], format_bytes)}"
        )
        if p.get("segment_ms") is not None or p.get("segment_bytes") is not None:
            lines.append(
                f"  segment.ms={_limit(p.get('segment_ms'), format_duration_ms)}  "
                f"segment.bytes={_limit(p.get('segment_bytes'), format_bytes)}"
            )
        roll = " (the log rolls first)" if p["roll_first"] else ""
        lines.append(
            f"  next pass deletes {p['deletable_segments']} segment(s), "
            f"{format_bytes(p['deletable_bytes'])}{roll}"
        )
        lines.append("")
        tiered = bool(p.get("remote_storage_enable"))
        if tiered:
            lines.insert(
                len(lines) - 2,
                f"  remote.storage.enable=true  local log start {p['local_log_start_offset']}  "
                f"local.retention.ms={_limit(p['local_retention_ms'], format_duration_ms)}  "
                f"local.retention.bytes={_limit(p['local_retention_bytes'], format_bytes)}",
            )
        header: tuple[str, ...] = ("BASE_OFFSET", "SIZE", "LARGEST_TIMESTAMP", "AGE", "VERDICT")
        if tiered:
            header = (*header[:4], "TIER", "LOCAL", "REMOTE")
        rows: list[tuple[str, ...]] = [header]
        for s in segs:
            stamp = format_timestamp(s["timestamp_ms"])
            if s["timestamp_from_mtime"]:
                stamp += " (mtime)"
            active = " *" if s["is_active"] else ""
            cells = [
                f"{s['base_offset']}{active}",
                format_bytes(s["size_bytes"]),
                stamp,
                format_duration_ms(s["age_ms"]),
            ]
            if tiered:
                tier = s.get("tier", "local")
                cells += [tier, "-" if tier == "remote" else s["verdict"],
                          s.get("remote_verdict") or "-"]  # fmt: skip
            else:
                cells.append(s["verdict"])
            rows.append(tuple(cells))
        widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
        for index, row in enumerate(rows):
            padded = (cell.ljust(w) for cell, w in zip(row, widths, strict=True))
            lines.append(("  " + "  ".join(padded)).rstrip())
            if index > 0:
                seg = segs[index - 1]
                if seg.get("tier", "local") != "remote":
                    lines.append(f"      {'local: ' if tiered else ''}{seg['reason']}")
                if seg.get("remote_reason"):
                    lines.append(f"      remote: {seg['remote_reason']}")
        lines.append("  (* = active segment)")
        lines.append("")
    return "\n".join(lines).rstrip("\n")
