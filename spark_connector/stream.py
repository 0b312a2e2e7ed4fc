"""The streaming reader: Kafka's micro-batch semantics over the Python stream API.

Runs in one long-lived Python process per query on the driver (state persists across
triggers); `read()` runs on executors from a separately pickled copy, so tasks get all
they need in their partition. Offsets are `{"topic": {"partition": next_offset}}` with
string partition keys, exactly what survives Spark's JSON round trip.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxBytes,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from spark_connector.batch import build_partitions
from spark_connector.offsets import (
    PartitionInfo,
    describe_partitions,
    open_client,
    resolve_limit,
    with_retries,
)
from spark_connector.options import EARLIEST, LATEST, SourceOptions, TopicPartition
from spark_connector.planning import OffsetRange, rate_limit, total_offsets
from spark_connector.reading import ReadStats, read_ranges, report_data_loss
from tidelog.client import Client

log = logging.getLogger("spark_connector")

OffsetMap = dict[TopicPartition, int]
# Offsets as Spark checkpoints them (JSON): {topic: {partition as text: offset}}.
JsonOffsets = dict[str, dict[str, int]]


def to_json_offsets(offsets: OffsetMap) -> JsonOffsets:
    """{"topic": {"partition": offset}} with string keys (Spark's JSON round trip)."""
    result: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in sorted(offsets.items()):
        result.setdefault(topic, {})[str(partition)] = offset
    return result


def from_json_offsets(offsets: JsonOffsets) -> OffsetMap:
    return {(t, int(p)): int(o) for t, per in offsets.items() for p, o in per.items()}


class TidelogStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the subscribed partitions with Kafka's read limits."""

    def __init__(self, opts: SourceOptions, clock: Callable[[], float] = time.monotonic) -> None:
        self.opts = opts
        self._clock = clock
        self._client: Client | None = None
        self._initial: OffsetMap | None = None
        self._latest: OffsetMap = {}
        self._infos: dict[TopicPartition, PartitionInfo] = {}
        self._available_now_target: OffsetMap | None = None
        self._last_trigger = clock()

    # -- driver-side broker access -------------------------------------------------------------

    def _broker(self) -> Client:
        if self._client is None:
            self._client = open_client(self.opts)
        return self._client

    def _describe(self) -> dict[TopicPartition, PartitionInfo]:
        self._infos = with_retries(
            self.opts,
            lambda: describe_partitions(
                self._broker(), self.opts.subscription, committed=self.opts.read_committed
            ),
        )
        return self._infos

    def _resolved(self, offsets: dict[TopicPartition, int]) -> OffsetMap:
        infos = self._infos
        return {
            tp: infos[tp].log_start_offset
            if off == EARLIEST
            else infos[tp].high_watermark
            if off == LATEST
            else off
            for tp, off in offsets.items()
        }

    # -- the stream API --------------------------------------------------------------------

    def initialOffset(self) -> JsonOffsets:
        """Resolved once per process and cached: Spark calls it more than once."""
        if self._initial is None:
            infos = self._describe()
            starts = resolve_limit(self._broker(), self.opts.starting, infos, is_start=True)
            self._initial = self._resolved(starts)
            log.warning("tidelog stream initial offsets: %s", to_json_offsets(self._initial))
        return to_json_offsets(self._initial)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.max_bytes_per_trigger is not None:
            return ReadMaxBytes(self.opts.max_bytes_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        infos = self._describe()
        self._available_now_target = {tp: i.high_watermark for tp, i in infos.items()}

    def latestOffset(self, start: JsonOffsets, limit: ReadLimit) -> JsonOffsets:
        begin = from_json_offsets(start)
        infos = self._describe()
        latest = {tp: i.high_watermark for tp, i in infos.items()}
        self._latest = latest
        until = dict(latest)
        if self._available_now_target is not None:
            until = {
                tp: min(off, self._available_now_target.get(tp, begin.get(tp, off)))
                for tp, off in until.items()
            }
        # New partitions start at earliest (Kafka); resolve them for the limit arithmetic.
        origin = {tp: begin.get(tp, infos[tp].log_start_offset) for tp in until}
        if not isinstance(limit, ReadAllAvailable):
            if self._too_few(origin, until):
                return start
            until = self._apply_limits(origin, until, limit)
        self._last_trigger = self._clock()
        # A partition in `begin` but gone from `until` was deleted: partitions() reports it.
        return to_json_offsets(until)

    def _too_few(self, origin: OffsetMap, until: OffsetMap) -> bool:
        """minOffsetsPerTrigger: wait for enough offsets, unless maxTriggerDelay has passed."""
        minimum = self.opts.min_offsets_per_trigger
        if minimum is None or self._available_now_target is not None:
            return False
        available = total_offsets(origin, until)
        waited_ms = (self._clock() - self._last_trigger) * 1000
        return available < minimum and waited_ms < self.opts.max_trigger_delay_ms

    def _apply_limits(self, origin: OffsetMap, until: OffsetMap, limit: ReadLimit) -> OffsetMap:
        max_rows = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        max_bytes = limit.max_bytes if isinstance(limit, ReadMaxBytes) else None
        max_rows = max_rows if max_rows is not None else self.opts.max_offsets_per_trigger
        max_bytes = max_bytes if max_bytes is not None else self.opts.max_bytes_per_trigger
        if max_rows is not None:
            until = rate_limit(max_rows, origin, until)
        if max_bytes is not None:
            until = rate_limit(self._bytes_to_offsets(max_bytes, origin, until), origin, until)
        return until

    def _bytes_to_offsets(self, max_bytes: int, origin: OffsetMap, until: OffsetMap) -> int:
        """An offset budget for a byte budget, from each partition's average stored bytes."""
        backlog_bytes = sum(
            (until[tp] - origin[tp]) * self._infos[tp].bytes_per_offset
            for tp in until
            if tp in self._infos and until[tp] > origin[tp]
        )
        backlog = total_offsets(origin, until)
        if backlog_bytes <= 0 or backlog == 0:
            return max(backlog, 1)
        return max(int(max_bytes * backlog / backlog_bytes), 1)

    def reportLatestOffset(self) -> JsonOffsets | None:
        """The high watermarks seen at the last trigger: offsets behind = latest - end."""
        return to_json_offsets(self._latest) if self._latest else None

    def partitions(self, start: JsonOffsets, end: JsonOffsets) -> Sequence[InputPartition]:
        begin, until = from_json_offsets(start), from_json_offsets(end)
        infos = self._infos or self._describe()
        stats = ReadStats()
        for tp in sorted(set(begin) - set(until)):
            report_data_loss(
                self.opts,
                f"{tp[0]}-{tp[1]} is gone: it was read up to offset {begin[tp]}",
                stats,
                0,
            )
        ranges: list[OffsetRange] = []
        for tp, stop in sorted(until.items()):
            first = begin.get(tp)
            if first is None:
                low = infos[tp].log_start_offset if tp in infos else 0
                if low != 0:
                    report_data_loss(
                        self.opts,
                        f"Added partition {tp[0]}-{tp[1]} starts from {low} instead of 0: "
                        f"offsets [0, {low}) were lost",
                        stats,
                        low,
                    )
                first = low
            if stop < first:
                report_data_loss(
                    self.opts,
                    f"Partition {tp[0]}-{tp[1]}'s offset was changed from {first} to {stop}, "
                    "some data may have been missed",
                    stats,
                    0,
                )
                continue
            ranges.append(OffsetRange(tp[0], tp[1], first, stop))
        return build_partitions(self.opts, ranges)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        yield from read_ranges(self.opts, getattr(partition, "ranges", ()))

    def commit(self, end: JsonOffsets) -> None:
        """Nothing to commit: like the Kafka source, progress lives in Spark's checkpoint."""

    def stop(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
