"""Offset-range planning: Kafka's splitting (minPartitions, maxRecordsPerPartition) and
micro-batch rate limit, plus our coalescing of many small ranges into fewer tasks.

Pure functions over plain data, so they are tested without Spark or a broker. Sizes are
offset counts; after compaction a range holds fewer records than its size (Kafka says the
same of KafkaOffsetRange.size), so sizes are estimates used only for balancing.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from protocol.remote_schema import SegmentObject, StoreInfo
from spark_connector.options import TopicPartition


@dataclass(frozen=True, slots=True)
class ColdSource:
    """Where a range below the local log start lives: the broker's bucket and the
    segment objects holding its offsets (docs/tiered-storage.md). A task given one reads
    the objects itself (spark_connector/remote_read.py)."""

    store: StoreInfo
    segments: tuple[SegmentObject, ...]
    # (producer id, first offset) of the aborted transactions meeting the segments'
    # offsets, for a read_committed task (kept whole by a split: a superset is harmless).
    aborted_transactions: tuple[tuple[int, int], ...] = ()

    def within(self, start: int, end: int) -> ColdSource:
        """Only the segments holding offsets in [start, end) (after a split)."""
        kept = tuple(s for s in self.segments if s.end_offset >= start and s.base_offset < end)
        return ColdSource(self.store, kept, self.aborted_transactions)


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets [start, end) of one partition.

    `late_start` / `late_end` mark bounds that came from earliest/latest: the executor
    re-binds them to the log start offset / high watermark it sees at read time, so
    retention between planning and reading is not data loss (Kafka's late binding).
    `start` and `end` then hold the planning-time estimates.
    """

    topic: str
    partition: int
    start: int
    end: int
    late_start: bool = False
    late_end: bool = False
    cold: ColdSource | None = None  # read from the bucket, not through the broker

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def size(self) -> int:
        return max(self.end - self.start, 0)


def _divide(rng: OffsetRange, parts: int) -> list[OffsetRange]:
    """Kafka's getDividedPartition: integer division, the last piece takes the remainder.

    Only the first piece keeps a late-bound start and only the last a late-bound end.
    """
    if parts <= 1:
        return [rng]
    pieces: list[OffsetRange] = []
    remaining, start = rng.size, rng.start
    for part in range(parts):
        this = remaining // (parts - part)
        remaining -= this
        end = min(start + this, rng.end)
        pieces.append(
            replace(
                rng,
                start=start,
                end=end,
                late_start=rng.late_start and part == 0,
                late_end=rng.late_end and part == parts - 1,
                cold=rng.cold.within(start, end) if rng.cold is not None else None,
            )
        )
        start = end
    return [p for p in pieces if p.size > 0]


def split_ranges(
    ranges: Sequence[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Kafka's KafkaOffsetRangeCalculator.getRanges.

    Empty ranges are dropped. maxRecordsPerPartition splits every range bigger than N into
    ceil(size / N) pieces. If minPartitions is larger than the number of ranges, large
    ranges share (minPartitions - #ranges left whole) pieces in proportion to size.
    """
    result = [r for r in ranges if r.size > 0]
    if max_records_per_partition is not None:
        result = [
            piece
            for r in result
            for piece in _divide(r, math.ceil(r.size / max_records_per_partition))
        ]
    if min_partitions is None or min_partitions <= len(result):
        return result
    total = sum(r.size for r in result)
    parts = {i: max(round(r.size / total * min_partitions), 1) for i, r in enumerate(result)}
    whole = [i for i, p in parts.items() if p == 1]
    split_total = total - sum(result[i].size for i in whole)
    split_min = max(min_partitions - len(whole), 1)
    out: list[OffsetRange] = []
    for i, r in enumerate(result):
        if i in whole:
            out.append(r)
        else:
            out.extend(_divide(r, max(round(r.size / split_total * split_min), 1)))
    return out


def coalesce_ranges(
    ranges: Sequence[OffsetRange], max_partitions: int | None
) -> list[tuple[OffsetRange, ...]]:
    """Pack ranges into at most `max_partitions` tasks of similar size (greedy largest-first).

    The Kafka source only splits; many tiny partitions would make as many tiny tasks.
    Within a task, ranges keep their (topic, partition, start) order.
    """
    if max_partitions is None or len(ranges) <= max_partitions:
        return [(r,) for r in ranges]
    bins: list[list[OffsetRange]] = [[] for _ in range(max_partitions)]
    loads = [0] * max_partitions
    for r in sorted(ranges, key=lambda r: (-r.size, r.topic, r.partition, r.start)):
        target = loads.index(min(loads))
        bins[target].append(r)
        loads[target] += r.size
    return [tuple(sorted(b, key=lambda r: (r.topic, r.partition, r.start))) for b in bins if b]


def rate_limit(
    limit: int, start: Mapping[TopicPartition, int], until: Mapping[TopicPartition, int]
) -> dict[TopicPartition, int]:
    """Kafka's maxOffsetsPerTrigger split: each partition gets limit * size / total offsets.

    The share is floored, except below 1 it is rounded up so small partitions are not
    starved (so the cap can be exceeded slightly, as in Kafka); never past `until`.
    Partitions missing from `start` start at their `until` (caller passes them resolved).
    """
    sizes = {
        tp: end - start[tp] for tp, end in until.items() if tp in start and end - start[tp] > 0
    }
    total = float(sum(sizes.values()))
    if total < 1:
        return dict(until)
    result: dict[TopicPartition, int] = {}
    for tp, end in until.items():
        if tp not in sizes:
            result[tp] = end
            continue
        prorate = limit * (sizes[tp] / total)
        share = math.ceil(prorate) if prorate < 1 else math.floor(prorate)
        result[tp] = min(end, start[tp] + share)
    return result


def total_offsets(start: Mapping[TopicPartition, int], end: Mapping[TopicPartition, int]) -> int:
    """Offsets between two offset maps (partitions absent from `start` count from 0)."""
    return sum(max(e - start.get(tp, 0), 0) for tp, e in end.items())
