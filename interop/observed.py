"""What the scenarios produce and what they report, in one shape for every client.

`SAMPLES` are the records every scenario writes: null key, empty value, a tombstone
(null value), headers, explicit create-time timestamps, two partitions. A client's
view of a record becomes an `observed_record` dict so that kafka-python, aiokafka,
confluent-kafka and kcat results compare field by field.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

T = TypeVar("T")

HOUR_MS = 3_600_000
# Producer-chosen timestamps (ms): the start of the hour before this process started. At
# least an hour old, so no producer or broker clock stamp can equal one (the comparison
# tells them apart); recent, so a broker's time retention (7 days by default) keeps them:
# records stamped 2023 vanished from Kafka at its first retention check.
T0_MS = (time.time_ns() // 1_000_000 // HOUR_MS - 1) * HOUR_MS
TIMESTAMP_STEP_MS = 10
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
PARTITIONS = 2
# Every wait in a scenario ends: a broker that never answers fails the scenario, not the run.
SCENARIO_TIMEOUT_S = 60.0
CREATE_TIME = "create_time"
LOG_APPEND_TIME = "log_append_time"


@dataclass(frozen=True, slots=True)
class Sample:
    """One record to produce."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...]
    timestamp_ms: int


def _samples() -> tuple[Sample, ...]:
    rows: list[tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes], ...]]] = [
        # Compressible: a one-record batch (kcat sends one per run) is only compressed
        # when that makes it smaller; clients send a batch uncompressed otherwise.
        (0, b"k0", b"v0" * 200, ()),
        (0, None, b"no key", ()),
        (0, b"k2", b"", (("h1", b"x"),)),
        (0, b"k3", None, ()),
        (1, b"k4", b"v4" * 300, (("h1", b"y"), ("h2", b""))),
        (1, b"", b"empty key", ()),
        (1, b"k6", bytes(range(256)), ()),
    ]
    return tuple(
        Sample(p, k, v, h, T0_MS + i * TIMESTAMP_STEP_MS) for i, (p, k, v, h) in enumerate(rows)
    )


SAMPLES = _samples()


def samples_for(partitions: int) -> tuple[Sample, ...]:
    """The samples that fit a topic of `partitions` partitions."""
    return tuple(s for s in SAMPLES if s.partition < partitions)


def observed_record(
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[str, bytes | None]] | None,
    timestamp_ms: int,
    timestamp_type: str,
) -> dict[str, Any]:
    """One record as a client returned it."""
    return {
        "partition": partition,
        "offset": offset,
        "key": key,
        "value": value,
        "headers": [(name, val) for name, val in headers or ()],
        "timestamp_ms": timestamp_ms,
        "timestamp_type": timestamp_type,
    }


def from_consumer_record(r: Any) -> dict[str, Any]:
    """A kafka-python / aiokafka `ConsumerRecord` (Java's field names; timestamp_type
    0 = CreateTime, 1 = LogAppendTime)."""
    return observed_record(
        r.partition,
        r.offset,
        r.key,
        r.value,
        r.headers,
        r.timestamp,
        LOG_APPEND_TIME if r.timestamp_type == 1 else CREATE_TIME,
    )


def sort_records(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(records, key=lambda r: (r["partition"], r["offset"]))


def error_name(exc: BaseException) -> str:
    """A client exception as Kafka's error name (TOPIC_ALREADY_EXISTS ...), or its class."""
    for attr in ("name", "message"):
        value = getattr(exc, attr, None)
        if isinstance(value, str) and value.isupper():
            return value
    args = getattr(exc, "args", ())
    if args and hasattr(args[0], "name") and callable(args[0].name):
        return str(args[0].name())  # confluent_kafka.KafkaError
    return type(exc).__name__


# DescribeConfigs' config_source numbers (Kafka's ConfigSource), by name.
CONFIG_SOURCES = {
    0: "UNKNOWN",
    1: "DYNAMIC_TOPIC_CONFIG",
    2: "DYNAMIC_BROKER_CONFIG",
    3: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    4: "STATIC_BROKER_CONFIG",
    5: "DEFAULT_CONFIG",
    6: "DYNAMIC_BROKER_LOGGER_CONFIG",
    7: "CLIENT_METRICS_CONFIG",
    8: "GROUP_CONFIG",
}


def lookup_times() -> list[int]:
    """Timestamps the offset scenarios look up: before the first sample, exactly on one,
    between two, on the last, and after the last."""
    last = SAMPLES[-1].timestamp_ms
    return [T0_MS - 1, T0_MS + 2 * TIMESTAMP_STEP_MS, T0_MS + 45, last, last + 1]


# Between two polls of a condition that the broker applies asynchronously.
POLL_INTERVAL_S = 0.1


def wait_until(probe: Callable[[], T], done: Callable[[T], bool]) -> T:
    """Poll `probe` until `done(value)` or `SCENARIO_TIMEOUT_S`; the last value seen.

    For what a broker applies after it has answered (a created topic reaching every
    broker's metadata, an altered config, a deletion): the scenario reports what it
    finally saw, so a broker that never applies the change still shows as different.
    """
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    value = probe()
    while not done(value) and time.monotonic() < deadline:
        time.sleep(POLL_INTERVAL_S)
        value = probe()
    return value


async def await_until(probe: Callable[[], Awaitable[T]], done: Callable[[T], bool]) -> T:
    """`wait_until` for asyncio clients."""
    deadline = time.monotonic() + SCENARIO_TIMEOUT_S
    value = await probe()
    while not done(value) and time.monotonic() < deadline:
        await asyncio.sleep(POLL_INTERVAL_S)
        value = await probe()
    return value
