"""What a correct Kafka broker must show each client, derived from `SAMPLES` alone.

These expectations check the harness against the real Kafka (so a scenario cannot
silently observe nothing) and will check Tidelog the same way.
"""

from __future__ import annotations

from typing import Any

from interop.observed import CREATE_TIME, T0_MS, Sample, lookup_times, samples_for


def offsets_by_sample(samples: tuple[Sample, ...]) -> list[tuple[int, int]]:
    """(partition, offset) of each sample in produce order on an empty topic."""
    next_offset: dict[int, int] = {}
    placed = []
    for s in samples:
        offset = next_offset.get(s.partition, 0)
        next_offset[s.partition] = offset + 1
        placed.append((s.partition, offset))
    return placed


def records(partitions: int, *, explicit_timestamps: bool = True) -> list[dict[str, Any]]:
    """The records a consumer must read back (timestamps only when the producer set them)."""
    samples = samples_for(partitions)
    rows = []
    for s, (partition, offset) in zip(samples, offsets_by_sample(samples), strict=True):
        row = {
            "partition": partition,
            "offset": offset,
            "key": s.key,
            "value": s.value,
            "headers": list(s.headers),
            "timestamp_type": CREATE_TIME,
        }
        if explicit_timestamps:
            row["timestamp_ms"] = s.timestamp_ms
        rows.append(row)
    return sorted(rows, key=lambda r: (r["partition"], r["offset"]))


def end_offsets(partitions: int) -> dict[int, int]:
    ends = dict.fromkeys(range(partitions), 0)
    for partition, offset in offsets_by_sample(samples_for(partitions)):
        ends[partition] = offset + 1
    return ends


def offset_for_time(partition: int, ts: int) -> int | None:
    """ListOffsets by timestamp: the first offset whose timestamp is >= ts, else none."""
    samples = samples_for(partition + 1)
    for s, (p, offset) in zip(samples, offsets_by_sample(samples), strict=True):
        if p == partition and s.timestamp_ms >= ts:
            return offset
    return None


def for_times(partitions: int) -> dict[int, dict[int, int | None]]:
    return {
        ts - T0_MS: {p: offset_for_time(p, ts) for p in range(partitions)} for ts in lookup_times()
    }
