"""`tidelog transactions list | describe <id>`: kafka-transactions' list and describe.

`list` prints every transactional id the coordinator knows with its producer id,
state and how long its open transaction has been running; `describe` one id's
producer epoch, timeout, start time and the partitions of its open transaction,
as `kafka-transactions.sh describe` does. Both read the `list_transactions`
extension (docs/protocol.md §9); Kafka tools use ListTransactions and
DescribeTransactions on the same port (docs/transactions.md).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from broker.cli.common import (
    EXIT_OK,
    CliError,
    HelpFormatter,
    Subcommands,
    bootstrap_parent,
    cli_client,
    format_parent,
    print_out,
)
from broker.cli.topics import print_table

STATES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort")


def register(sub: Subcommands) -> None:
    common = [bootstrap_parent(), format_parent()]
    txns = sub.add_parser(
        "transactions",
        help="transactional ids and their open transactions: list, describe",
        description="The transaction coordinator's state (docs/transactions.md).",
        formatter_class=HelpFormatter,
    )
    commands = txns.add_subparsers(dest="transactions_command", metavar="ACTION", required=True)
    listing = commands.add_parser("list", parents=common, help="every transactional id")
    listing.add_argument(
        "--state", action="append", choices=STATES, default=[], help="only these states"
    )
    listing.set_defaults(func=run_list)
    describe = commands.add_parser(
        "describe", parents=common, help="one transactional id and its open transaction"
    )
    describe.add_argument("transactional_id")
    describe.set_defaults(func=run_describe)


def _query(args: argparse.Namespace, body: dict[str, Any]) -> list[dict[str, Any]]:
    with cli_client(args) as client:
        transactions: list[dict[str, Any]] = client.request("list_transactions", body)[
            "transactions"
        ]
    return transactions


def _duration(txn: dict[str, Any], now_ms: int) -> str:
    return "-" if txn["start_ms"] < 0 else f"{max(0, now_ms - txn['start_ms'])} ms"


def run_list(args: argparse.Namespace) -> int:
    txns = _query(args, {"transactional_ids": None, "states": args.state})
    if args.format == "json":
        print_out(json.dumps(txns))
        return EXIT_OK
    now = int(time.time() * 1000)
    rows = [
        (t["transactional_id"], str(t["producer_id"]), t["state"], _duration(t, now)) for t in txns
    ]
    print_table(("TRANSACTIONAL-ID", "PRODUCER-ID", "STATE", "DURATION"), rows)
    return EXIT_OK


def run_describe(args: argparse.Namespace) -> int:
    txns = _query(args, {"transactional_ids": [args.transactional_id], "states": []})
    if not txns:
        raise CliError(
            "TRANSACTIONAL_ID_NOT_FOUND", f"transactional id {args.transactional_id} is not known"
        )
    [txn] = txns
    if args.format == "json":
        print_out(json.dumps(txn))
        return EXIT_OK
    now = int(time.time() * 1000)
    partitions = ",".join(f"{p['topic']}-{p['partition']}" for p in txn["partitions"]) or "-"
    header = (
        "TRANSACTIONAL-ID", "PRODUCER-ID", "PRODUCER-EPOCH", "STATE", "TIMEOUT-MS",
        "START-MS", "DURATION", "PARTITIONS",
    )  # fmt: skip
    row = (
        txn["transactional_id"], str(txn["producer_id"]), str(txn["producer_epoch"]),
        txn["state"], str(txn["timeout_ms"]), str(txn["start_ms"]), _duration(txn, now),
        partitions,
    )  # fmt: skip
    print_table(header, [row])
    return EXIT_OK
