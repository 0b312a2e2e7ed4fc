"""`tidelog dump-log FILE...`: decode segment and index files offline (Kafka's kafka-dump-log).

Reads the files directly, so it works on a stopped broker's data directory or
a copy of it. For a `.log` it prints one line per batch (offsets, count,
position, timestamps, size, magic, attributes, codec, CRC, producer fields) and
whether the batch is valid (CRC and payload checked); `--print-data-log` adds one
line per record. A log may hold both layouts (docs/storage.md): a Kafka v2 batch
(magic 2, stored as a Kafka producer sent it) also shows its partition leader
epoch, and its varint records are decoded as Kafka's `kafka-dump-log` would. A batch
whose header is unreadable or runs past the end of the file ends the scan
(nothing after it can be located). For `.index` and `.timeindex` it prints the
entries and checks they increase and point inside the segment's log; an entry no
calendar can show is reported and the dump goes on. A transactional or control batch
says so (`isTransactional`, `isControl`, as Kafka's tool), and a control batch's
record is shown as its marker (`endTxnMarker: COMMIT coordinatorEpoch: 0`), never
as data. A `.txnindex` prints its AbortedTxn entries as Kafka's tool does.
Exit status 1 when anything is invalid, with a summary line on stderr.
"""

from __future__ import annotations

import argparse
import mmap
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from broker.cli.common import (
    EXIT_OK,
    CliError,
    Subcommands,
    bootstrap_parent,
    format_time_ms,
    print_out,
)
from protocol.batch import (
    ANY_LAYOUT,
    CONTROL_MASK,
    MAGIC,
    TRANSACTIONAL_MASK,
    BatchHeader,
    BatchWalk,
    Compression,
    Record,
    TimestampType,
    decode_records,
    validate_batch,
)
from protocol.errors import TidelogError
from protocol.kafka import stored
from protocol.kafka.control import read_marker
from protocol.kafka.errors import KafkaCodecError
from protocol.kafka.validate import decode_batch
from storage.files import (
    INDEX_SUFFIX,
    LOG_SUFFIX,
    TIME_INDEX_SUFFIX,
    TXN_INDEX_SUFFIX,
    parse_segment_file_name,
)
from storage.index import OffsetIndex, TimeIndex

# The index entry layouts (docs/storage.md "File layout") are storage's own.
OFFSET_ENTRY = OffsetIndex.PACKER  # relative offset, position
TIME_ENTRY = TimeIndex.PACKER  # timestamp, relative offset
TXN_ENTRY = struct.Struct(">hqqqq")  # storage.txn_index: Kafka's AbortedTxn

# Record keys and values longer than this are cut in --print-data-log lines.
_MAX_SHOWN_BYTES = 200


def register(sub: Subcommands) -> None:
    dump = sub.add_parser(
        "dump-log",
        parents=[bootstrap_parent()],  # accepted like everywhere, unused: no broker needed
        help="decode segment (.log) and index files offline, verifying every CRC",
        description=(
            "Decode .log, .index and .timeindex files without a broker: batch headers with "
            "a CRC and payload check for each, optionally every record, and index entries "
            "with sanity checks. Exits 1 if anything is invalid."
        ),
        epilog="example: tidelog dump-log data/events-0/00000000000000000000.log -d",
    )
    dump.add_argument("files", nargs="+", metavar="FILE", type=Path)
    dump.add_argument("--print-data-log", "-d", action="store_true", help="print every record, too")
    dump.set_defaults(func=run_dump_log)


@dataclass
class _Findings:
    problems: list[str] = field(default_factory=list)

    def flag(self, message: str) -> None:
        self.problems.append(message)


@contextmanager
def _mapped(path: Path) -> Iterator[memoryview]:
    """The file's bytes, memory-mapped read-only (empty files give an empty view)."""
    try:
        handle = path.open("rb")
    except OSError as exc:
        raise CliError("NOT_FOUND", f"cannot read {path}: {exc.strerror}") from None
    with handle:
        size = path.stat().st_size
        if size == 0:
            yield memoryview(b"")
            return
        mapped = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        view = memoryview(mapped)
        try:
            yield view
        finally:
            try:
                view.release()
                mapped.close()
            except BufferError:
                pass  # a slice is still referenced (an error path): the GC unmaps it


def run_dump_log(args: argparse.Namespace) -> int:
    findings = _Findings()
    for path in args.files:
        print_out(f"Dumping {path}")
        parsed = parse_segment_file_name(path.name)
        base_offset = parsed.base_offset if parsed is not None else 0
        kind = parsed.kind if parsed is not None else path.suffix
        if kind == LOG_SUFFIX:
            dump_log_file(path, base_offset, args.print_data_log, findings)
        elif kind == INDEX_SUFFIX:
            dump_offset_index(path, base_offset, findings)
        elif kind == TIME_INDEX_SUFFIX:
            dump_time_index(path, base_offset, findings)
        elif kind == TXN_INDEX_SUFFIX:
            dump_txn_index(path, findings)
        else:
            raise CliError(
                "BAD_INPUT",
                f"{path.name} is not a segment file",
                "give .log, .index, .timeindex or .txnindex files",
            )
    if findings.problems:
        for problem in findings.problems:
            print_out(f"PROBLEM: {problem}")
        raise CliError(
            "CORRUPT_MESSAGE",
            f"{len(findings.problems)} problem(s) found",
            "see the PROBLEM lines above",
        )
    return EXIT_OK


def _batch_line(buf: memoryview, pos: int, header: BatchHeader, valid: bool, reason: str) -> str:
    stamp = (
        "LogAppendTime" if header.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    )
    try:
        codec = Compression(header.compression).name.lower()
    except ValueError:
        codec = f"unknown({header.compression})"
    line = (
        f"baseOffset: {header.base_offset} lastOffset: {header.last_offset} "
        f"count: {header.record_count} position: {pos} {stamp}: {header.max_timestamp} "
        f"size: {header.size} magic: {header.magic} "
        + (
            f"partitionLeaderEpoch: {stored.leader_epoch_of(buf, pos)} "
            if stored.is_kafka(header)
            else ""
        )
        + f"attributes: {header.attributes & 0xFFFF:#06x} compresscodec: {codec} "
        + (
            f"isTransactional: {str(bool(header.attributes & TRANSACTIONAL_MASK)).lower()} "
            f"isControl: {str(bool(header.attributes & CONTROL_MASK)).lower()} "
            if header.attributes & (TRANSACTIONAL_MASK | CONTROL_MASK)
            else ""
        )
        + f"crc: {header.crc:#010x} deleteHorizon: {str(header.has_delete_horizon).lower()} "
        f"producerId: {header.producer_id} producerEpoch: {header.producer_epoch} "
        f"baseSequence: {header.base_sequence} isValid: {str(valid).lower()}"
    )
    return line + (f" reason: {reason}" if reason else "")


def _shown(data: bytes | None) -> str:
    if data is None:
        return "null"
    cut = data[:_MAX_SHOWN_BYTES]
    text = cut.decode("utf-8", "backslashreplace")
    return text + ("..." if len(data) > _MAX_SHOWN_BYTES else "")


def dump_log_file(path: Path, base_offset: int, print_data: bool, findings: _Findings) -> None:
    """Print every batch of a .log file; flag invalid ones."""
    with _mapped(path) as buf:
        print_out(f"Starting offset: {base_offset}")
        walk, batches = BatchWalk(buf, layout=ANY_LAYOUT), 0
        for pos, fields in walk:
            header = BatchHeader(*fields)
            valid, reason = True, ""
            try:
                _check(buf, pos, header)
            except (TidelogError, KafkaCodecError) as exc:
                valid, reason = False, exc.message
                findings.flag(
                    f"{path}: batch at position {pos} (offset {header.base_offset}): {reason}"
                )
            print_out(_batch_line(buf, pos, header, valid, reason))
            if print_data and valid:
                _print_records(buf, pos, header)
            batches += 1
        if walk.problem is not None:
            _flag_stop(path, buf, walk.position, walk.problem, findings)
            return
        print_out(f"{batches} batches, {len(buf)} bytes")


def _check(buf: memoryview, pos: int, header: BatchHeader) -> None:
    """Raise unless the batch at `pos` is whole and sound: its CRC and records (all
    of Tidelog's produce rules but the producer's own for a Tidelog batch)."""
    if stored.is_kafka(header):
        decode_batch(buf, pos)
    else:
        validate_batch(buf, pos)


def _flag_stop(path: Path, buf: memoryview, pos: int, problem: str, findings: _Findings) -> None:
    """Say in words why the batch walk of a .log file stopped early at byte `pos`
    (`problem`: the walk's own reason)."""
    end = len(buf)
    try:
        header = BatchHeader(*ANY_LAYOUT.unpack_from(buf, pos))
    except struct.error:  # less than a header (of either layout) is left
        findings.flag(f"{path}: {end - pos} trailing bytes at position {pos} (torn write?)")
        return
    if header.magic in (MAGIC, stored.MAGIC) and pos + header.size > end:
        findings.flag(
            f"{path}: batch at position {pos} needs {header.size} bytes, {end - pos} left "
            "(truncated)"
        )
        return
    findings.flag(f"{path}: unreadable batch header at position {pos}: {problem}")


def _print_records(buf: memoryview, pos: int, header: BatchHeader) -> None:
    stamp = (
        "LogAppendTime" if header.timestamp_type == TimestampType.LOG_APPEND_TIME else "CreateTime"
    )
    if header.attributes & CONTROL_MASK:
        marker = read_marker(buf[pos : pos + header.size])
        shown = (
            "unknown"
            if marker is None
            else f"{'COMMIT' if marker.commit else 'ABORT'} "
            f"coordinatorEpoch: {marker.coordinator_epoch}"
        )
        print_out(f"| offset: {header.base_offset} endTxnMarker: {shown}")
        return
    for record in _records(buf, pos, header):
        timestamp = header.max_timestamp if stamp == "LogAppendTime" else record.timestamp
        keys = ",".join(k for k, _ in record.headers)
        print_out(
            f"| offset: {record.offset} {stamp}: {timestamp} "
            f"keySize: {-1 if record.key is None else len(record.key)} "
            f"valueSize: {-1 if record.value is None else len(record.value)} "
            f"headerKeys: [{keys}] key: {_shown(record.key)} payload: {_shown(record.value)}"
        )


def _records(buf: memoryview, pos: int, header: BatchHeader) -> list[Record]:
    """The records of a checked batch, either layout, with absolute offsets."""
    if not stored.is_kafka(header):
        return decode_records(buf, pos)
    return [
        Record(header.base_offset + delta, header.base_timestamp + ts_delta, key, value, hdrs)
        for delta, ts_delta, key, value, hdrs in stored.decode_stored(buf, pos, header)
    ]


def _entries(buf: memoryview, entry: struct.Struct) -> list[tuple[int, int]]:
    """Index entries up to the preallocated tail (all-zero entries after the first)."""
    count = len(buf) // entry.size
    if count >= 2 and entry.unpack_from(buf, 0) == entry.unpack_from(buf, entry.size) == (0, 0):
        return []  # an empty, preallocated index
    out = []
    for index in range(count):
        values = entry.unpack_from(buf, index * entry.size)
        if index > 0 and values == (0, 0):
            break
        out.append(values)
    return out


def _sibling_log_size(path: Path) -> int | None:
    log = path.with_name(path.name.split(".")[0] + LOG_SUFFIX)
    return log.stat().st_size if log.exists() else None


def dump_offset_index(path: Path, base_offset: int, findings: _Findings) -> None:
    with _mapped(path) as buf:
        if len(buf) % OFFSET_ENTRY.size:
            findings.flag(f"{path}: length {len(buf)} is not a multiple of {OFFSET_ENTRY.size}")
        entries = _entries(buf, OFFSET_ENTRY)
    log_size = _sibling_log_size(path)
    last_rel, last_pos = -1, -1
    for rel, position in entries:
        print_out(f"offset: {base_offset + rel} position: {position}")
        if rel <= last_rel:
            findings.flag(f"{path}: offset {base_offset + rel} does not increase")
        if position <= last_pos:
            findings.flag(f"{path}: position {position} does not increase")
        if log_size is not None and position >= max(log_size, 1):
            findings.flag(f"{path}: position {position} is past the log's {log_size} bytes")
        last_rel, last_pos = rel, position
    print_out(f"{len(entries)} entries")


def dump_txn_index(path: Path, findings: _Findings) -> None:
    """Kafka's TxnIndex dump: one line per AbortedTxn entry."""
    with _mapped(path) as buf:
        data = bytes(buf)
    if len(data) % TXN_ENTRY.size:
        findings.flag(f"{path}: length {len(data)} is not a multiple of {TXN_ENTRY.size}")
    count = len(data) // TXN_ENTRY.size
    for number in range(count):
        entry = TXN_ENTRY.unpack_from(data, number * TXN_ENTRY.size)
        version, producer_id, first, last, lso = entry
        print_out(
            f"version: {version} producerId: {producer_id} firstOffset: {first} "
            f"lastOffset: {last} lastStableOffset: {lso}"
        )
        if version != 0:
            findings.flag(f"{path}: entry {number} has version {version}, expected 0")
        if last < first:
            findings.flag(f"{path}: entry {number} ends at {last} before its start {first}")
    print_out(f"{count} entries")


def dump_time_index(path: Path, base_offset: int, findings: _Findings) -> None:
    with _mapped(path) as buf:
        if len(buf) % TIME_ENTRY.size:
            findings.flag(f"{path}: length {len(buf)} is not a multiple of {TIME_ENTRY.size}")
        entries = _entries(buf, TIME_ENTRY)
    last_ts, last_rel = -1, -1
    for number, (timestamp, rel) in enumerate(entries):
        try:
            shown = format_time_ms(timestamp)
        except (ValueError, OverflowError, OSError):  # beyond what a calendar can show
            shown = "out of range"
            findings.flag(f"{path}: timestamp {timestamp} at entry {number} is not a valid time")
        print_out(f"timestamp: {timestamp} ({shown}) offset: {base_offset + rel}")
        if timestamp <= last_ts:
            findings.flag(f"{path}: timestamp {timestamp} does not increase")
        if rel < last_rel:
            findings.flag(f"{path}: offset {base_offset + rel} goes backwards")
        last_ts, last_rel = timestamp, rel
    print_out(f"{len(entries)} entries")
