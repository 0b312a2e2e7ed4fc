"""`tidelog consume TOPIC`: print records, from anywhere in the log.

Where to start (`--offset`, rpk's syntax): `start`, `end`, an offset `47`,
`+N` (N after the log start), `-N` (N before the end), or `@TIME` (the first
record at or after TIME: ms since the epoch or ISO 8601). Without `--follow`
the command stops at the high watermark it saw when it started; with it, it
waits for new records until Ctrl-C or `-n COUNT`.

Text output writes each value's bytes as they are, one per line (`null` for a
tombstone); `--print-key` prefixes the key. JSON output is one object per
line; a key or value that is not UTF-8 appears base64-encoded under
`key_base64`/`value_base64` instead.
"""

from __future__ import annotations

import argparse
import base64
import json
import re
from collections.abc import Callable
from functools import partial
from typing import Any

from broker.cli.common import (
    EXIT_OK,
    CliError,
    HelpFormatter,
    Subcommands,
    bootstrap_parent,
    client_security,
    format_parent,
    parse_time_ms,
    write_out,
)
from broker.cli.topics import topic_entry
from protocol.calls import OffsetAndTimestamp
from tidelog.consumer import Consumer, ConsumerRecord, TopicPartition

# How long one poll waits for records before checking whether we are done.
_POLL_TIMEOUT_MS = 500
_TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")


def register(sub: Subcommands) -> None:
    consume = sub.add_parser(
        "consume",
        parents=[bootstrap_parent(), format_parent()],
        help="print records",
        description=(
            "Print the records of TOPIC (all partitions unless -p is given). Stops at the end "
            "of the log unless --follow is given."
        ),
        epilog=(
            "offsets: start | end | 47 | +10 (10 after start) | -10 (last 10) | @1714521600000 "
            "| @2024-05-01T00:00:00Z\n"
            "examples:\n"
            "  tidelog consume events -n 10\n"
            "  tidelog consume events --offset -5 --format json\n"
            "  tidelog consume events --offset end --follow\n"
            "  tidelog consume events --group audit -n 100   # run again to continue"
        ),
        formatter_class=HelpFormatter,
    )
    consume.add_argument("topic", metavar="TOPIC")
    consume.add_argument(
        "--offset",
        "-o",
        default=None,
        metavar="WHERE",
        help="where to start (start; with --group: the group's committed position)",
    )
    consume.add_argument(
        "--group",
        "-g",
        metavar="GROUP",
        help="resume from GROUP's committed position and commit what was printed "
        "(no membership or rebalancing: one reader per group)",
    )
    consume.add_argument(
        "--partition",
        "-p",
        type=int,
        action="append",
        metavar="N",
        help="only partition N (repeatable)",
    )
    consume.add_argument("--num", "-n", type=int, metavar="COUNT", help="stop after COUNT records")
    consume.add_argument("--follow", "-f", action="store_true", help="keep waiting for new records")
    consume.add_argument(
        "--isolation-level",
        choices=("read_uncommitted", "read_committed"),
        default="read_uncommitted",
        help="read_committed: only committed transactions' records, up to the last stable "
        "offset (default read_uncommitted, as kafka-console-consumer)",
    )
    consume.add_argument("--print-key", action="store_true", help="text: print KEY<sep>VALUE")
    consume.add_argument(
        "--key-separator", default="\t", metavar="SEP", help="text: between key and value (tab)"
    )
    consume.set_defaults(func=run_consume)


_RELATIVE = re.compile(r"[+-]\d+")


def start_offset(
    spec: str, low: int, high: int, client_lookup: Callable[[int], OffsetAndTimestamp | None]
) -> int:
    """The first offset to read for `spec`, within [low, high]."""
    text = spec.strip()
    if text in ("start", "beginning", "earliest"):
        return low
    if text in ("end", "latest"):
        return high
    if text.isdigit():
        return min(max(int(text), low), high)
    if _RELATIVE.fullmatch(text):
        amount = int(text[1:])
        return min(low + amount, high) if text[0] == "+" else max(high - amount, low)
    if text.startswith("@"):
        found = client_lookup(parse_time_ms(text[1:]))
        return high if found is None else min(max(found.offset, low), high)
    raise CliError(
        "BAD_INPUT",
        f"cannot read offset {spec!r}",
        "use start, end, an offset, +N, -N or @TIME",
    )


def run_consume(args: argparse.Namespace) -> int:
    if args.num is not None and args.num < 0:
        raise CliError("BAD_INPUT", "-n must be >= 0")
    with Consumer(
        bootstrap_servers=args.bootstrap_server,
        auto_offset_reset="earliest",
        client_id="tidelog-cli",
        group_id=args.group,
        security=client_security(args),
        isolation_level=args.isolation_level,
    ) as consumer:
        entry = topic_entry(consumer.client, args.topic)
        known = {p["partition"]: p for p in entry["partitions"]}
        wanted = args.partition if args.partition else sorted(known)
        for number in wanted:
            if number not in known:
                raise CliError(
                    "UNKNOWN_TOPIC_OR_PARTITION",
                    f"{args.topic} has no partition {number} (it has {len(known)})",
                )
        partitions = [TopicPartition(args.topic, n) for n in wanted]
        consumer.assign(partitions)
        ends: dict[TopicPartition, int] = {}
        for tp in partitions:
            low, high = (
                known[tp.partition]["log_start_offset"],
                known[tp.partition]["high_watermark"],
            )
            stable = known[tp.partition].get("last_stable_offset")
            if args.isolation_level == "read_committed" and stable is not None:
                high = stable  # an open transaction: read up to it
            ends[tp] = high
            if args.offset is None and args.group is not None:
                committed = consumer.committed(tp)
                if committed is not None:
                    consumer.seek(tp, min(max(committed, low), high))
                    continue
            start = start_offset(
                args.offset or "start",
                low,
                high,
                partial(consumer.client.offset_for_time, tp.topic, tp.partition),
            )
            consumer.seek(tp, start)
        # What to commit: the next offset after the last record printed (poll may have
        # returned more than -n lets us print), else where the partition started.
        done = {tp: consumer.position(tp) for tp in partitions}
        try:
            _print_records(consumer, partitions, ends, args, done)
        finally:
            if args.group is not None:
                consumer.commit(done)
    return EXIT_OK


def _print_records(
    consumer: Consumer,
    partitions: list[TopicPartition],
    ends: dict[TopicPartition, int],
    args: argparse.Namespace,
    done: dict[TopicPartition, int],
) -> None:
    limit = args.num
    printed = 0
    pending = {tp for tp in partitions if args.follow or consumer.position(tp) < ends[tp]}
    render = _render_json if args.format == "json" else _text_renderer(args)
    while pending and (limit is None or printed < limit):
        polled = consumer.poll(timeout_ms=_POLL_TIMEOUT_MS)
        out = bytearray()
        for tp, records in polled.items():
            if not args.follow:
                records = [r for r in records if r.offset < ends[tp]]
            if limit is not None:
                records = records[: limit - printed]
            for record in records:
                out += render(record)
            printed += len(records)
            if records:
                done[tp] = records[-1].offset + 1
        if out:
            write_out(bytes(out))
        if not args.follow:
            pending = {tp for tp in pending if consumer.position(tp) < ends[tp]}


def _text_renderer(args: argparse.Namespace) -> Callable[[ConsumerRecord], bytes]:
    separator: bytes = args.key_separator.encode()

    def render(record: ConsumerRecord) -> bytes:
        value = b"null" if record.value is None else record.value
        if args.print_key:
            key = b"null" if record.key is None else record.key
            return key + separator + value + b"\n"
        return value + b"\n"

    return render


def _blob(name: str, data: bytes | None, out: dict[str, Any]) -> None:
    if data is None:
        out[name] = None
        return
    try:
        out[name] = data.decode("utf-8")
    except UnicodeDecodeError:
        out[f"{name}_base64"] = base64.b64encode(data).decode("ascii")


def _render_json(record: ConsumerRecord) -> bytes:
    out: dict[str, Any] = {
        "topic": record.topic,
        "partition": record.partition,
        "offset": record.offset,
        "timestamp": record.timestamp,
        "timestamp_type": _TIMESTAMP_TYPES[record.timestamp_type],
    }
    _blob("key", record.key, out)
    _blob("value", record.value, out)
    headers = []
    for key, value in record.headers:
        header: dict[str, Any] = {"key": key}
        _blob("value", value, header)
        headers.append(header)
    out["headers"] = headers
    return json.dumps(out, ensure_ascii=False).encode("utf-8") + b"\n"
