"""A real broker process with tiered storage on, for tests/tiered's end-to-end tests and
bench/tiered_bench.py: settings, a topic whose local retention is far below its size,
and a wait until the remote tier holds what the test needs.

The store may be moto directly or the fault proxy in front of it (`endpoint`); the
broker reads its credentials from a credentials file (tidelog.remote.storage.credentials.file).
"""

from __future__ import annotations

import time
from pathlib import Path

from protocol.batch import encode_batch
from protocol.remote_schema import PartitionSegments, remote_segments
from tidelog.client import Client

# Broker settings: small segments, housekeeping and the remote tasks every 200 ms.
FAST_TIERING = (
    "log.retention.ms=-1",
    "log.segment.bytes=16384",
    "log.index.interval.bytes=1024",
    "log.initial.task.delay.ms=0",
    "log.retention.check.interval.ms=200",
    "log.segment.delete.delay.ms=0",
    "remote.log.manager.task.interval.ms=200",
    "remote.log.manager.task.retry.backoff.ms=100",
    "remote.log.manager.task.retry.backoff.max.ms=1000",
)
# A tiered topic keeping about one segment locally.
TIERED_TOPIC_CONFIG = {
    "remote.storage.enable": "true",
    "segment.bytes": "16384",
    "local.retention.bytes": "16384",
    "retention.bytes": "-1",
    "retention.ms": "-1",
}
# Longest wait for uploads and local deletions to reach a wanted state.
TIERING_TIMEOUT_S = 90.0


def produce(client: Client, topic: str, partition: int, count: int, batch: int = 50) -> None:
    """`count` records (~130 bytes each) in batches of `batch`, acks=-1."""
    for first in range(0, count, batch):
        rows = [
            (b"k%d" % i, b"value-%d-" % i + b"x" * 100, None, 1_000 + i)
            for i in range(first, min(first + batch, count))
        ]
        client.produce(topic, partition, encode_batch(rows))


def remote_errors(metrics_port: int) -> float:
    """`tidelog_remote_errors_total` over every kind: the uploader's failed steps."""
    from tests.integration.promserver import parse_scrape, scrape_text

    scraped = parse_scrape(scrape_text(metrics_port))
    return sum(scraped.series("tidelog_remote_errors_total").values())


def credentials_file(directory: Path, access_key: str, secret_key: str) -> Path:
    path = directory / "s3-credentials"
    path.write_text(
        f"[default]\naws_access_key_id = {access_key}\naws_secret_access_key = {secret_key}\n"
    )
    return path


def tiered_settings(
    *,
    endpoint: str,
    bucket: str,
    credentials: Path,
    prefix: str = "tidelog",
    region: str = "us-east-1",
    extra: tuple[str, ...] = (),
) -> tuple[str, ...]:
    """`--set` items turning tiered storage on against `endpoint`/`bucket`."""
    return (
        *FAST_TIERING,
        "remote.log.storage.system.enable=true",
        f"tidelog.remote.storage.endpoint={endpoint}",
        f"tidelog.remote.storage.bucket={bucket}",
        f"tidelog.remote.storage.prefix={prefix}",
        f"tidelog.remote.storage.region={region}",
        f"tidelog.remote.storage.credentials.file={credentials}",
        *extra,
    )


def tier_state(client: Client, topic: str, partitions: int) -> dict[int, PartitionSegments]:
    """Every partition's log start, local log start and remote segments, now."""
    return client.call(remote_segments(topic, {p: (0, -1) for p in range(partitions)}))


def wait_tiered(
    client: Client,
    topic: str,
    partitions: int,
    *,
    min_remote_fraction: float = 0.5,
    timeout_s: float = TIERING_TIMEOUT_S,
) -> dict[int, PartitionSegments]:
    """Wait until every partition's local log start passed `min_remote_fraction` of its
    high watermark (its older records only in the store); the last state seen."""
    deadline = time.monotonic() + timeout_s
    while True:
        state = tier_state(client, topic, partitions)
        if all(
            s.segments and s.local_log_start_offset >= s.high_watermark * min_remote_fraction
            for s in state.values()
        ):
            return state
        if time.monotonic() > deadline:
            raise AssertionError(f"{topic} did not tier within {timeout_s} s: {state}")
        time.sleep(0.2)
