"""Executor side: read the offset ranges of one task from the broker as Arrow batches.

Shared by the batch and the streaming reader. Runs in Spark's Python workers, so it
opens its own blocking connection per task and closes it when the task ends. Data
loss (offsets below the log start offset, or never reachable) fails the task, or with
failOnDataLoss=false is logged with the exact lost range and counted.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from protocol import calls
from protocol.calls import FetchResult
from protocol.errors import OffsetOutOfRange, TidelogError
from spark_connector.arrow_convert import (
    Selection,
    select_batches,
    selection_to_arrow,
    split_selection,
)
from spark_connector.local_read import LocalFiles, local_reads_wanted
from spark_connector.options import SourceOptions
from spark_connector.planning import OffsetRange
from spark_connector.pushdown import NO_BOUNDS, Bounds
from spark_connector.remote_read import (
    RemoteObjectGone,
    SegmentObjects,
    bucket_client,
    segments_for,
)
from spark_connector.task_client import TaskClient
from spark_connector.worker_gc import freeze_long_lived_objects

log = logging.getLogger("spark_connector")

_TS_TYPE = pa.timestamp("us", tz="UTC")

INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in tidelog any more; either "
    "the data was aged out by retention or the topic may have been deleted before all the data "
    "in the topic was processed. If you don't want your query to fail on such cases, set the "
    'source option "failOnDataLoss" to "false".'
)


class DataLossError(RuntimeError):
    """Offsets a query needed are gone (failOnDataLoss=true)."""


@dataclass
class ReadStats:
    """What one task read; `lost_offsets` counts offsets skipped with failOnDataLoss=false."""

    rows: int = 0
    fetches: int = 0
    fetched_bytes: int = 0
    lost_offsets: int = 0
    local_reads: int = 0  # fetch answers read from the broker's segment files
    local_fallbacks: int = 0  # local answers that could not be used (fetched again)
    remote_gets: int = 0  # GETs of segment objects from the bucket (cold ranges)
    remote_bytes: int = 0
    remote_fallbacks: int = 0  # cold ranges finished through the broker instead


def report_data_loss(opts: SourceOptions, message: str, stats: ReadStats, lost: int) -> None:
    """Fail, or log and count, naming the lost range (Kafka's reportDataLoss)."""
    if opts.fail_on_data_loss:
        raise DataLossError(f"{message}. {INSTRUCTION_FOR_FAIL_ON_DATA_LOSS_TRUE}")
    stats.lost_offsets += lost
    log.warning("%s; skipped %d offsets (failOnDataLoss=false)", message, lost)


def open_task_client(opts: SourceOptions) -> TaskClient:
    """The task's connection to the first bootstrap server (Tidelog is a single broker)."""
    server = opts.bootstrap_servers.split(",")[0].strip()
    return TaskClient(
        server,
        client_id=opts.client_id,
        request_timeout_ms=opts.request_timeout_ms,
        security=opts.security,
    )


def _watermarks(
    client: TaskClient, topic: str, partition: int, committed: bool = False
) -> tuple[int, int]:
    """(log start offset, high watermark) now; for a read_committed task the last
    stable offset instead of the high watermark (what it can read)."""
    earliest = client.list_offsets(topic, partition, "earliest")
    latest = client.list_offsets(topic, partition, "last_stable" if committed else "latest")
    low = earliest.offset if earliest is not None else 0
    high = latest.offset if latest is not None else low
    return low, high


def _timestamp_mask(batch: pa.RecordBatch, bounds: Bounds) -> pa.RecordBatch:
    """Row-wise re-check of claimed timestamp bounds (CreateTime need not be monotonic)."""
    ts = batch.column(5)
    mask = None
    if bounds.ts_lower_us is not None:
        mask = pc.greater_equal(ts, pa.scalar(bounds.ts_lower_us, _TS_TYPE))
    if bounds.ts_upper_us is not None:
        upper = pc.less(ts, pa.scalar(bounds.ts_upper_us, _TS_TYPE))
        mask = upper if mask is None else pc.and_(mask, upper)
    return batch.filter(mask)


def read_ranges(
    opts: SourceOptions,
    ranges: tuple[OffsetRange, ...],
    bounds: Bounds = NO_BOUNDS,
    stats: ReadStats | None = None,
) -> Iterator[pa.RecordBatch]:
    """Every row of `ranges`, in order, as non-empty Arrow batches; one connection per task."""
    stats = stats if stats is not None else ReadStats()
    freeze_long_lived_objects()  # Spark collects after every task: keep that cheap
    client = open_task_client(opts)
    local = LocalFiles() if local_reads_wanted(opts.local_reads, opts.bootstrap_servers) else None
    buckets = _Buckets(opts)
    try:
        for rng in ranges:
            if rng.cold is not None:
                yield from _read_cold(client, buckets, opts, rng, bounds, stats, local)
            else:
                yield from _read_range(client, opts, rng, bounds, stats, local)
    finally:
        client.close()
        buckets.close(stats)
        if local is not None:
            stats.local_reads, stats.local_fallbacks = local.reads, local.failures
            local.close()
        if stats.lost_offsets:
            log.warning("task skipped %d lost offsets in total", stats.lost_offsets)


class _Buckets:
    """The task's bucket clients, one per store, opened on first use."""

    def __init__(self, opts: SourceOptions) -> None:
        self.opts = opts
        self.open: dict[object, SegmentObjects] = {}

    def objects(self, rng: OffsetRange) -> SegmentObjects:
        assert rng.cold is not None
        store = rng.cold.store
        found = self.open.get(store)
        if found is None:
            client = bucket_client(self.opts.s3, store)
            found = self.open[store] = SegmentObjects(client, store.bucket)
        return found

    def close(self, stats: ReadStats) -> None:
        for objects in self.open.values():
            stats.remote_gets += objects.gets
            stats.remote_bytes += objects.bytes_read
            objects.close()
        self.open.clear()


def _read_cold(
    client: TaskClient,
    buckets: _Buckets,
    opts: SourceOptions,
    rng: OffsetRange,
    bounds: Bounds,
    stats: ReadStats,
    local: LocalFiles | None,
) -> Iterator[pa.RecordBatch]:
    """A range below the local log start, from the segment objects in the bucket; what
    they cannot give (an object deleted since planning, a gap) is read through the
    broker, which reports lost offsets as for any range."""
    assert rng.cold is not None
    pos, end = _bind(client, rng, bounds, opts)
    objects = buckets.objects(rng)
    # read_committed: the broker listed the range's aborted transactions with its objects.
    aborted = rng.cold.aborted_transactions if opts.read_committed else None
    try:
        for segment in segments_for(rng.cold.segments, pos, end):
            if segment.base_offset > pos:
                break  # not in the objects named: ask the broker
            for buf in objects.chunks(segment, pos, end):
                stats.fetches += 1
                stats.fetched_bytes += len(buf)
                selection = select_batches(buf, pos, end, aborted)
                yield from _convert(buf, selection, rng, opts, bounds, stats)
                pos = max(pos, selection.next_offset)
            pos = max(pos, min(segment.end_offset + 1, end))
            if pos >= end:
                return
    except RemoteObjectGone as exc:
        log.info("%s; reading offsets [%d, %d) through the broker", exc, pos, end)
    if pos < end:
        stats.remote_fallbacks += 1
        rest = OffsetRange(rng.topic, rng.partition, pos, end)
        yield from _read_range(client, opts, rest, bounds, stats, local)


def _convert(
    records: memoryview | bytes,
    selection: Selection,
    rng: OffsetRange,
    opts: SourceOptions,
    bounds: Bounds,
    stats: ReadStats,
) -> Iterator[pa.RecordBatch]:
    """The rows of the selected batches of `records` (a fetch answer, or a chunk of a
    segment object: one conversion for both), re-checked against timestamp bounds."""
    for chunk in split_selection(selection):
        converted = selection_to_arrow(
            records,
            chunk,
            topic=rng.topic,
            partition=rng.partition,
            include_headers=opts.include_headers,
        )
        if converted.batch is not None:
            batch = converted.batch
            if bounds.has_timestamp:
                batch = _timestamp_mask(batch, bounds)
            if batch.num_rows:
                stats.rows += batch.num_rows
                yield batch


def _bind(
    client: TaskClient, rng: OffsetRange, bounds: Bounds, opts: SourceOptions
) -> tuple[int, int]:
    """Late-bind earliest/latest now, then apply claimed offset bounds."""
    start, end = rng.start, rng.end
    if rng.late_start or rng.late_end:
        low, high = _watermarks(client, rng.topic, rng.partition, opts.read_committed)
        start = low if rng.late_start else start
        end = high if rng.late_end else end
    if bounds.offset_lower is not None:
        start = max(start, bounds.offset_lower)
    if bounds.offset_upper is not None:
        end = min(end, bounds.offset_upper)
    return start, end


class _Fetcher:
    """One partition's fetches, pipelined: the next request is on the wire while the
    current answer is converted, so the broker and the executor work at the same time."""

    def __init__(
        self,
        client: TaskClient,
        opts: SourceOptions,
        topic: str,
        partition: int,
        local: LocalFiles | None = None,
    ) -> None:
        self.client, self.opts = client, opts
        self.topic, self.partition = topic, partition
        self.local = local
        self.pending: tuple[int, calls.Call[FetchResult]] | None = None

    def send(self, offset: int, max_wait_ms: int = 0, *, local_read: bool | None = None) -> None:
        if local_read is None:
            local_read = self.local is not None and self.local.enabled
        call = calls.fetch(
            self.topic,
            self.partition,
            offset,
            max_bytes=self.opts.fetch_max_bytes,
            max_wait_ms=max_wait_ms,
            local_read=local_read,
            kafka_batches=True,  # both layouts convert (arrow_convert): no broker conversion
            read_committed=self.opts.read_committed,
        )
        self.client.send(call.api, call.body)
        self.pending = (offset, call)

    def receive(self, offset: int, max_wait_ms: int = 0) -> tuple[FetchResult, memoryview | bytes]:
        """The answer for `offset` (sending the request now unless it is already out) and
        its records: from the answer, or read from the segment file for a local answer."""
        result = self._receive(offset, max_wait_ms)
        if result.local is None:
            return result, result.records
        assert self.local is not None
        records = self.local.read(result.local, offset)
        if records is not None:
            return result, records
        # The file could not be used: the same offset over the wire.
        self.send(offset, max_wait_ms, local_read=False)
        result = self._receive(offset, max_wait_ms)
        return result, result.records

    def _receive(self, offset: int, max_wait_ms: int) -> FetchResult:
        if self.pending is not None and self.pending[0] != offset:
            self.drain()
        if self.pending is None:
            self.send(offset, max_wait_ms)
        assert self.pending is not None
        call = self.pending[1]
        self.pending = None
        reply = self.client.receive(timeout_ms=self.client.request_timeout_ms + call.wait_ms)
        return call.extract(reply.result())

    def drain(self) -> None:
        """Read and drop an answer nobody needs any more (keeps the stream in step)."""
        if self.pending is not None:
            self.pending = None
            try:
                self.client.receive().result()
            except TidelogError:
                pass


def _read_range(
    client: TaskClient,
    opts: SourceOptions,
    rng: OffsetRange,
    bounds: Bounds,
    stats: ReadStats,
    local: LocalFiles | None = None,
) -> Iterator[pa.RecordBatch]:
    topic, partition = rng.topic, rng.partition
    pos, end = _bind(client, rng, bounds, opts)
    fetcher = _Fetcher(client, opts, topic, partition, local)
    waited = False
    try:
        while pos < end:
            try:
                result, records = fetcher.receive(pos, opts.poll_timeout_ms if waited else 0)
            except OffsetOutOfRange:
                low, high = _watermarks(client, topic, partition, opts.read_committed)
                if pos < low:
                    lost_end = min(low, end)
                    report_data_loss(
                        opts,
                        f"Offsets [{pos}, {lost_end}) of {topic}-{partition} are no longer "
                        f"available: the log start offset is now {low}",
                        stats,
                        lost_end - pos,
                    )
                    pos = lost_end
                    continue
                report_data_loss(
                    opts,
                    f"Cannot read offsets [{pos}, {end}) of {topic}-{partition}: the high "
                    f"watermark is {high}",
                    stats,
                    end - pos,
                )
                return
            stats.fetches += 1
            stats.fetched_bytes += len(records)
            selection = select_batches(records, pos, end, result.aborted_transactions)
            if pos < selection.next_offset < end:
                fetcher.send(selection.next_offset)  # on the wire while this one converts
            yield from _convert(records, selection, rng, opts, bounds, stats)
            if selection.next_offset > pos:
                pos, waited = selection.next_offset, False
                continue
            if waited:
                report_data_loss(
                    opts,
                    f"Cannot fetch offsets [{pos}, {end}) of {topic}-{partition} within "
                    f"{opts.poll_timeout_ms} ms: the high watermark is {result.high_watermark}",
                    stats,
                    end - pos,
                )
                return
            waited = True  # nothing at `pos` yet: one long poll, then give up (Kafka's poll)
    finally:
        fetcher.drain()
