"""What each typed client call sends and how its answer is read.

Both clients (`Client`, blocking; `AsyncClient`, trio) expose the same methods;
each method is a `Call` built here and run by the client's own I/O, so the two
never drift apart. Per-partition errors are raised as their `TidelogError`
class; request-level errors are raised by the connection.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from protocol.connection import find_partition, one_partition

# Kafka's request.timeout.ms default for produce: how long the broker may take.
DEFAULT_PRODUCE_TIMEOUT_MS = 30_000

# Kafka's max.partition.fetch.bytes default: 1 MiB per partition per fetch.
DEFAULT_FETCH_MAX_BYTES = 1_048_576


class OffsetAndTimestamp(NamedTuple):
    """An offset with its record timestamp (ms), as `list_offsets` answers."""

    offset: int
    timestamp: int


class ProduceResult(NamedTuple):
    """Where a produced set of batches landed (`log_append_time` is -1 for CreateTime)."""

    base_offset: int
    log_append_time: int
    log_start_offset: int


class FetchResult(NamedTuple):
    """One partition's fetch answer: whole batches, as stored.

    `local` is set instead of `records` when a local read was asked for and granted
    (docs/protocol.md §9): the segment file's path, device, inode, position, length and
    record count of those batches.
    """

    records: bytes
    high_watermark: int
    log_start_offset: int
    local: dict[str, Any] | None = None


# What a call's answer is read into.
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One request and the function that turns its body into the caller's result (a `T`).

    A call sent without expecting an answer (`produce` with `acks=0`) has None in its `T`.
    """

    api: str
    body: dict[str, Any]
    extract: Callable[[dict[str, Any]], T]
    # Added to the request timeout: a fetch may legitimately wait this long.
    wait_ms: int = 0
    expect_response: bool = True


def _body(body: dict[str, Any]) -> dict[str, Any]:
    return body


def _none(_body: dict[str, Any]) -> None:
    return None


def api_versions() -> Call[dict[str, Any]]:
    return Call("api_versions", {}, _body)


def create_topic(
    topic: str, partitions: int = 1, configs: Mapping[str, Any] | None = None
) -> Call[None]:
    body = {"topic": topic, "partitions": partitions, "configs": dict(configs or {})}
    return Call("create_topic", body, _none)


def delete_topic(topic: str) -> Call[None]:
    return Call("delete_topic", {"topic": topic}, _none)


def metadata(topics: Iterable[str] | None = None) -> Call[list[dict[str, Any]]]:
    body = {"topics": None if topics is None else list(topics)}
    return Call("metadata", body, lambda b: b["topics"])


def describe_configs(topic: str) -> Call[dict[str, dict[str, Any]]]:
    return Call("describe_configs", {"topic": topic}, lambda b: b["configs"])


def alter_configs(
    topic: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] = ()
) -> Call[None]:
    body = {"topic": topic, "set": dict(set or {}), "delete": list(delete)}
    return Call("alter_configs", body, _none)


def produce(
    topic: str,
    partition: int,
    records: bytes | bytearray | memoryview,
    *,
    acks: int = -1,
    timeout_ms: int = DEFAULT_PRODUCE_TIMEOUT_MS,
) -> Call[ProduceResult | None]:
    """Append whole batches to one partition; with `acks=0` the result is None."""
    body = {
        "acks": acks,
        "timeout_ms": timeout_ms,
        "topics": one_partition(topic, partition, records=records),
    }

    def extract(b: dict[str, Any]) -> ProduceResult:
        entry = find_partition(b, topic, partition)
        return ProduceResult(
            _int(entry["base_offset"]),
            _int(entry["log_append_time"], -1),
            _int(entry["log_start_offset"]),
        )

    return Call("produce", body, extract, expect_response=acks != 0)


def fetch(
    topic: str,
    partition: int,
    offset: int,
    *,
    max_bytes: int = DEFAULT_FETCH_MAX_BYTES,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    local_read: bool = False,
    kafka_batches: bool = False,
) -> Call[FetchResult]:
    """Whole batches of one partition starting with the one holding `offset`; with
    `local_read`, a large answer may say where they lie in the segment file instead;
    with `kafka_batches`, Kafka v2 batches come as stored (docs/protocol.md §9)."""
    body: dict[str, Any] = {
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "topics": one_partition(topic, partition, offset=offset, max_bytes=max_bytes),
    }
    if local_read:
        body["local_read"] = True
    if kafka_batches:
        body["kafka_batches"] = True

    def extract(b: dict[str, Any]) -> FetchResult:
        entry = find_partition(b, topic, partition)
        return FetchResult(
            entry["records"] or b"",
            _int(entry["high_watermark"]),
            _int(entry["log_start_offset"]),
            entry.get("local"),
        )

    return Call("fetch", body, extract, wait_ms=max_wait_ms)


def _offset_and_timestamp(
    topic: str, partition: int
) -> Callable[[dict[str, Any]], OffsetAndTimestamp | None]:
    def extract(b: dict[str, Any]) -> OffsetAndTimestamp | None:
        entry = find_partition(b, topic, partition)
        if entry["offset"] is None:
            return None
        timestamp = entry["timestamp"]
        return OffsetAndTimestamp(entry["offset"], -1 if timestamp is None else timestamp)

    return extract


def list_offsets(topic: str, partition: int, spec: str) -> Call[OffsetAndTimestamp | None]:
    """`spec` is "earliest", "earliest_local", "latest" or "max_timestamp"."""
    body = {"topics": one_partition(topic, partition, spec=spec)}
    return Call("list_offsets", body, _offset_and_timestamp(topic, partition))


def offset_for_time(
    topic: str, partition: int, timestamp_ms: int
) -> Call[OffsetAndTimestamp | None]:
    """First offset whose timestamp is >= `timestamp_ms`; the result is None if none."""
    body = {"topics": one_partition(topic, partition, timestamp=timestamp_ms)}
    return Call("offset_for_time", body, _offset_and_timestamp(topic, partition))


def delete_records(topic: str, partition: int, offset: int) -> Call[int]:
    """Move the log start offset up to `offset` (-1 = the high watermark)."""
    body = {"topics": one_partition(topic, partition, offset=offset)}
    return Call(
        "delete_records",
        body,
        lambda b: _int(find_partition(b, topic, partition)["low_watermark"]),
    )


def _int(value: int | None, default: int = -1) -> int:
    return default if value is None else value
