"""The `tidelog` command line: one entry point, one subcommand per task.

    tidelog serve --data-dir ./data
    tidelog topics create events --partitions 3
    seq 10 | tidelog produce events
    tidelog consume events --offset start -n 10

Each subcommand lives in its own `broker/cli_*.py` module with a `register`
function; this module builds the parser and turns every user error into one
line on stderr (`error: CODE: message (hint)`, exit 1) instead of a traceback.
Usage errors exit 2 (argparse). Only `serve` imports the daemon, so the client
commands start fast.
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from broker import (
    cli_consume,
    cli_dumplog,
    cli_offsets,
    cli_produce,
    cli_retention,
    cli_topics,
)
from broker.cli_common import EXIT_ERROR, CliError, HelpFormatter, OutputClosed
from protocol.errors import TidelogError

# Exit status after Ctrl-C, as shells report a SIGINT death.
EXIT_INTERRUPTED = 130

DESCRIPTION = """\
Tidelog: a log-storage broker with Kafka's storage semantics.

Client commands talk to a broker at --bootstrap-server (default 127.0.0.1:9092,
or $TIDELOG_BOOTSTRAP_SERVER). Run `tidelog COMMAND --help` for details."""

EPILOG = """\
examples:
  tidelog serve --data-dir ./data
  tidelog topics create events --partitions 3 --config retention.ms=86400000
  printf 'k1:hello\\nk2:world\\n' | tidelog produce events --key-separator :
  tidelog consume events --offset start -n 10 --format json
  tidelog offsets events --time 2024-05-01T00:00:00Z"""


def _version() -> str:
    try:
        return version("tidelog")
    except PackageNotFoundError:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tidelog",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=HelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"tidelog {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    _register_serve(sub)
    cli_topics.register(sub)
    cli_produce.register(sub)
    cli_consume.register(sub)
    cli_offsets.register(sub)
    cli_dumplog.register(sub)
    cli_retention.register(sub)
    return parser


def _register_serve(sub: Any) -> None:
    serve = sub.add_parser(
        "serve",
        help="run a broker",
        description=(
            "Run a broker in the foreground. Settings use Kafka's server.properties names; "
            "--set wins over --config. Stops cleanly on SIGTERM or Ctrl-C."
        ),
        epilog="example: tidelog serve --data-dir ./data --set log.retention.hours=24",
        formatter_class=HelpFormatter,
    )
    serve.add_argument("--data-dir", metavar="DIR", help="data directory (or log.dirs in --config)")
    serve.add_argument(
        "--listen",
        default="127.0.0.1:9092",
        metavar="HOST:PORT",
        help="client listener (default 127.0.0.1:9092; port 0 picks a free one)",
    )
    serve.add_argument(
        "--metrics-listen",
        default="127.0.0.1:9644",
        metavar="HOST:PORT",
        help="/metrics and /healthz listener (default 127.0.0.1:9644)",
    )
    serve.add_argument("--config", metavar="FILE", help="a server.properties-format file")
    serve.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override one setting (repeatable; wins over --config)",
    )
    serve.add_argument(
        "--log-format",
        choices=("auto", "json", "console"),
        default="auto",
        help="log lines on stdout: JSON, or readable when stdout is a terminal (auto)",
    )
    serve.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    serve.set_defaults(func=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from broker.server import run_serve  # the daemon's imports only when serving

    return run_serve(args)


def run(args: argparse.Namespace) -> int:
    """Run a parsed command, mapping user errors to one line on stderr."""
    try:
        return args.func(args)
    except OutputClosed:
        # The reader went away (`tidelog consume ... | head`): not an error.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0
    except CliError as exc:
        print(exc.line(), file=sys.stderr)
    except TidelogError as exc:
        print(CliError.from_tidelog(exc).line(), file=sys.stderr)
    except (ConnectionError, TimeoutError, socket.gaierror) as exc:
        address = getattr(args, "bootstrap_server", "the broker")
        print(
            CliError("CONNECTION_ERROR", f"cannot talk to {address}: {exc}").line(),
            file=sys.stderr,
        )
    except ValueError as exc:  # e.g. a malformed --bootstrap-server
        print(CliError("BAD_INPUT", str(exc)).line(), file=sys.stderr)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    return EXIT_ERROR


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run(args)
