"""The `serve` command's flags, declared once: `tidelog serve` (broker/cli/main.py) and
`python -m broker.server` both add them here. Importing this loads no daemon code."""

from __future__ import annotations

import argparse

DEFAULT_LISTEN = "127.0.0.1:9092"
DEFAULT_METRICS_LISTEN = "127.0.0.1:9644"
SERVE_DESCRIPTION = (
    "Run a broker in the foreground. Settings use Kafka's server.properties names; "
    "--set wins over --config. Stops cleanly on SIGTERM or Ctrl-C."
)
SERVE_EPILOG = "example: tidelog serve --data-dir ./data --set log.retention.hours=24"


def add_serve_arguments(parser: argparse.ArgumentParser) -> None:
    """Add every `serve` flag to `parser`."""
    parser.add_argument(
        "--data-dir", metavar="DIR", help="data directory (or log.dirs in --config)"
    )
    parser.add_argument(
        "--listen",
        metavar="HOST:PORT",
        help=f"client listener (default: the first of `listeners`, else {DEFAULT_LISTEN}; "
        "port 0 picks a free one)",
    )
    parser.add_argument(
        "--kafka-listen",
        default=None,
        metavar="HOST:PORT",
        help="a second listener for Kafka clients only (optional: --listen serves Kafka "
        "clients too)",
    )
    parser.add_argument(
        "--metrics-listen",
        default=DEFAULT_METRICS_LISTEN,
        metavar="HOST:PORT",
        help=f"/metrics and /healthz listener (default {DEFAULT_METRICS_LISTEN})",
    )
    parser.add_argument("--config", metavar="FILE", help="a server.properties-format file")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable; wins over --config)",
    )
    parser.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="log lines on stdout: JSON, or readable when stdout is a terminal (auto)",
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default="info"
    )
