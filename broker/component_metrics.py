"""The series read from components' `statistics()` snapshots at every scrape.

Retention, the cleaner and the long-poll notifier keep their own totals (docs/style.md item
11); this module names them in Prometheus terms. Series of topics that no longer
exist are left out, so a deleted topic's series disappear.
"""

from __future__ import annotations

from collections.abc import Iterator

from broker.context import BrokerContext
from broker.housekeeping import LogTasks
from broker.metrics import Readiness, Sample
from compaction.manager import CleanerStatistics
from compaction.service import CleanerService
from protocol.errors import TidelogError
from retention.task import RetentionStatistics


def component_samples(
    ctx: BrokerContext, tasks: LogTasks, cleaner: CleanerService, readiness: Readiness
) -> Iterator[Sample]:
    """Every component series, for `BrokerMetrics.add_statistics_source`."""
    topics = set(ctx.manager.topics())
    yield Sample("tidelog_ready", "gauge", "1 when /readyz answers 200.", int(readiness.ready))
    storage = ctx.manager.statistics()
    yield Sample(
        "tidelog_recovery_truncated_bytes",
        "counter",
        "Bytes cut from torn segment tails by recovery at startup.",
        storage.recovery_truncated_bytes,
    )
    yield Sample(
        "tidelog_recovery_fenced_segments",
        "gauge",
        "Segments with damage found by recovery or by a read, fenced (reads of it fail).",
        storage.fenced_segments,
    )
    yield Sample(
        "tidelog_recovery_quarantined_segments",
        "gauge",
        "Segment files load refused (overlapping, misplaced, out of range), renamed aside.",
        storage.quarantined_segments,
    )
    yield Sample(
        "tidelog_storage_unloaded_topics",
        "gauge",
        "Topics left unloaded at start: unusable metadata, or no descriptors left to open them.",
        storage.unloaded_topics,
    )
    yield Sample(
        "tidelog_longpoll_waiters",
        "gauge",
        "Fetches waiting for data (long poll).",
        ctx.notifier.waiting_count(),
    )
    offsets = ctx.groups.statistics()
    yield Sample(
        "tidelog_offsets_malformed_records",
        "gauge",
        "Records of __consumer_offsets skipped by its latest load (not a valid commit).",
        offsets.malformed_records,
    )
    yield from group_samples(ctx)
    memory = ctx.memory.statistics()
    yield Sample(
        "tidelog_queued_memory_bytes",
        "gauge",
        "Bytes of queued requests and unsent answers (budget: queued.max.request.bytes).",
        memory.used_bytes,
    )
    yield Sample(
        "tidelog_queued_memory_waits",
        "counter",
        "Times a connection was muted because the memory budget was full.",
        memory.waits,
    )
    yield from _remote_read_samples(ctx)
    yield from _retention_samples(tasks.retention.statistics(), topics)
    yield from _cleaner_samples(cleaner.statistics(), topics)
    yield Sample(
        "tidelog_deleted_files",
        "counter",
        "Segment files unlinked after file.delete.delay.ms.",
        tasks.files_deleted,
    )


def _remote_read_samples(ctx: BrokerContext) -> Iterator[Sample]:
    """Tiered storage's read side: the chunk and index caches, GETs, failed reads."""
    reader = ctx.remote_reader
    if reader is None:
        return
    stats = reader.statistics()
    chunks, indexes = stats.chunks, stats.indexes
    for name, kind, doc, value in (
        ("tidelog_remote_cache_hits", "counter", "Chunk cache hits (remote reads).", chunks.hits),
        (
            "tidelog_remote_cache_misses",
            "counter",
            "Chunk cache misses: a ranged GET each.",
            chunks.misses,
        ),
        (
            "tidelog_remote_cache_size_bytes",
            "gauge",
            "Bytes of remote chunks cached on disk.",
            chunks.size_bytes,
        ),
        (
            "tidelog_remote_cache_capacity_bytes",
            "gauge",
            "The chunk cache's cap.",
            chunks.capacity_bytes,
        ),
        (
            "tidelog_remote_cache_evictions",
            "counter",
            "Chunks evicted from the cache.",
            chunks.evictions,
        ),
        (
            "tidelog_remote_fetched_bytes",
            "counter",
            "Bytes of chunks fetched from the store.",
            chunks.fetched_bytes,
        ),
        ("tidelog_remote_index_cache_hits", "counter", "Remote index cache hits.", indexes.hits),
        (
            "tidelog_remote_index_cache_misses",
            "counter",
            "Remote index cache misses (GETs).",
            indexes.misses,
        ),
        (
            "tidelog_remote_index_cache_size_bytes",
            "gauge",
            "Bytes of remote indexes cached.",
            indexes.size_bytes,
        ),
        ("tidelog_remote_gets", "counter", "GETs sent to the object store by reads.", stats.gets),
        (
            "tidelog_remote_read_errors",
            "counter",
            "Remote reads that failed (store down, error status, short body, timeout).",
            stats.errors,
        ),
    ):
        yield Sample(name, kind, doc, value)  # type: ignore[arg-type]


def _retention_samples(stats: RetentionStatistics, topics: set[str]) -> Iterator[Sample]:
    yield Sample("tidelog_retention_passes", "counter", "Retention passes run.", stats.passes)
    yield Sample(
        "tidelog_retention_failures", "counter", "Retention passes that failed.", stats.failures
    )
    if stats.last_pass_duration_s is not None:
        yield Sample(
            "tidelog_retention_last_pass_duration_seconds",
            "gauge",
            "Duration of the latest retention pass.",
            stats.last_pass_duration_s,
        )
    for (topic, reason), count in sorted(stats.deleted_segments.items()):
        if topic in topics:
            labels = (("topic", topic), ("reason", reason))
            yield Sample(
                "tidelog_retention_deleted_segments",
                "counter",
                "Segments deleted by retention, by reason (time, size, log_start).",
                count,
                labels,
            )
            yield Sample(
                "tidelog_retention_deleted_bytes",
                "counter",
                "Bytes of segments deleted by retention, by reason.",
                stats.deleted_bytes.get((topic, reason), 0),
                labels,
            )


_CLEANER_COUNTERS = (
    ("tidelog_cleaner_runs", "cleanings_total", "Cleanings completed."),
    ("tidelog_cleaner_failures", "failures_total", "Cleanings that failed."),
    ("tidelog_cleaner_aborted", "aborted_total", "Cleanings abandoned (shutdown, log changed)."),
    ("tidelog_cleaner_read_bytes", "bytes_read_total", "Bytes read by the cleaner."),
    ("tidelog_cleaner_written_bytes", "bytes_written_total", "Bytes written by the cleaner."),
    ("tidelog_cleaner_records_kept", "records_kept_total", "Records the cleaner kept."),
    ("tidelog_cleaner_records_removed", "records_removed_total", "Records the cleaner removed."),
)


def _cleaner_samples(stats: CleanerStatistics, topics: set[str]) -> Iterator[Sample]:
    for name, attr, doc in _CLEANER_COUNTERS:
        yield Sample(name, "counter", doc, getattr(stats, attr))
    yield Sample(
        "tidelog_cleaner_last_run_duration_seconds",
        "gauge",
        "Duration of the latest cleaning.",
        stats.last_duration_s,
    )
    yield Sample(
        "tidelog_cleaner_offset_map_utilization_ratio",
        "gauge",
        "Fill of the offset map in the latest cleaning (1.0: full, cleaning stopped early).",
        stats.last_map_utilization,
    )
    yield Sample(
        "tidelog_cleaner_max_compaction_delay_seconds",
        "gauge",
        "Longest time a cleanable record has waited for compaction.",
        stats.max_compaction_delay_ms / 1000,
    )
    yield Sample(
        "tidelog_cleaner_uncleanable_partitions",
        "gauge",
        "Partitions whose cleaning keeps failing (not retried in a tight loop).",
        sum(1 for topic, _ in stats.uncleanable if topic in topics),
    )
    for (topic, partition), state in sorted(stats.logs.items()):
        if topic in topics:
            yield Sample(
                "tidelog_cleaner_dirty_ratio",
                "gauge",
                "Cleanable bytes / (clean + cleanable bytes) of a compacted partition.",
                state.dirty_ratio,
                (("topic", topic), ("partition", str(partition))),
            )


def group_samples(ctx: BrokerContext) -> Iterator[Sample]:
    """Consumer groups: lag per committed partition (high watermark minus the committed
    offset, both in memory: no scan), members, state and rebalances per group."""
    for group in ctx.groups.group_statistics():
        labels = (("group", group.group_id),)
        yield Sample(
            "tidelog_consumer_group_members", "gauge", "Members of a consumer group.",
            group.members, labels,
        )  # fmt: skip
        yield Sample(
            "tidelog_consumer_group_state", "gauge",
            "1 for the consumer group's state (Empty, PreparingRebalance, "
            "CompletingRebalance, Stable).",
            1, (*labels, ("state", group.state)),
        )  # fmt: skip
        yield Sample(
            "tidelog_consumer_group_rebalances", "counter",
            "Rebalances the consumer group started since the broker started.",
            group.rebalances, labels,
        )  # fmt: skip
        for (topic, partition), offset in sorted(group.offsets.items()):
            try:
                high_watermark = ctx.manager.get_log(topic, partition).high_watermark
            except TidelogError:
                continue  # a topic deleted since the commit: no lag to report
            yield Sample(
                "tidelog_consumer_group_lag", "gauge",
                "Records between the group's committed offset and the high watermark.",
                max(0, high_watermark - offset),
                (*labels, ("topic", topic), ("partition", str(partition))),
            )  # fmt: skip
