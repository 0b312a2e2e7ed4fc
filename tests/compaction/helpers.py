"""Shared helpers for the cleaner tests: a log manager on a driven clock, and readers."""

from __future__ import annotations

import math
from pathlib import Path

from compaction.cleaner import Cleaner
from compaction.config import CleanerConfig
from compaction.manager import CleanerManager
from compaction.throttle import Throttler
from protocol.batch import KAFKA_LAYOUT, BatchHeader, Record, decode_records, encode_batch
from protocol.kafka import stored
from protocol.kafka.convert import tidelog_to_kafka
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.log import Log
from storage.manager import LogManager

START_MS = 1_700_000_000_000


class Clock:
    """A millisecond clock the test moves by hand."""

    def __init__(self, now_ms: int = START_MS) -> None:
        self.now_ms = now_ms

    def __call__(self) -> int:
        return self.now_ms

    def advance(self, ms: int) -> None:
        self.now_ms += ms


def open_manager(data_dir: Path, clock: Clock, io: FileIO | None = None) -> LogManager:
    manager = LogManager(data_dir, LogConfig(), clock_ms=clock, io=io or FileIO())
    manager.open()
    return manager


def make_cleaner(*, map_bytes: int = 1 << 20, **kw) -> Cleaner:
    """A cleaner; it reads and writes through each log's own FileIO."""
    config = CleanerConfig(dedupe_buffer_bytes=map_bytes, min_map_bytes=0, **kw)
    return Cleaner(config, Throttler(math.inf))


def make_cleaner_manager(
    logs: LogManager, clock: Clock, io: FileIO | None = None, backoff_ms: int = 1000
) -> CleanerManager:
    return CleanerManager(
        logs.data_dir, logs.all_logs, io=io or FileIO(), clock_ms=clock, backoff_ms=backoff_ms
    )


def append(log: Log, rows, ts_ms: int, *, kafka: bool = False, **kw) -> int:
    """Append (key, value) rows as one batch; returns its base offset. `kafka`: as a
    Kafka producer's v2 batch (leader epoch -1), stored in that layout."""
    batch = encode_batch([(k, v, None, ts_ms) for k, v in rows], **kw)
    if kafka:
        return log.append(kafka_batch(batch), layout=KAFKA_LAYOUT).base_offset
    return log.append(batch).base_offset


def kafka_batch(batch: bytes) -> bytes:
    """The Kafka v2 batch a Kafka producer sends for the records of Tidelog `batch`."""
    return tidelog_to_kafka(batch, partition_leader_epoch=-1)[0]


def batches_of(data: bytes) -> list[tuple[BatchHeader, list[Record]]]:
    """Each batch of `data` (either layout) with its records."""
    out = []
    for pos, header in stored.iter_any_headers(data):
        if stored.is_kafka(header):
            stored.check_stored_crc(data, pos, header)
            records = [
                Record(header.base_offset + d, header.base_timestamp + t, k, v, h)
                for d, t, k, v, h in stored.decode_stored(data, pos, header)
            ]
        else:
            records = decode_records(data, pos)
        out.append((header, records))
    return out


def read_all(log: Log, start: int | None = None) -> list[Record]:
    """Every record from the log start (or `start`) to the high watermark."""
    records: list[Record] = []
    offset = log.log_start_offset if start is None else start
    while offset < log.high_watermark:
        data = log.read(offset, 1 << 20).records
        if not data:
            break
        batches = batches_of(data)
        records += [r for _, batch in batches for r in batch if r.offset >= offset]
        offset = max(h.next_offset for h, _ in batches)
    return records


def latest_by_key(records: list[Record]) -> dict[bytes, tuple[int, bytes | None]]:
    """key -> (offset, value) of the last record per key."""
    out: dict[bytes, tuple[int, bytes | None]] = {}
    for r in records:
        if r.key is not None:
            out[r.key] = (r.offset, r.value)
    return out


def read_committed(
    batches: list[tuple[BatchHeader, list[Record]]], aborted: list[tuple[int, int]]
) -> list[Record]:
    """The records a read_committed Kafka consumer delivers from `batches` given the
    fetch's aborted list of (producer id, first offset) (CompletedFetch's algorithm:
    before each batch with a producer id, the aborted entries starting at or below its
    last offset mark their producers aborted; an ABORT marker clears its producer; a
    transactional batch of an aborted producer is skipped; markers are no records)."""
    pending = sorted(set(aborted), key=lambda e: e[1])
    aborted_now: set[int] = set()
    out: list[Record] = []
    for header, records in batches:
        if header.producer_id >= 0:
            while pending and pending[0][1] <= header.last_offset:
                aborted_now.add(pending.pop(0)[0])
            if header.attributes & 0x20:
                if records and records[0].key == b"\x00\x00\x00\x00":  # ABORT
                    aborted_now.discard(header.producer_id)
                continue
            if header.attributes & 0x10 and header.producer_id in aborted_now:
                continue
        out += records
    return out
