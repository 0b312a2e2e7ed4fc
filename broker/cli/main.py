"""The `tidelog` command line: one entry point, one subcommand per task.

    tidelog serve --data-dir ./data
    tidelog topics create events --partitions 3
    seq 10 | tidelog produce events
    tidelog consume events --offset start -n 10

Each subcommand lives in its own `broker/cli/*.py` module with a `register`
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

from broker.cli import (
    acls,
    consume,
    dumplog,
    groups,
    offsets,
    produce,
    retention,
    topics,
    transactions,
    users,
)
from broker.cli.common import EXIT_ERROR, CliError, HelpFormatter, OutputClosed, Subcommands
from broker.serve_flags import SERVE_DESCRIPTION, SERVE_EPILOG, add_serve_arguments
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
    topics.register(sub)
    produce.register(sub)
    consume.register(sub)
    offsets.register(sub)
    groups.register(sub)
    transactions.register(sub)
    dumplog.register(sub)
    retention.register(sub)
    users.register(sub)
    acls.register(sub)
    return parser


def _register_serve(sub: Subcommands) -> None:
    serve = sub.add_parser(
        "serve",
        help="run a broker",
        description=SERVE_DESCRIPTION,
        epilog=SERVE_EPILOG,
        formatter_class=HelpFormatter,
    )
    add_serve_arguments(serve)
    serve.set_defaults(func=_run_serve)


def _run_serve(args: argparse.Namespace) -> int:
    from broker.server import run_serve  # the daemon's imports only when serving

    return run_serve(args)


def run(args: argparse.Namespace) -> int:
    """Run a parsed command, mapping user errors to one line on stderr."""
    try:
        code: int = args.func(args)
        return code
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
