"""The recopy rules: which records of a batch survive a cleaning, and the rewritten batch.

Kafka's `LogCleaner.shouldRetainRecord` and `MemoryRecords.filterTo`, for one batch:

1. a record past the mapped range (offset >= the map's end offset) is kept;
2. a record without a key is dropped;
3. otherwise it is kept iff it is the latest for its key (offset >= the map's offset
   for the key; a key absent from the map was not updated in the dirty section), and
   it has a value or is a tombstone whose delete horizon has not passed.

A tombstone's horizon is recorded in its batch: the first cleaning that keeps it
rewrites the batch with attribute bit 6 set and `base_timestamp` = cleaning time +
`delete.retention.ms`; a cleaning at or after that time drops it.

A surviving batch keeps its base offset, last offset delta (so offsets never change
and the producer fields stay meaningful), producer id/epoch/sequence, compression and
timestamp type, and its layout: a Kafka v2 batch is rebuilt as a Kafka v2 batch with
its partition leader epoch (`MemoryRecords.buildRetainedRecordsInto`), a Tidelog
batch as a Tidelog batch. A batch whose records all survive and needs no horizon is
copied byte for byte; a batch with no survivors is dropped.
"""

from __future__ import annotations

from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import add, ge, itemgetter
from typing import Any

from protocol.batch import (
    DELETE_HORIZON_MASK,
    BatchHeader,
    TimestampType,
    build_batch,
)
from protocol.kafka import stored

__all__ = [
    "UNKEYED",
    "BatchOutcome",
    "emptied",
    "recopy_batch",
    "recopy_survivors",
    "tombstones_retained",
    "with_delete_horizon",
]

# Fields of a raw record tuple (protocol.batch: [offset_delta, ts_delta, key, value, headers]).
_DELTA = itemgetter(0)
_KEY = itemgetter(2)
_VALUE = itemgetter(3)
# The "latest offset" of a record without a key: above every offset, so it never survives.
UNKEYED = 2**63


def tombstones_retained(header: BatchHeader, now_ms: int) -> bool:
    """True while this batch's tombstones must be kept (no horizon yet, or not reached)."""
    return not header.has_delete_horizon or now_ms < header.base_timestamp


@dataclass(frozen=True, slots=True)
class BatchOutcome:
    """The result of recopying one batch.

    `data` is the batch to write (the original bytes when nothing changed), or None
    when no record survives.
    """

    data: bytes | memoryview | None
    records_kept: int
    records_removed: int
    rewritten: bool


def recopy_batch(
    batch: bytes | memoryview,
    header: BatchHeader,
    records: Sequence[tuple[Any, ...]],
    latest: Mapping[bytes | None, int],
    *,
    map_end_offset: int,
    now_ms: int,
    delete_retention_ms: int,
) -> BatchOutcome:
    """Apply the retention rules to one whole batch (`batch` holds exactly its bytes).

    `records` are the batch's raw record tuples (`protocol.batch.decode_payload`);
    `latest` maps every key of the batch to its latest offset in the offset map (-1:
    the key was not updated in the mapped range) and None to `UNKEYED`; a key missing
    from it raises KeyError (nothing is written: the caller resolves it and retries).
    """
    base = header.base_offset
    keep_tombstones = tombstones_retained(header, now_ms)
    if base + header.last_offset_delta < map_end_offset and None not in map(_VALUE, records):
        # The common case, all in C: keep iff offset >= latest[key]. `latest` must hold
        # every key of the batch; the unkeyed "key" None maps to +inf, so it is dropped.
        offsets = map(add, map(_DELTA, records), repeat(base))
        keep = list(map(ge, offsets, map(latest.__getitem__, map(_KEY, records))))
    else:
        keep = [
            base + delta >= map_end_offset
            or (
                base + delta >= latest[key]
                and key is not None
                and (value is not None or keep_tombstones)
            )
            for delta, _, key, value, _ in records
        ]
    return _outcome(batch, header, records, keep, now_ms + delete_retention_ms)


def recopy_survivors(
    batch: bytes | memoryview,
    header: BatchHeader,
    records: Sequence[tuple[Any, ...]],
    surviving: Container[int],
    *,
    map_end_offset: int,
    now_ms: int,
    delete_retention_ms: int,
) -> BatchOutcome:
    """`recopy_batch` for a batch at or past the first dirty offset, without key lookups.

    Every record of such a batch below `map_end_offset` was mapped, so it is the
    latest of its key iff its offset is one of the map's offsets: `surviving` holds
    those of this batch (`OffsetMap.take_sorted_offsets`). An unkeyed record was not
    mapped, so its offset is not there and it is dropped, as rule 2 says.
    """
    base = header.base_offset
    keep_tombstones = tombstones_retained(header, now_ms)
    keep = [
        base + delta >= map_end_offset
        or (base + delta in surviving and (value is not None or keep_tombstones))
        for delta, _, _, value, _ in records
    ]
    return _outcome(batch, header, records, keep, now_ms + delete_retention_ms)


def _outcome(
    batch: bytes | memoryview,
    header: BatchHeader,
    records: Sequence[tuple[Any, ...]],
    keep: list[bool],
    horizon_ms: int,
) -> BatchOutcome:
    """The batch to write given which records survive: dropped, copied, or rebuilt."""
    kept = keep.count(True)
    removed = len(keep) - kept
    if kept == 0:
        return BatchOutcome(None, 0, removed, rewritten=False)
    survivors = [r for r, k in zip(records, keep, strict=True) if k]
    has_tombstone = any(r[3] is None for r in survivors)
    set_horizon = has_tombstone and not header.has_delete_horizon
    if removed == 0 and not set_horizon:
        return BatchOutcome(bytes(batch), kept, 0, rewritten=False)
    return BatchOutcome(
        _rebuild(batch, header, survivors, set_horizon, horizon_ms),
        kept,
        removed,
        rewritten=True,
    )


def emptied(batch: bytes | memoryview, header: BatchHeader) -> bytes:
    """`batch` with no records left: its header alone, offsets, producer fields and
    timestamps kept (Kafka's `BatchRetention.RETAIN_EMPTY` for a live producer's newest
    batch, so a producer state rebuilt from the log still finds its last sequence)."""
    return _rebuild(batch, header, [], False, 0)


def with_delete_horizon(
    batch: bytes | memoryview, header: BatchHeader, records: Sequence[tuple[Any, ...]],
    horizon_ms: int,
) -> bytes:  # fmt: skip
    """`batch` rebuilt whole with its delete horizon set (a transaction marker that may
    go once the horizon passes: compaction.markers)."""
    return _rebuild(batch, header, list(records), True, horizon_ms)


def _rebuild(
    batch: bytes | memoryview,
    header: BatchHeader,
    survivors: list[tuple[Any, ...]],
    set_horizon: bool,
    horizon_ms: int,
) -> bytes:
    """A new batch of `survivors` (raw record tuples) keeping the header's identity
    and the layout of `batch`, the original."""
    entries = [
        (delta, header.base_timestamp + ts_delta, key, value, hdrs)
        for delta, ts_delta, key, value, hdrs in survivors
    ]
    attributes = header.attributes
    if set_horizon:
        attributes |= DELETE_HORIZON_MASK
        base_timestamp = horizon_ms
    elif header.has_delete_horizon or not entries:
        base_timestamp = header.base_timestamp
    else:
        base_timestamp = entries[0][1]
    if header.timestamp_type == TimestampType.LOG_APPEND_TIME or not entries:
        max_timestamp = header.max_timestamp
    else:
        max_timestamp = max(e[1] for e in entries)
    if stored.is_kafka(header):
        return stored.build_v2_batch(
            entries,
            base_offset=header.base_offset,
            base_timestamp=base_timestamp,
            attributes=attributes,
            last_offset_delta=header.last_offset_delta,
            max_timestamp=max_timestamp,
            producer_id=header.producer_id,
            producer_epoch=header.producer_epoch,
            base_sequence=header.base_sequence,
            partition_leader_epoch=stored.leader_epoch_of(batch),
        )
    return build_batch(
        entries,
        base_offset=header.base_offset,
        base_timestamp=base_timestamp,
        attributes=attributes,
        last_offset_delta=header.last_offset_delta,
        max_timestamp=max_timestamp,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
    )
