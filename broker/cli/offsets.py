"""`tidelog offsets`, `tidelog delete-records` and `tidelog log-dirs`: positions and sizes."""

from __future__ import annotations

import argparse
import json

from broker.cli.common import (
    EXIT_OK,
    CliError,
    HelpFormatter,
    Subcommands,
    bootstrap_parent,
    cli_client,
    format_parent,
    parse_time_ms,
    print_out,
)
from broker.cli.topics import print_table, topic_entry
from tidelog.client import Client

_SPECS = {
    "earliest": "earliest",
    "-2": "earliest",
    "latest": "latest",
    "-1": "latest",
    "max-timestamp": "max_timestamp",
    "-3": "max_timestamp",
}


def register(sub: Subcommands) -> None:
    common = [bootstrap_parent(), format_parent()]
    offsets = sub.add_parser(
        "offsets",
        parents=common,
        help="show partition offsets (earliest, latest, max-timestamp, or for a time)",
        description=(
            "Print TOPIC:PARTITION:OFFSET per partition. --time is earliest (-2), latest (-1, "
            "the default), max-timestamp (-3: the record with the largest timestamp), or a "
            "time in ms or ISO 8601 (the first record at or after it; 'none' if there is none)."
        ),
        epilog="example: tidelog offsets events --time 2024-05-01T00:00:00Z",
        formatter_class=HelpFormatter,
    )
    offsets.add_argument("topic", metavar="TOPIC")
    offsets.add_argument("--partition", "-p", type=int, action="append", metavar="N")
    offsets.add_argument("--time", "-t", default="latest", metavar="WHEN", help="(latest)")
    offsets.set_defaults(func=run_offsets)

    delete = sub.add_parser(
        "delete-records",
        parents=common,
        help="delete records before an offset (moves the log start offset)",
        description=(
            "Delete every record below OFFSET in the given partitions (all if -p is not "
            "given): the log start offset moves up and whole segments below it are removed. "
            "OFFSET may be 'end' (-1): everything up to the high watermark."
        ),
        epilog="example: tidelog delete-records events -p 0 --offset 1000",
    )
    delete.add_argument("topic", metavar="TOPIC")
    delete.add_argument("--partition", "-p", type=int, action="append", metavar="N")
    delete.add_argument("--offset", "-o", required=True, metavar="OFFSET")
    delete.set_defaults(func=run_delete_records)

    log_dirs = sub.add_parser(
        "log-dirs",
        parents=common,
        help="disk use per partition",
        description="Size on disk, segments and offsets of every partition (or of --topic).",
    )
    log_dirs.add_argument(
        "--topic", action="append", metavar="TOPIC", help="only this topic (repeatable)"
    )
    log_dirs.set_defaults(func=run_log_dirs)


def _partitions(client: Client, topic: str, wanted: list[int] | None) -> list[int]:
    known = sorted(p["partition"] for p in topic_entry(client, topic)["partitions"])
    for number in wanted or []:
        if number not in known:
            raise CliError("UNKNOWN_TOPIC_OR_PARTITION", f"{topic} has no partition {number}")
    return wanted or known


def run_offsets(args: argparse.Namespace) -> int:
    spec = _SPECS.get(args.time.strip().lower())
    timestamp_ms = None if spec is not None else parse_time_ms(args.time)
    rows = []
    with cli_client(args) as client:
        for partition in _partitions(client, args.topic, args.partition):
            if spec is not None:
                answer = client.list_offsets(args.topic, partition, spec)
            else:
                assert timestamp_ms is not None
                answer = client.offset_for_time(args.topic, partition, timestamp_ms)
            rows.append(
                {
                    "topic": args.topic,
                    "partition": partition,
                    "offset": None if answer is None else answer.offset,
                    "timestamp": None
                    if answer is None or answer.timestamp < 0
                    else answer.timestamp,
                }
            )
    if args.format == "json":
        print_out(json.dumps(rows))
    else:
        for row in rows:
            offset = "none" if row["offset"] is None else row["offset"]
            print_out(f"{row['topic']}:{row['partition']}:{offset}")
    return EXIT_OK


def run_delete_records(args: argparse.Namespace) -> int:
    text = args.offset.strip().lower()
    if text in ("end", "latest", "-1"):
        offset = -1
    elif text.isdigit():
        offset = int(text)
    else:
        raise CliError(
            "BAD_INPUT", f"cannot read offset {args.offset!r}", "give an offset or 'end'"
        )
    rows = []
    with cli_client(args) as client:
        for partition in _partitions(client, args.topic, args.partition):
            low = client.delete_records(args.topic, partition, offset)
            rows.append({"topic": args.topic, "partition": partition, "low_watermark": low})
    if args.format == "json":
        print_out(json.dumps(rows))
    else:
        for row in rows:
            print_out(
                f"{row['topic']}-{row['partition']}: log start offset is now {row['low_watermark']}"
            )
    return EXIT_OK


def run_log_dirs(args: argparse.Namespace) -> int:
    with cli_client(args) as client:
        topics = client.metadata(args.topic)
    for entry in topics:
        if entry["error"] is not None:
            raise CliError(entry["error"], f"{entry['topic']}: {entry.get('message') or 'error'}")
    partitions = [
        {
            "topic": entry["topic"],
            "partition": p["partition"],
            "size": p["size_bytes"],
            "segments": p["segments"],
            "log_start_offset": p["log_start_offset"],
            "high_watermark": p["high_watermark"],
            "log_end_offset": p["log_end_offset"],
        }
        for entry in topics
        for p in entry["partitions"]
    ]
    if args.format == "json":
        print_out(
            json.dumps({"partitions": partitions, "total_size": sum(p["size"] for p in partitions)})
        )
        return EXIT_OK
    header = ("PARTITION", "SIZE-BYTES", "SEGMENTS", "LOG-START", "HIGH-WATERMARK")
    rows = [
        (
            f"{p['topic']}-{p['partition']}",
            str(p["size"]),
            str(p["segments"]),
            str(p["log_start_offset"]),
            str(p["high_watermark"]),
        )
        for p in partitions
    ]
    print_table(header, rows)
    print_out(f"total: {sum(p['size'] for p in partitions)} bytes in {len(partitions)} partitions")
    return EXIT_OK
