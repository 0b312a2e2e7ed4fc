"""Driver-side broker questions: which partitions a subscription covers, their watermarks,
and the resolution of start/end limits (earliest, latest, JSON, timestamps) to offsets.

Earliest and latest stay as the -2/-1 sentinels here, so the planner can late-bind them
on the executor; everything else becomes a concrete offset.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from protocol.errors import TidelogError, UnknownTopicOrPartition
from spark_connector.options import (
    EARLIEST,
    LATEST,
    Assign,
    Earliest,
    GlobalTimestamp,
    Latest,
    OffsetLimit,
    OptionError,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    Subscribe,
    Subscription,
    TopicPartition,
)
from tidelog.client import Client

T = TypeVar("T")

# Topics whose name starts with this are internal (Kafka's convention), never matched by
# subscribePattern.
INTERNAL_TOPIC_PREFIX = "__"
LOG_APPEND_TIME = "LogAppendTime"


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """What `metadata` says about one partition, plus its topic's timestamp type."""

    topic: str
    partition: int
    log_start_offset: int
    high_watermark: int
    size_bytes: int
    log_append_time: bool = False

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def bytes_per_offset(self) -> float:
        """Average stored bytes per offset: the estimate behind maxBytesPerTrigger."""
        count = self.high_watermark - self.log_start_offset
        return self.size_bytes / count if count > 0 and self.size_bytes > 0 else 0.0


def open_client(opts: SourceOptions) -> Client:
    """A blocking client for the first bootstrap server (Tidelog is a single broker)."""
    server = opts.bootstrap_servers.split(",")[0].strip()
    return Client(
        server,
        client_id=opts.client_id,
        request_timeout_ms=opts.request_timeout_ms,
        security=opts.security,
    )


def with_retries(opts: SourceOptions, action: Callable[[], T]) -> T:
    """Kafka's fetchOffset.numRetries / retryIntervalMs around a driver-side broker call."""
    for attempt in range(opts.num_retries + 1):
        try:
            return action()
        except (OSError, TidelogError) as exc:
            retriable = isinstance(exc, OSError) or getattr(exc, "retriable", False)
            if not retriable or attempt == opts.num_retries:
                raise
            time.sleep(opts.retry_interval_ms / 1000)
    raise AssertionError("unreachable")


def _readable_end(p: dict[str, Any], committed: bool) -> int:
    """The high watermark, or for a read_committed reader the last stable offset."""
    lso = p.get("last_stable_offset")
    return int(lso) if committed and lso is not None else int(p["high_watermark"])


def describe_partitions(
    client: Client, subscription: Subscription, *, committed: bool = False
) -> dict[TopicPartition, PartitionInfo]:
    """The partitions a subscription covers now, with their watermarks, in order.
    `committed` (read_committed): `high_watermark` is the readable end, the last stable
    offset while a transaction is open (the metadata answer says it then)."""
    wanted: list[str] | None
    if isinstance(subscription, Subscribe):
        wanted = list(subscription.topics)
    elif isinstance(subscription, Assign):
        wanted = sorted({t for t, _ in subscription.partitions})
    else:
        wanted = None
    infos: dict[TopicPartition, PartitionInfo] = {}
    pattern = None if wanted is not None else re.compile(subscription.pattern)  # type: ignore[union-attr]
    for entry in client.metadata(wanted):
        topic = entry["topic"]
        if entry.get("error") is not None:
            continue  # Kafka: a subscribed topic that does not exist has no partitions yet.
        if pattern is not None and (
            topic.startswith(INTERNAL_TOPIC_PREFIX) or not pattern.fullmatch(topic)
        ):
            continue
        configs = entry.get("configs") or {}
        log_append = str(configs.get("message.timestamp.type", "")) == LOG_APPEND_TIME
        for p in entry["partitions"]:
            info = PartitionInfo(
                topic,
                p["partition"],
                p["log_start_offset"],
                _readable_end(p, committed),
                p.get("size_bytes") or 0,
                log_append,
            )
            infos[info.topic_partition] = info
    if isinstance(subscription, Assign):
        missing = [tp for tp in subscription.partitions if tp not in infos]
        if missing:
            names = ", ".join(f"{t}-{p}" for t, p in missing)
            raise UnknownTopicOrPartition(f"assigned partitions do not exist: {names}")
        infos = {tp: infos[tp] for tp in subscription.partitions}
    return dict(sorted(infos.items()))


def _require_all(
    kind: str, given: Iterable[TopicPartition], assigned: Iterable[TopicPartition], option: str
) -> None:
    given_set, assigned_set = set(given), set(assigned)
    if given_set != assigned_set:
        raise OptionError(
            f"If {option} contains specific {kind}, you must specify all TopicPartitions.\n"
            "Use -1 for latest, -2 for earliest.\n"
            f"Specified: {sorted(given_set)} Assigned: {sorted(assigned_set)}"
        )


def resolve_limit(
    client: Client,
    limit: OffsetLimit,
    infos: dict[TopicPartition, PartitionInfo],
    *,
    is_start: bool,
) -> dict[TopicPartition, int]:
    """Offsets per partition for a start or end limit; -2/-1 for earliest/latest.

    Timestamps go through `offset_for_time`. No match: for a start, the strategy decides
    (error, or latest); for an end, latest (Kafka's rule).
    """
    option = "startingOffsets" if is_start else "endingOffsets"
    if isinstance(limit, Earliest):
        return dict.fromkeys(infos, EARLIEST)
    if isinstance(limit, Latest):
        return dict.fromkeys(infos, LATEST)
    if isinstance(limit, SpecificOffsets):
        _require_all("offsets", limit.offsets, infos, option)
        return {tp: limit.offsets[tp] for tp in infos}
    if isinstance(limit, SpecificTimestamps):
        by_ts = "startingOffsetsByTimestamp" if is_start else "endingOffsetsByTimestamp"
        _require_all("timestamps", limit.timestamps, infos, by_ts)
        timestamps = {tp: limit.timestamps[tp] for tp in infos}
    else:
        assert isinstance(limit, GlobalTimestamp)
        timestamps = dict.fromkeys(infos, limit.timestamp_ms)
    resolved: dict[TopicPartition, int] = {}
    for (topic, partition), ts in timestamps.items():
        found = client.offset_for_time(topic, partition, ts)
        if found is not None:
            resolved[(topic, partition)] = found.offset
        elif not is_start or limit.strategy == "latest":
            resolved[(topic, partition)] = LATEST
        else:
            raise OptionError(
                f"No offset matched from request of topic-partition {topic}-{partition} and "
                f"timestamp {ts}. Set startingOffsetsByTimestampStrategy to 'latest' to start "
                "at the end instead."
            )
    return resolved
