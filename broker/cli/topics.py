"""`tidelog topics create|list|describe|delete|alter-config`: topic administration."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from typing import Any

from broker.cli.common import (
    EXIT_OK,
    CliError,
    Subcommands,
    bootstrap_parent,
    cli_client,
    format_parent,
    parse_key_value,
    print_out,
)
from protocol.errors import TopicAlreadyExists, UnknownTopicOrPartition, error_from_wire
from protocol.settings import config_text
from tidelog.client import Client


def register(sub: Subcommands) -> None:
    common = [bootstrap_parent()]
    topics = sub.add_parser(
        "topics",
        help="create, list, describe, delete and configure topics",
        description="Create, list, describe, delete and configure topics.",
    )
    verbs = topics.add_subparsers(dest="topics_command", metavar="COMMAND", required=True)

    create = verbs.add_parser(
        "create",
        parents=common,
        help="create a topic",
        description="Create a topic. Settings use Kafka's topic config names.",
        epilog="example: tidelog topics create events -p 3 -c cleanup.policy=compact",
    )
    create.add_argument("topic", metavar="TOPIC")
    create.add_argument(
        "--partitions", "-p", type=int, default=1, metavar="N", help="partitions (default 1)"
    )
    create.add_argument(
        "--config",
        "-c",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a topic setting, e.g. retention.ms=86400000 (repeatable)",
    )
    create.add_argument(
        "--if-not-exists", action="store_true", help="succeed if the topic already exists"
    )
    create.set_defaults(func=run_create)

    listing = verbs.add_parser(
        "list",
        parents=[*common, format_parent()],
        help="list topics",
        description="List topics with their partition counts.",
    )
    listing.set_defaults(func=run_list)

    describe = verbs.add_parser(
        "describe",
        parents=[*common, format_parent()],
        help="show a topic's partitions and settings",
        description=(
            "Show a topic's partitions (log start offset, high watermark, size, segments) "
            "and every setting with its source (default, broker or topic)."
        ),
    )
    describe.add_argument("topic", metavar="TOPIC")
    describe.set_defaults(func=run_describe)

    delete = verbs.add_parser(
        "delete", parents=common, help="delete a topic and its data", description="Delete a topic."
    )
    delete.add_argument("topic", metavar="TOPIC")
    delete.add_argument("--if-exists", action="store_true", help="succeed if there is no topic")
    delete.set_defaults(func=run_delete)

    alter = verbs.add_parser(
        "alter-config",
        parents=common,
        help="change a topic's settings (live, and they survive a restart)",
        description=(
            "Set or remove topic settings. Changes apply without a restart; a removed "
            "setting falls back to the broker's default."
        ),
        epilog="example: tidelog topics alter-config events --set retention.ms=3600000",
    )
    alter.add_argument("topic", metavar="TOPIC")
    alter.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="set (repeatable)"
    )
    alter.add_argument(
        "--delete", action="append", default=[], metavar="KEY", help="remove (repeatable)"
    )
    alter.set_defaults(func=run_alter)


def run_create(args: argparse.Namespace) -> int:
    configs = dict(parse_key_value(item, "--config") for item in args.config)
    with cli_client(args) as client:
        try:
            client.create_topic(args.topic, args.partitions, configs)
        except TopicAlreadyExists:
            if not args.if_not_exists:
                raise
            print_out(f"topic {args.topic} already exists")
            return EXIT_OK
    plural = "s" if args.partitions != 1 else ""
    print_out(f"created topic {args.topic} with {args.partitions} partition{plural}")
    return EXIT_OK


def run_list(args: argparse.Namespace) -> int:
    with cli_client(args) as client:
        topics = client.metadata()
    rows = [(t["topic"], len(t["partitions"])) for t in topics if t["error"] is None]
    if args.format == "json":
        print_out(json.dumps([{"topic": name, "partitions": n} for name, n in rows]))
    else:
        for name, _ in rows:
            print_out(name)
    return EXIT_OK


def topic_entry(client: Client, topic: str) -> dict[str, Any]:
    """One topic's metadata, raising its error."""
    [entry] = client.metadata([topic])
    if entry["error"] is not None:
        raise error_from_wire(entry["error"], entry.get("message") or topic)
    return entry


def run_describe(args: argparse.Namespace) -> int:
    with cli_client(args) as client:
        entry = topic_entry(client, args.topic)
        configs = client.describe_configs(args.topic)
    if args.format == "json":
        print_out(json.dumps({**entry, "configs": configs}, indent=2))
        return EXIT_OK
    partitions = entry["partitions"]
    overrides = {k: v["value"] for k, v in configs.items() if v["source"] == "topic"}
    print_out(
        f"Topic: {args.topic}  Partitions: {len(partitions)}  "
        f"Overrides: {','.join(f'{k}={v}' for k, v in sorted(overrides.items())) or '-'}"
    )
    print_out("")
    header = ("PARTITION", "LOG-START", "HIGH-WATERMARK", "SIZE-BYTES", "SEGMENTS")
    rows = [
        (
            str(p["partition"]),
            str(p["log_start_offset"]),
            str(p["high_watermark"]),
            str(p["size_bytes"]),
            str(p["segments"]),
        )
        for p in partitions
    ]
    print_table(header, rows)
    print_out("")
    print_table(
        ("CONFIG", "VALUE", "SOURCE"),
        [(k, _config_text(v["value"]), v["source"]) for k, v in sorted(configs.items())],
    )
    return EXIT_OK


def _config_text(value: Any) -> str:
    return "-" if value is None else config_text(value)


def print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print_out(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )


def run_delete(args: argparse.Namespace) -> int:
    with cli_client(args) as client:
        try:
            client.delete_topic(args.topic)
        except UnknownTopicOrPartition:
            if not args.if_exists:
                raise
            print_out(f"topic {args.topic} does not exist")
            return EXIT_OK
    print_out(f"deleted topic {args.topic}")
    return EXIT_OK


def run_alter(args: argparse.Namespace) -> int:
    if not args.set and not args.delete:
        raise CliError("BAD_INPUT", "nothing to change", "give --set KEY=VALUE or --delete KEY")
    updates = dict(parse_key_value(item, "--set") for item in args.set)
    with cli_client(args) as client:
        client.alter_configs(args.topic, set=updates, delete=args.delete)
    changes = [f"{k}={v}" for k, v in updates.items()] + [f"-{k}" for k in args.delete]
    print_out(f"updated topic {args.topic}: {', '.join(changes)}")
    return EXIT_OK
