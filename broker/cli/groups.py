"""`tidelog groups list | describe | delete | reset-offsets`: kafka-consumer-groups' jobs.

`describe` prints Kafka's table: per partition the committed offset, the log end
offset (high watermark), the lag and the member holding it (decoded from the
member's ConsumerProtocol assignment). `reset-offsets` takes kafka-consumer-groups'
options, is a dry run unless `--execute` is given, and refuses a group with members
(their positions would overwrite the reset).
"""

from __future__ import annotations

import argparse
import json
import re
import time
from collections.abc import Mapping
from typing import Any

from broker.cli.common import (
    EXIT_OK,
    CliError,
    HelpFormatter,
    Subcommands,
    bootstrap_parent,
    format_parent,
    parse_time_ms,
    print_out,
)
from broker.cli.topics import print_table
from protocol.errors import TidelogError
from protocol.offsets_schema import OffsetAndMetadata, commit_offsets, fetch_offsets
from tidelog.assignors import MalformedConsumerProtocol, decode_assignment
from tidelog.client import Client

# States in which nobody's position can overwrite a reset (Kafka's check).
RESETTABLE_STATES = ("Empty", "Dead")
# Java's Duration.parse subset kafka-consumer-groups documents: PnDTnHnMnS.
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


def register(sub: Subcommands) -> None:
    common = [bootstrap_parent(), format_parent()]
    groups = sub.add_parser(
        "groups",
        help="consumer groups: list, describe, delete, reset offsets",
        description="Consumer groups (docs/groups.md), as kafka-consumer-groups shows them.",
        formatter_class=HelpFormatter,
    )
    commands = groups.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    listing = commands.add_parser("list", parents=common, help="every group and its state")
    listing.set_defaults(func=run_list)
    describe = commands.add_parser(
        "describe",
        parents=common,
        help="members, assignments, committed offsets and lag of a group",
        formatter_class=HelpFormatter,
    )
    describe.add_argument("group", metavar="GROUP")
    describe.set_defaults(func=run_describe)
    delete = commands.add_parser("delete", parents=common, help="delete an empty group")
    delete.add_argument("group", metavar="GROUP")
    delete.set_defaults(func=run_delete)
    reset = commands.add_parser(
        "reset-offsets",
        parents=common,
        help="move a group's committed offsets (dry run unless --execute)",
        description=(
            "Compute new committed offsets for the group's partitions and print them; "
            "--execute stores them. The group must have no members. New offsets are kept "
            "within [log start, log end] of each partition."
        ),
        epilog=(
            "examples:\n"
            "  tidelog groups reset-offsets billing --topic orders --to-earliest --execute\n"
            "  tidelog groups reset-offsets billing --all-topics --by-duration PT1H\n"
            "  tidelog groups reset-offsets billing --topic orders:0,1 --shift-by -10"
        ),
        formatter_class=HelpFormatter,
    )
    reset.add_argument("group", metavar="GROUP")
    scope = reset.add_mutually_exclusive_group(required=True)
    scope.add_argument(
        "--topic", action="append", metavar="TOPIC[:P,...]", help="a topic, or some partitions"
    )
    scope.add_argument(
        "--all-topics", action="store_true", help="every topic the group has offsets for"
    )
    how = reset.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-earliest", action="store_true", help="the log start offset")
    how.add_argument("--to-latest", action="store_true", help="the log end offset")
    how.add_argument("--to-datetime", metavar="WHEN", help="first offset at or after a time")
    how.add_argument("--to-offset", type=int, metavar="N", help="this offset")
    how.add_argument("--shift-by", type=int, metavar="N", help="the committed offset plus N")
    how.add_argument("--by-duration", metavar="PnDTnHnMnS", help="first offset at or after now-D")
    mode = reset.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="only print (the default)")
    mode.add_argument("--execute", action="store_true", help="store the new offsets")
    reset.set_defaults(func=run_reset)


def run_list(args: argparse.Namespace) -> int:
    with Client(args.bootstrap_server, client_id="tidelog-cli") as client:
        groups = client.request("list_groups", {})["groups"]
    if args.format == "json":
        print_out(json.dumps(groups))
    else:
        rows = [(g["group"], g["state"], g["protocol_type"] or "") for g in groups]
        print_table(("GROUP", "STATE", "PROTOCOL-TYPE"), rows)
    return EXIT_OK


def _describe(client: Client, group: str) -> dict[str, Any]:
    described: dict[str, Any]
    [described] = client.request("describe_groups", {"groups": [group]})["groups"]
    if described["error"] is not None:
        raise CliError(described["error"], described["message"] or group)
    return described


def _owners(described: dict[str, Any]) -> dict[tuple[str, int], dict[str, Any]]:
    """(topic, partition) -> the member assigned it (ConsumerProtocol groups only)."""
    owners = {}
    for member in described["members"]:
        try:
            assignment = decode_assignment(bytes(member["assignment"]))
        except MalformedConsumerProtocol:
            continue  # not a consumer's assignment (another protocol type)
        for tp in assignment.partitions:
            owners[tp] = member
    return owners


def _log_ends(client: Client, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
    ends = {}
    for topic, partition in sorted(partitions):
        try:
            found = client.list_offsets(topic, partition, "latest")
        except TidelogError:  # a topic deleted since the commit: no log end to show
            continue
        if found is not None:
            ends[(topic, partition)] = found.offset
    return ends


def describe_rows(client: Client, group: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The group's description and one row per partition it has an offset or owner for."""
    described = _describe(client, group)
    committed = client.call(fetch_offsets(group))
    owners = _owners(described)
    partitions = set(committed) | set(owners)
    ends = _log_ends(client, partitions)
    rows = []
    for tp in sorted(partitions):
        position = committed.get(tp)
        end = ends.get(tp)
        owner = owners.get(tp)
        rows.append(
            {
                "group": group,
                "topic": tp[0],
                "partition": tp[1],
                "current_offset": None if position is None else position.offset,
                "log_end_offset": end,
                "lag": None if position is None or end is None else max(0, end - position.offset),
                "consumer_id": None if owner is None else owner["member_id"],
                "host": None if owner is None else owner["client_host"],
                "client_id": None if owner is None else owner["client_id"],
            }
        )
    return described, rows


def run_describe(args: argparse.Namespace) -> int:
    with Client(args.bootstrap_server, client_id="tidelog-cli") as client:
        described, rows = describe_rows(client, args.group)
    if described["state"] == "Dead":
        raise CliError("GROUP_ID_NOT_FOUND", f"consumer group {args.group} does not exist")
    if args.format == "json":
        summary = {k: described[k] for k in ("group", "state", "protocol", "generation")}
        members = [
            {k: m[k] for k in ("member_id", "group_instance_id", "client_id", "client_host")}
            for m in described["members"]
        ]
        print_out(json.dumps({**summary, "members": members, "partitions": rows}))
        return EXIT_OK
    print_out(
        f"group {args.group}: {described['state']}, generation {described['generation']}, "
        f"{len(described['members'])} members, protocol {described['protocol'] or '-'}"
    )
    header = (
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    )
    table = [tuple("-" if row[k] is None else str(row[k]) for k in _ROW_KEYS) for row in rows]
    print_table(header, table)
    return EXIT_OK


_ROW_KEYS = (
    "group",
    "topic",
    "partition",
    "current_offset",
    "log_end_offset",
    "lag",
    "consumer_id",
    "host",
    "client_id",
)


def run_delete(args: argparse.Namespace) -> int:
    with Client(args.bootstrap_server, client_id="tidelog-cli") as client:
        [result] = client.request("delete_groups", {"groups": [args.group]})["groups"]
    if result["error"] is not None:
        raise CliError(result["error"], result["message"] or args.group)
    print_out(f"deleted consumer group {args.group}")
    return EXIT_OK


def parse_duration_ms(text: str) -> int:
    """ISO 8601 durations as kafka-consumer-groups takes them: P1D, PT1H30M, PT0.5S."""
    match = _DURATION.fullmatch(text.strip())
    if match is None or not any(match.groupdict().values()):
        raise CliError("BAD_INPUT", f"cannot read duration {text!r}", "e.g. PT1H or P1DT2H")
    days, hours, minutes = (int(match[k] or 0) for k in ("d", "h", "m"))
    seconds = float(match["s"] or 0)
    return int((((days * 24 + hours) * 60 + minutes) * 60 + seconds) * 1000)


def _targets(
    client: Client, args: argparse.Namespace, committed: Mapping[tuple[str, int], OffsetAndMetadata]
) -> list[tuple[str, int]]:
    if args.all_topics:
        return sorted(committed)
    wanted = []
    for spec in args.topic:
        topic, _, parts = spec.partition(":")
        [entry] = client.metadata([topic])
        if entry["error"] is not None:
            raise CliError(entry["error"], f"{topic}: {entry.get('message') or 'error'}")
        known = sorted(p["partition"] for p in entry["partitions"])
        chosen = [int(p) for p in parts.split(",")] if parts else known
        for partition in chosen:
            if partition not in known:
                raise CliError(
                    "UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has no partition {partition}"
                )
            wanted.append((topic, partition))
    return sorted(set(wanted))


def _new_offset(
    client: Client, args: argparse.Namespace, tp: tuple[str, int], current: int | None
) -> int:
    topic, partition = tp
    start = client.list_offsets(topic, partition, "earliest")
    end = client.list_offsets(topic, partition, "latest")
    low = start.offset if start is not None else 0
    high = end.offset if end is not None else low
    if args.to_earliest:
        target = low
    elif args.to_latest:
        target = high
    elif args.to_offset is not None:
        target = args.to_offset
    elif args.shift_by is not None:
        target = (low if current is None else current) + args.shift_by
    else:
        when = (
            parse_time_ms(args.to_datetime)
            if args.to_datetime is not None
            else int(time.time() * 1000) - parse_duration_ms(args.by_duration)
        )
        found = client.offset_for_time(topic, partition, when)
        target = high if found is None else found.offset
    return min(max(target, low), high)


def run_reset(args: argparse.Namespace) -> int:
    with Client(args.bootstrap_server, client_id="tidelog-cli") as client:
        [described] = client.request("describe_groups", {"groups": [args.group]})["groups"]
        if described["state"] not in RESETTABLE_STATES:
            raise CliError(
                "NON_EMPTY_GROUP",
                f"consumer group {args.group} is {described['state']} with "
                f"{len(described['members'])} members",
                "stop its consumers first: offsets can be reset only while it is inactive",
            )
        committed = client.call(fetch_offsets(args.group))
        plan = {}
        for tp in _targets(client, args, committed):
            current = committed.get(tp)
            plan[tp] = _new_offset(client, args, tp, None if current is None else current.offset)
        if args.execute and plan:
            client.call(commit_offsets(args.group, plan))
    rows = [
        {"group": args.group, "topic": t, "partition": p, "new_offset": o}
        for (t, p), o in sorted(plan.items())
    ]
    if args.format == "json":
        print_out(json.dumps({"executed": bool(args.execute), "partitions": rows}))
        return EXIT_OK
    table = [(r["group"], r["topic"], str(r["partition"]), str(r["new_offset"])) for r in rows]
    print_table(("GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"), table)
    if not args.execute:
        print_out("dry run: nothing changed (add --execute to store these offsets)")
    return EXIT_OK


__all__ = ["RESETTABLE_STATES", "describe_rows", "parse_duration_ms", "register"]
