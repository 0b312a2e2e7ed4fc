"""What every `tidelog` subcommand shares: the broker address, error lines, time parsing.

User errors end as one line on stderr, `error: CODE: message (hint)`, and exit
status 1 (usage errors: 2, from argparse). `CliError` carries such an error
from deep inside a command up to `broker.cli.main`, which prints it.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import textwrap
from datetime import UTC, datetime
from typing import NoReturn, TypeAlias

from broker.config import parse_properties
from protocol.errors import TidelogError
from tidelog.client import Client
from tidelog.security import PLAINTEXT, Security, security_from_properties

DEFAULT_BOOTSTRAP_SERVER = "127.0.0.1:9092"
BOOTSTRAP_ENV = "TIDELOG_BOOTSTRAP_SERVER"
COMMAND_CONFIG_ENV = "TIDELOG_COMMAND_CONFIG"
CLI_CLIENT_ID = "tidelog-cli"

# What `add_subparsers()` returns, where each command module registers its commands
# (a string: argparse's class is generic only in its type stubs).
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2

# One hint per wire code: what the user can do about it.
HINTS: dict[str, str] = {
    "UNKNOWN_TOPIC_OR_PARTITION": "check the name with `tidelog topics list`",
    "TOPIC_ALREADY_EXISTS": "pick another name, or pass --if-not-exists",
    "INVALID_TOPIC_EXCEPTION": "choose a legal topic name",
    "INVALID_PARTITIONS": "the partition count must be at least 1",
    "INVALID_CONFIG": "see `tidelog topics describe TOPIC` for the valid names",
    "OFFSET_OUT_OF_RANGE": "see `tidelog offsets TOPIC` for the valid range",
    "MESSAGE_TOO_LARGE": "raise max.message.bytes on the topic or send smaller records",
    "INVALID_RECORD": "compacted topics need a key on every record",
    "CORRUPT_MESSAGE": "the data failed its CRC or layout check",
    "REQUEST_TIMED_OUT": "the broker is slow or unreachable; try again or raise the timeout",
    "STORAGE_ERROR": "the broker's disk failed; check its log",
    "UNSUPPORTED_VERSION": "the broker is older than this client",
    "INVALID_REQUEST": "this client and the broker disagree about the protocol",
    "POLICY_VIOLATION": "the broker's policy refuses this change",
    "CONNECTION_ERROR": "is `tidelog serve` running there? see --bootstrap-server",
    "BAD_INPUT": "fix the input and try again",
    "NOT_FOUND": "check the path",
}


class CliError(Exception):
    """A user error to print as one line: `error: CODE: message (hint)`."""

    def __init__(self, code: str, message: str, hint: str | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.hint = hint if hint is not None else HINTS.get(code)

    @classmethod
    def from_tidelog(cls, exc: TidelogError) -> CliError:
        return cls(exc.code, exc.message or exc.code)

    def line(self) -> str:
        hint = f" ({self.hint})" if self.hint else ""
        return f"error: {self.code}: {self.message}{hint}"


class OutputClosed(Exception):
    """stdout's reader went away (e.g. `| head`): stop quietly."""


def write_out(data: bytes) -> None:
    """Write to stdout as bytes, turning a closed pipe into OutputClosed."""
    try:
        sys.stdout.flush()  # keep order with print_out's text lines
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    except BrokenPipeError as exc:
        raise OutputClosed from exc


def print_out(text: str) -> None:
    """One line of text to stdout."""
    try:
        print(text, flush=False)
    except BrokenPipeError as exc:
        raise OutputClosed from exc


def fail(code: str, message: str, hint: str | None = None) -> NoReturn:
    raise CliError(code, message, hint)


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Keeps indented lines (examples) as written and wraps long prose lines."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        lines: list[str] = []
        for line in text.splitlines():
            if len(line) > width and not line.startswith(" "):
                lines += textwrap.wrap(line, width, initial_indent=indent, subsequent_indent=indent)
            else:
                lines.append(indent + line)
        return "\n".join(lines)


def bootstrap_parent() -> argparse.ArgumentParser:
    """A parent parser adding `--bootstrap-server` to a subcommand."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--bootstrap-server",
        "-b",
        default=os.environ.get(BOOTSTRAP_ENV, DEFAULT_BOOTSTRAP_SERVER),
        metavar="HOST:PORT",
        help=f"broker address (default: ${BOOTSTRAP_ENV} or {DEFAULT_BOOTSTRAP_SERVER})",
    )
    parent.add_argument(
        "--command-config",
        default=os.environ.get(COMMAND_CONFIG_ENV),
        metavar="FILE",
        help="Kafka client properties for TLS and SASL (security.protocol, ssl.cafile, "
        f"sasl.mechanism, sasl.jaas.config, ...; default: ${COMMAND_CONFIG_ENV})",
    )
    return parent


def cli_client(args: argparse.Namespace) -> Client:
    """The blocking Client a command uses: `--bootstrap-server` and `--command-config`."""
    return Client(args.bootstrap_server, client_id=CLI_CLIENT_ID, security=client_security(args))


def client_security(args: argparse.Namespace) -> Security:
    """The `Security` of `--command-config` (plaintext without one); CliError if invalid."""
    path = getattr(args, "command_config", None)
    if not path:
        return PLAINTEXT
    try:
        with open(path, encoding="utf-8") as f:
            props = parse_properties(f.read(), path)
        return security_from_properties(props)
    except OSError as exc:
        raise CliError("NOT_FOUND", f"--command-config {path}: {exc.strerror or exc}") from exc
    except (ValueError, TidelogError) as exc:
        raise CliError("BAD_INPUT", f"--command-config {path}: {exc}") from exc


def format_parent() -> argparse.ArgumentParser:
    """A parent parser adding `--format text|json`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (text)"
    )
    return parent


_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def parse_time_ms(text: str) -> int:
    """A timestamp given as ms since the epoch or ISO 8601 (naive times are UTC)."""
    value = text.strip()
    if re.fullmatch(r"-?\d+", value):
        return int(value)
    if _ISO_DATE.match(value):
        try:
            moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            pass
        else:
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            return int(moment.timestamp() * 1000)
    fail(
        "BAD_INPUT",
        f"cannot read {text!r} as a time",
        "give milliseconds since the epoch or ISO 8601, e.g. 2024-05-01T12:00:00Z",
    )


def format_time_ms(ms: int | None) -> str:
    """ISO 8601 in UTC with milliseconds, or '-' for none."""
    if ms is None or ms < 0:
        return "-"
    return datetime.fromtimestamp(ms / 1000, tz=UTC).isoformat(timespec="milliseconds")


def parse_key_value(text: str, what: str = "setting") -> tuple[str, str]:
    """`key=value` (the value may contain '=')."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        fail("BAD_INPUT", f"{what} {text!r} is not KEY=VALUE")
    return key.strip(), value
