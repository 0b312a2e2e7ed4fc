"""`tidelog produce TOPIC`: one record per input line, from stdin or a file.

Lines are read as bytes (any encoding passes through untouched); the line end
(`\\n` or `\\r\\n`) is dropped. With `--key-separator` the text before the
first separator is the key. `--tombstone` sends an empty value as null (a
delete marker on a compacted topic). Output: the offsets written, one summary
line per partition (or one line per record with `--verbose`, or when typing
at a terminal). A progress bar goes to stderr when reading a file and stderr
is a terminal.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import BinaryIO

from broker.cli.common import (
    EXIT_OK,
    CliError,
    HelpFormatter,
    Subcommands,
    bootstrap_parent,
    client_security,
    parse_key_value,
    print_out,
)
from tidelog.producer import Producer, RecordFuture

# Resolve futures in chunks so a huge file does not keep one future per line alive.
_FUTURES_PER_CHUNK = 50_000
# Redraw the progress bar at most this often.
_PROGRESS_INTERVAL_S = 0.25
_PROGRESS_WIDTH = 30


def register(sub: Subcommands) -> None:
    produce = sub.add_parser(
        "produce",
        parents=[bootstrap_parent()],
        help="write records from stdin or a file (one per line)",
        description=(
            "Write one record per input line to TOPIC. Without --partition, keyed records go "
            "to the partition Kafka's partitioner picks and unkeyed ones are spread in batches."
        ),
        epilog=(
            "examples:\n"
            "  echo hello | tidelog produce events\n"
            "  tidelog produce events --file data.txt --key-separator : --compression zstd\n"
            "  printf 'user1:\\n' | tidelog produce users --key-separator : --tombstone"
        ),
        formatter_class=HelpFormatter,
    )
    produce.add_argument("topic", metavar="TOPIC")
    produce.add_argument("--file", "-f", metavar="FILE", help="read this file instead of stdin")
    produce.add_argument("--partition", "-p", type=int, metavar="N", help="write to partition N")
    produce.add_argument(
        "--key-separator", "-k", metavar="SEP", help="split each line into KEY SEP VALUE"
    )
    produce.add_argument("--key", metavar="KEY", help="use this key for every record")
    produce.add_argument(
        "--header",
        "-H",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="add this header to every record (repeatable)",
    )
    produce.add_argument(
        "--tombstone", "-Z", action="store_true", help="send an empty value as null (a tombstone)"
    )
    produce.add_argument(
        "--compression",
        "-z",
        choices=("none", "gzip", "snappy", "lz4", "zstd"),
        default="none",
        help="batch compression (none)",
    )
    produce.add_argument(
        "--acks",
        choices=("-1", "all", "1", "0"),
        default="-1",
        help="-1/all: wait for fsync (default); 1: wait for the write; 0: do not wait",
    )
    produce.add_argument("--linger-ms", type=float, default=5, metavar="MS", help="(5)")
    produce.add_argument("--batch-size", type=int, default=65_536, metavar="BYTES", help="(65536)")
    produce.add_argument(
        "--verbose", "-v", action="store_true", help="print the offset of every record"
    )
    produce.set_defaults(func=run_produce)


@dataclass
class _Summary:
    """Per partition: records written and the offset range."""

    ranges: dict[int, tuple[int, int, int]] = field(default_factory=dict)  # count, first, last
    sent: int = 0  # records handed to the producer
    failed: int = 0
    first_error: BaseException | None = None

    def add(self, futures: list[RecordFuture], *, verbose: bool, topic: str) -> None:
        for future in futures:
            error = future.exception()
            if error is not None:
                self.failed += 1
                self.first_error = self.first_error or error
                continue
            meta = future.result()
            if verbose:
                print_out(f"{topic}-{meta.partition}@{meta.offset}")
            count, first, last = self.ranges.get(meta.partition, (0, meta.offset, meta.offset))
            self.ranges[meta.partition] = (
                count + 1,
                min(first, meta.offset),
                max(last, meta.offset),
            )


def _lines(stream: BinaryIO) -> Iterator[bytes]:
    for line in stream:
        if line.endswith(b"\n"):
            line = line[:-2] if line.endswith(b"\r\n") else line[:-1]
        yield line


class _Progress:
    """A one-line progress bar on stderr, by bytes read."""

    def __init__(self, stream: BinaryIO, total_bytes: int) -> None:
        self.stream = stream
        self.total_bytes = max(total_bytes, 1)
        self.last_draw = 0.0

    def update(self, records: int, *, final: bool = False) -> None:
        now = time.monotonic()
        if not final and now - self.last_draw < _PROGRESS_INTERVAL_S:
            return
        self.last_draw = now
        done = min(self.stream.tell(), self.total_bytes) if not final else self.total_bytes
        filled = done * _PROGRESS_WIDTH // self.total_bytes
        bar = "#" * filled + "." * (_PROGRESS_WIDTH - filled)
        sys.stderr.write(
            f"\r[{bar}] {done * 100 // self.total_bytes:3d}% {done / 1e6:,.1f} MB "
            f"{records:,} records" + ("\n" if final else "")
        )
        sys.stderr.flush()


def _open_input(args: argparse.Namespace) -> tuple[BinaryIO, bool]:
    """The records' source (the file, or stdin) and whether a person types them."""
    if args.file is None:
        return sys.stdin.buffer, sys.stdin.isatty()
    try:
        return open(args.file, "rb"), False
    except OSError as exc:
        raise CliError("NOT_FOUND", f"cannot read {args.file}: {exc.strerror}") from None


def _key_and_value(
    args: argparse.Namespace, line: bytes, number: int, separator: bytes | None
) -> tuple[bytes | None, bytes | None]:
    """One input line as a record's key and value (`--key`, `--key-separator`,
    `--tombstone`)."""
    key = args.key.encode() if args.key is not None else None
    value: bytes | None = line
    if separator is not None:
        key_part, found, value = line.partition(separator)
        if not found:
            raise CliError(
                "BAD_INPUT", f"line {number} has no key separator {args.key_separator!r}"
            )
        key = key_part
    if args.tombstone and not value:
        value = None
    return key, value


def _send_lines(
    args: argparse.Namespace,
    stream: BinaryIO,
    *,
    interactive: bool,
    summary: _Summary,
    progress: _Progress | None,
) -> None:
    """Send every line of `stream` as a record, counted in `summary`."""
    headers = [(k, v.encode()) for k, v in (parse_key_value(h, "--header") for h in args.header)]
    separator = args.key_separator.encode() if args.key_separator is not None else None
    if separator == b"":
        raise CliError("BAD_INPUT", "--key-separator must not be empty")
    with Producer(
        args.bootstrap_server,
        acks=_acks(args),
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        compression_type=args.compression,
        client_id="tidelog-cli",
        security=client_security(args),
    ) as producer:
        futures: list[RecordFuture] = []
        for number, line in enumerate(_lines(stream), start=1):
            key, value = _key_and_value(args, line, number, separator)
            futures.append(
                producer.send(
                    args.topic, value, key=key, headers=headers or None, partition=args.partition
                )
            )
            summary.sent += 1
            if interactive:
                producer.flush()
            if interactive or len(futures) >= _FUTURES_PER_CHUNK:
                summary.add(futures, verbose=args.verbose or interactive, topic=args.topic)
                futures = []
            if progress is not None:
                progress.update(summary.sent)
        producer.flush()
        summary.add(futures, verbose=args.verbose, topic=args.topic)


def _acks(args: argparse.Namespace) -> int:
    return -1 if args.acks == "all" else int(args.acks)


def run_produce(args: argparse.Namespace) -> int:
    stream, interactive = _open_input(args)
    progress = None
    if args.file is not None and sys.stderr.isatty():
        progress = _Progress(stream, os.fstat(stream.fileno()).st_size)
    summary = _Summary()
    try:
        _send_lines(args, stream, interactive=interactive, summary=summary, progress=progress)
    finally:
        if progress is not None:
            progress.update(summary.sent, final=True)
        if args.file is not None:
            stream.close()
    sent = summary.sent
    if summary.first_error is not None:
        error = summary.first_error
        code = getattr(error, "code", "CONNECTION_ERROR")
        message = getattr(error, "message", None) or str(error)
        raise CliError(code, f"{message} ({summary.failed} of {sent} records failed)")
    if _acks(args) == 0:
        print_out(f"sent {sent} records to {args.topic} (acks=0: offsets unknown)")
    elif not interactive:
        for partition, (count, first, last) in sorted(summary.ranges.items()):
            print_out(f"{args.topic}-{partition}: {count} records at offsets {first}..{last}")
        if not summary.ranges:
            print_out("no records (empty input)")
    return EXIT_OK
