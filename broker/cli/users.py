"""`tidelog users add|delete|list --data-dir DIR`: SCRAM users of a broker's data directory.

Acts on the data directory's `scram-credentials.json` (broker/security/credentials.py);
a running broker on that directory picks the change up on the next login. The
password comes from a prompt, `--password-stdin` or `--password-file`, never from
the command line (where `ps` and shell history would keep it), and is never
printed or logged.
"""

from __future__ import annotations

import argparse
import getpass
import json
import sys
from pathlib import Path

from broker.cli.common import EXIT_ERROR, EXIT_OK, CliError, Subcommands, format_parent, print_out
from broker.security.credentials import CredentialStore
from protocol.sasl.scram import DEFAULT_ITERATIONS, ITERATIONS_MAX, ITERATIONS_MIN, SCRAM_MECHANISMS

# A password longer than this is a pasted file, not a password.
PASSWORD_CHARS_MAX = 1024


def data_dir_parent() -> argparse.ArgumentParser:
    """`--data-dir DIR`: the broker's data directory, shared by `users` and `acls`."""
    parent = argparse.ArgumentParser(add_help=False)
    parent.add_argument(
        "--data-dir", required=True, type=Path, metavar="DIR", help="the broker's data directory"
    )
    return parent


def register(subparsers: Subcommands) -> None:
    """Add the `users` command group."""
    users = subparsers.add_parser(
        "users",
        help="manage SASL/SCRAM users (in the data directory)",
        description="Manage the SCRAM users a broker accepts (stored salted and iterated).",
    )
    sub = users.add_subparsers(dest="users_command", metavar="COMMAND", required=True)
    add = sub.add_parser(
        "add",
        parents=[data_dir_parent()],
        help="create a user or replace its password",
        epilog="example: tidelog users add alice --data-dir ./data --password-stdin < pw.txt",
    )
    add.add_argument("username", metavar="USER")
    source = add.add_mutually_exclusive_group()
    source.add_argument("--password-stdin", action="store_true", help="read it from stdin")
    source.add_argument("--password-file", type=Path, metavar="FILE", help="read it from FILE")
    add.add_argument(
        "--mechanism",
        action="append",
        choices=sorted(SCRAM_MECHANISMS),
        help="SCRAM mechanism to store (repeatable; default both)",
    )
    add.add_argument(
        "--iterations",
        type=int,
        default=DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations, {ITERATIONS_MIN}..{ITERATIONS_MAX} "
        f"(default {DEFAULT_ITERATIONS})",
    )
    add.set_defaults(func=run_add)
    delete = sub.add_parser("delete", parents=[data_dir_parent()], help="remove a user")
    delete.add_argument("username", metavar="USER")
    delete.set_defaults(func=run_delete)
    listing = sub.add_parser(
        "list", parents=[data_dir_parent(), format_parent()], help="users and their mechanisms"
    )
    listing.set_defaults(func=run_list)


def _read_password(args: argparse.Namespace) -> str:
    text: str
    if args.password_file is not None:
        try:
            text = args.password_file.read_text(encoding="utf-8")
        except OSError as exc:
            raise CliError("NOT_FOUND", f"{args.password_file}: {exc.strerror}") from exc
    elif args.password_stdin or not sys.stdin.isatty():
        text = sys.stdin.read()
    else:
        text = getpass.getpass(f"password for {args.username}: ")
        if getpass.getpass("again: ") != text:
            raise CliError("BAD_INPUT", "the passwords differ")
    password = text.rstrip("\r\n")
    if not password or len(password) > PASSWORD_CHARS_MAX:
        raise CliError("BAD_INPUT", f"the password must be 1..{PASSWORD_CHARS_MAX} characters")
    return password


def run_add(args: argparse.Namespace) -> int:
    if not ITERATIONS_MIN <= args.iterations <= ITERATIONS_MAX:
        raise CliError("BAD_INPUT", f"--iterations must be in {ITERATIONS_MIN}..{ITERATIONS_MAX}")
    mechanisms = tuple(args.mechanism or sorted(SCRAM_MECHANISMS))
    password = _read_password(args)
    try:
        CredentialStore(args.data_dir).set_user(
            args.username, password, mechanisms=mechanisms, iterations=args.iterations
        )
    except ValueError as exc:
        raise CliError("BAD_INPUT", str(exc)) from exc
    print_out(f"user {args.username}: {', '.join(mechanisms)}, {args.iterations} iterations")
    return EXIT_OK


def run_delete(args: argparse.Namespace) -> int:
    if not CredentialStore(args.data_dir).delete_user(args.username):
        print_out(f"no user {args.username}")
        return EXIT_ERROR
    print_out(f"deleted user {args.username}")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    users = CredentialStore(args.data_dir).users()
    if args.format == "json":
        print_out(json.dumps(users, indent=2))
    else:
        for user, mechanisms in users.items():
            print_out(f"{user}\t{','.join(mechanisms)}")
    return EXIT_OK
