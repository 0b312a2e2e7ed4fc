"""The one oracle every crash and fault test asks: did the broker keep what it acknowledged?

Producers call `Ledger.record` only after a success response, one `Ack` per record
(unique id, partition, offset, value hash, acks). After a restart `verify` reads
every partition twice, through the broker (fetch, with the contract's decoder) and
straight from the segment files (a brute-force scan), and returns every broken
promise as a readable line. An empty list means the run kept its word:

- every acknowledged record sits at its offset with identical bytes (for
  `acks: 1` only when `require_acks_one`, i.e. not after a power cut);
- offsets increase with no gaps, except where compaction explains them;
- no record id appears twice; every batch's CRC is valid;
- fetch, `list_offsets` and `offset_for_time` agree with the brute-force scan;
- no `.cleaned`/`.swap`/temp/orphan index files are left behind.
"""

from __future__ import annotations

import hashlib
import random
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from protocol.batch import check_crc, decode_records, read_header
from protocol.errors import OffsetOutOfRange, TidelogError
from storage.files import (
    CLEANED_SUFFIX,
    DELETED_SUFFIX,
    INDEX_SUFFIX,
    LOG_SUFFIX,
    SWAP_SUFFIX,
    TEMP_SUFFIX,
    TIME_INDEX_SUFFIX,
)
from tidelog.client import Client

# Header key under which test producers store each record's unique id.
ID_HEADER = "id"
# Random offsets and timestamps whose lookups are compared with the brute-force scan.
LOOKUP_SAMPLES = 60
# Bytes per fetch while reading a partition back (small enough to cross segments often).
READ_FETCH_BYTES = 256 * 1024


@dataclass(frozen=True, slots=True)
class Ack:
    """One acknowledged record, as the producer learnt it from the success response."""

    record_id: str
    topic: str
    partition: int
    offset: int
    value_sha: str
    acks: int
    key: bytes | None = None


def value_hash(value: bytes | None) -> str:
    return "nil" if value is None else hashlib.sha256(value).hexdigest()


@dataclass
class Ledger:
    """Thread-safe list of acknowledged records (written only after success responses)."""

    acks: list[Ack] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, entries: Iterable[Ack]) -> None:
        with self._lock:
            self.acks.extend(entries)

    def for_partition(self, topic: str, partition: int) -> list[Ack]:
        with self._lock:
            return [a for a in self.acks if a.topic == topic and a.partition == partition]

    def __len__(self) -> int:
        return len(self.acks)


@dataclass(frozen=True, slots=True)
class StoredRecord:
    offset: int
    timestamp: int
    key: bytes | None
    value_sha: str
    record_id: str | None


def _record_id(headers: tuple | list) -> str | None:
    for name, value in headers:
        if name == ID_HEADER and value is not None:
            return bytes(value).decode()
    return None


def decode_stream(buf: bytes, where: str, problems: list[str]) -> list[StoredRecord]:
    """Every record of back-to-back batches; CRC failures and torn batches are problems."""
    out: list[StoredRecord] = []
    pos = 0
    while pos < len(buf):
        try:
            header = check_crc(buf, pos)
            records = decode_records(buf, pos)
        except TidelogError as exc:
            problems.append(f"{where}: bad batch at byte {pos}: {exc}")
            break
        out.extend(
            StoredRecord(r.offset, r.timestamp, r.key, value_hash(r.value), _record_id(r.headers))
            for r in records
        )
        pos += header.size
    return out


def scan_partition_dir(directory: Path, problems: list[str]) -> list[StoredRecord]:
    """Brute force: read every segment file of a partition in base-offset order."""
    records: list[StoredRecord] = []
    for path in sorted(directory.glob(f"*{LOG_SUFFIX}")):
        data = path.read_bytes()
        # A fenced segment may hold damage on purpose; the scan stops there like recovery.
        records.extend(decode_stream(data, str(path), problems))
    return records


def leftover_files(data_dir: Path, *, allow_deleted: bool = True) -> list[str]:
    """Files a finished recovery or cleaning must not leave behind."""
    bad: list[str] = []
    for path in data_dir.rglob("*"):
        if any(part.endswith("-stray") for part in path.relative_to(data_dir).parts[:-1]):
            continue  # a quarantined directory is kept as found, for an operator
        name = path.name
        if name.endswith((CLEANED_SUFFIX, SWAP_SUFFIX, TEMP_SUFFIX)):
            bad.append(f"leftover transient file {path}")
        elif name.endswith(DELETED_SUFFIX) and not allow_deleted:
            bad.append(f"leftover .deleted file {path}")
        elif name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            stem = name.rsplit(".", 1)[0]
            if not (path.parent / f"{stem}{LOG_SUFFIX}").exists():
                bad.append(f"orphan index {path}")
    return bad


def fetch_all(client: Client, topic: str, partition: int, problems: list[str]) -> tuple:
    """(log_start_offset, high_watermark, records) read through the broker."""
    meta = client.list_offsets(topic, partition, "earliest")
    latest = client.list_offsets(topic, partition, "latest")
    start = meta.offset if meta else 0
    hwm = latest.offset if latest else 0
    records: list[StoredRecord] = []
    position = start
    where = f"{topic}-{partition} fetch"
    while position < hwm:
        try:
            result = client.fetch(topic, partition, position, max_bytes=READ_FETCH_BYTES)
        except OffsetOutOfRange:
            # Retention may run while the oracle reads (a starved verify outlasts the
            # quiet start): legitimate only if the log start really passed `position`.
            moved = client.list_offsets(topic, partition, "earliest")
            if moved is None or moved.offset <= position:
                raise
            start = position = moved.offset
            records = [r for r in records if r.offset >= start]
            continue
        batch = [r for r in decode_stream(result.records, where, problems) if r.offset >= position]
        if not batch:
            # Only compaction may leave an offset range with no batch behind it.
            headers_end = _next_offset_after(result.records)
            if headers_end is None or headers_end <= position:
                problems.append(f"{where}: no progress at offset {position} (hwm {hwm})")
                break
            position = headers_end
            continue
        records.extend(batch)
        position = batch[-1].offset + 1
        headers_end = _next_offset_after(result.records)
        if headers_end is not None and headers_end > position:
            position = headers_end
    return start, hwm, records


def _next_offset_after(buf: bytes) -> int | None:
    pos = 0
    end = None
    while pos + 57 <= len(buf):
        try:
            header = read_header(buf, pos)
        except TidelogError:
            break
        end = header.base_offset + header.last_offset_delta + 1
        pos += header.size
    return end


def verify(
    client: Client,
    data_dir: Path,
    ledger: Ledger,
    partitions: Mapping[str, int],
    *,
    compacted: frozenset[str] = frozenset(),
    require_acks_one: bool = True,
    seed: int = 0,
) -> list[str]:
    """Check every promise for `partitions` ({topic: count}); returns the violations."""
    # Leftovers first: right after a restart, before the cleaner's first run can start a file.
    problems = leftover_files(data_dir)
    rng = random.Random(seed)
    for topic, count in partitions.items():
        for partition in range(count):
            problems += _verify_partition(
                client,
                data_dir,
                ledger,
                topic,
                partition,
                compacted=topic in compacted,
                require_acks_one=require_acks_one,
                rng=rng,
            )
    return problems


def _verify_partition(
    client: Client,
    data_dir: Path,
    ledger: Ledger,
    topic: str,
    partition: int,
    *,
    compacted: bool,
    require_acks_one: bool,
    rng: random.Random,
) -> list[str]:
    where = f"{topic}-{partition}"
    problems: list[str] = []
    start, hwm, fetched = fetch_all(client, topic, partition, problems)
    by_offset = {r.offset: r for r in fetched}
    # Offsets strictly increasing; gaps only on compacted topics.
    previous = None
    for record in fetched:
        if previous is not None:
            if record.offset <= previous:
                problems.append(f"{where}: offset {record.offset} after {previous}")
            elif record.offset != previous + 1 and not compacted:
                problems.append(f"{where}: gap between {previous} and {record.offset}")
        previous = record.offset
    if fetched and not compacted and fetched[0].offset != start:
        problems.append(f"{where}: first record {fetched[0].offset} != log start {start}")
    if fetched and fetched[-1].offset >= hwm:
        problems.append(f"{where}: record {fetched[-1].offset} at or past hwm {hwm}")
    # No duplicates.
    seen: dict[str, int] = {}
    for record in fetched:
        if record.record_id is None:
            continue
        if record.record_id in seen:
            problems.append(
                f"{where}: id {record.record_id} at {seen[record.record_id]} and {record.offset}"
            )
        seen[record.record_id] = record.offset
    # Every acknowledged record at its offset with identical bytes.
    acks = ledger.for_partition(topic, partition)
    latest_by_key: dict[bytes | None, int] = {}
    for record in fetched:
        latest_by_key[record.key] = max(latest_by_key.get(record.key, -1), record.offset)
    for ack in acks:
        if ack.offset < start or (ack.acks == 1 and not require_acks_one):
            continue
        stored = by_offset.get(ack.offset)
        if stored is None:
            if compacted and latest_by_key.get(ack.key, -1) > ack.offset:
                continue  # superseded by a later record with the same key
            problems.append(
                f"{where}: acked {ack.record_id} (acks={ack.acks}) lost at {ack.offset}"
            )
            continue
        if stored.record_id != ack.record_id or stored.value_sha != ack.value_sha:
            problems.append(
                f"{where}: offset {ack.offset} holds {stored.record_id}, acked {ack.record_id}"
            )
    # The segment files agree with what fetch served. Retention and the cleaner may run
    # between the fetch and the scan, so the scan may only hold less, never other bytes.
    directory = data_dir / f"{topic}-{partition}"
    for record in scan_partition_dir(directory, problems):
        served = by_offset.get(record.offset)
        if served is not None and served.value_sha != record.value_sha:
            problems.append(f"{where}: offset {record.offset} differs between file and fetch")
        elif served is None and start <= record.offset < hwm and not compacted:
            problems.append(f"{where}: offset {record.offset} is in the files but was not served")
    problems += _check_lookups(client, topic, partition, fetched, rng, compacted=compacted)
    return problems


def _check_lookups(
    client: Client,
    topic: str,
    partition: int,
    records: list[StoredRecord],
    rng: random.Random,
    *,
    compacted: bool,
) -> list[str]:
    """offset_for_time and fetch-by-offset against a brute-force scan of `records`.

    On a compacted topic the cleaner may remove a sampled record after the scan, so
    there an answer may only be later than the scan's, never earlier.
    """
    where = f"{topic}-{partition}"
    problems: list[str] = []
    if not records:
        return problems
    for _ in range(LOOKUP_SAMPLES // 2):
        target = rng.choice(records)
        result = client.fetch(topic, partition, target.offset, max_bytes=1)
        got = decode_stream(result.records, where, problems)
        if not any(r.offset == target.offset for r in got):
            if compacted and got and got[0].offset > target.offset:
                continue
            problems.append(f"{where}: fetch({target.offset}) did not return that record")
    timestamps = [r.timestamp for r in records]
    low, high = min(timestamps) - 5, max(timestamps) + 5
    for _ in range(LOOKUP_SAMPLES // 2):
        ts = rng.randint(low, high)
        expected = next((r for r in records if r.timestamp >= ts), None)
        answer = client.offset_for_time(topic, partition, ts)
        got = None if answer is None or answer.offset is None else answer.offset
        want = None if expected is None else expected.offset
        if got != want and not (compacted and (got is None or want is None or got > want)):
            problems.append(f"{where}: offset_for_time({ts}) = {got}, brute force {want}")
    return problems
