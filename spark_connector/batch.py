"""The batch reader: plan offset ranges on the driver, read them on the executors.

`partitions()` runs at every planning (each action), in a worker on the driver; its
mutations are not seen by `read()`, so everything a task needs travels in its
`TidelogPartition`. Filter pushdown lives in a subclass, returned only when pushdown
is enabled (Spark fails every read of a reader that defines `pushFilters` otherwise).
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from types import FrameType

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, Filter, InputPartition

from spark_connector.cold_plan import plan_cold
from spark_connector.offsets import (
    PartitionInfo,
    describe_partitions,
    open_client,
    resolve_limit,
    with_retries,
)
from spark_connector.options import EARLIEST, LATEST, OptionError, SourceOptions
from spark_connector.planning import OffsetRange, coalesce_ranges, split_ranges
from spark_connector.pushdown import NO_BOUNDS, Bounds, push_filters, ts_lower_ms, ts_upper_ms
from spark_connector.reading import read_ranges
from tidelog.client import Client

log = logging.getLogger("spark_connector")

# The worker module Spark runs for planning with filter pushdown enabled.
_PUSHDOWN_WORKER_FILE = "data_source_pushdown_filters.py"


class TidelogPartition(InputPartition):
    """One Spark task: one or more offset ranges (several when coalesced). Plain, picklable."""

    def __init__(self, index: int, ranges: tuple[OffsetRange, ...]) -> None:
        super().__init__(index)
        self.ranges = ranges

    def __repr__(self) -> str:
        spans = ", ".join(
            f"{r.topic}-{r.partition}[{r.start},{r.end}){' cold' if r.cold else ''}"
            for r in self.ranges
        )
        return f"TidelogPartition({self.value}: {spans})"


def pushdown_planning_in_progress() -> bool:
    """Whether Spark is planning with filter pushdown enabled (its pushdown worker calls us).

    The planning worker cannot read the session conf, but Spark runs a dedicated worker
    module when `spark.sql.python.filterPushdown.enabled` is true; seeing it on the stack
    lets `pushdown=auto` follow the conf.
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_PUSHDOWN_WORKER_FILE):
            return True
        frame = frame.f_back
    return False


def plan_ranges(
    client: Client, opts: SourceOptions, bounds: Bounds = NO_BOUNDS
) -> list[OffsetRange]:
    """Resolved (or late-bound) ranges of every partition, narrowed by pushed filters."""
    infos = with_retries(
        opts, lambda: describe_partitions(client, opts.subscription, committed=opts.read_committed)
    )
    infos = {tp: i for tp, i in infos.items() if bounds.allows(*tp)}
    starts = resolve_limit(client, opts.starting, infos, is_start=True)
    ends = resolve_limit(client, opts.ending, infos, is_start=False)
    ranges = []
    for tp, info in infos.items():
        rng = _narrow(client, _range_of(info, starts[tp], ends[tp]), info, bounds)
        if rng is not None:
            ranges.append(rng)
    return ranges


def _range_of(info: PartitionInfo, start: int, end: int) -> OffsetRange:
    if start == LATEST:  # a timestamp start with no match and strategy "latest"
        start = info.high_watermark
    late_start, late_end = start == EARLIEST, end == LATEST
    start_est = info.log_start_offset if late_start else start
    end_est = info.high_watermark if late_end else end
    if not late_start and not late_end and start > end:
        raise OptionError(
            f"The start offset {start} is greater than the end offset {end} for topic partition "
            f"{info.topic}-{info.partition}"
        )
    return OffsetRange(info.topic, info.partition, start_est, end_est, late_start, late_end)


def _narrow(
    client: Client, rng: OffsetRange, info: PartitionInfo, bounds: Bounds
) -> OffsetRange | None:
    """Apply offset bounds and timestamp seeks; None when nothing can match."""
    start, end, late_start, late_end = rng.start, rng.end, rng.late_start, rng.late_end
    if bounds.offset_lower is not None and bounds.offset_lower > start:
        start, late_start = bounds.offset_lower, False
    if bounds.offset_upper is not None and bounds.offset_upper < end:
        end, late_end = bounds.offset_upper, False
    lower_ms = ts_lower_ms(bounds)
    if lower_ms is not None:
        found = client.offset_for_time(rng.topic, rng.partition, lower_ms)
        if found is None:
            return None  # no record at or after the lower bound
        if found.offset > start:
            start, late_start = found.offset, False
    upper_ms = ts_upper_ms(bounds)
    if upper_ms is not None and info.log_append_time:
        # LogAppendTime is monotonic, so the first offset at or past the bound ends the range.
        found = client.offset_for_time(rng.topic, rng.partition, upper_ms)
        if found is not None and found.offset < end:
            end, late_end = found.offset, False
    if start >= end and not late_end:
        return None
    return OffsetRange(rng.topic, rng.partition, start, end, late_start, late_end)


def build_partitions(opts: SourceOptions, ranges: Sequence[OffsetRange]) -> list[TidelogPartition]:
    """Split large ranges (Kafka's rules), then coalesce into at most maxPartitions tasks."""
    if opts.min_partitions is not None or opts.max_records_per_partition is not None:
        ranges = split_ranges(
            ranges,
            min_partitions=opts.min_partitions,
            max_records_per_partition=opts.max_records_per_partition,
        )
    else:
        # Kafka keeps empty ranges out; a late-bound end may grow, so keep those.
        ranges = [r for r in ranges if r.size > 0 or r.late_end]
    groups = coalesce_ranges(ranges, opts.max_partitions)
    return [TidelogPartition(i, group) for i, group in enumerate(groups)]


class TidelogBatchReader(DataSourceReader):
    """Batch reads without pushdown (the default reader class)."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.bounds = NO_BOUNDS

    def partitions(self) -> Sequence[InputPartition]:
        for warning in self.opts.warnings:
            log.warning(warning)
        with open_client(self.opts) as client:
            ranges = plan_cold(client, self.opts, plan_ranges(client, self.opts, self.bounds))
        parts = build_partitions(self.opts, ranges)
        log.info("tidelog batch plan: %s", parts)
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        ranges = getattr(partition, "ranges", ())  # Spark turns [] into one partition of None
        yield from read_ranges(self.opts, ranges, self.bounds)


class TidelogPushdownReader(TidelogBatchReader):
    """Batch reads that claim topic/partition/offset/timestamp filters (see pushdown.py)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds, rejected = push_filters(filters)
        return rejected
