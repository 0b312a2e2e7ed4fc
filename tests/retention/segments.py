"""Plain segment metadata for the pure-rule tests (the shape of storage's SegmentInfo)."""

from __future__ import annotations

from dataclasses import dataclass

from retention.rules import RetentionSettings

NOW_MS = 1_700_000_000_000
HOUR_MS = 3_600_000


@dataclass(frozen=True, slots=True)
class Seg:
    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    mtime_ms: int
    is_active: bool


def log_of(*specs: tuple[int, int, int]) -> list[Seg]:
    """Contiguous segments from (record count, size_bytes, largest timestamp) triples.

    Each segment's mtime equals its timestamp (or NOW_MS when it has none); the last
    one is active.
    """
    segments: list[Seg] = []
    base = 0
    for i, (count, size, ts) in enumerate(specs):
        segments.append(
            Seg(
                base_offset=base,
                next_offset=base + count,
                size_bytes=size,
                largest_timestamp_ms=ts,
                mtime_ms=ts if ts >= 0 else NOW_MS,
                is_active=i == len(specs) - 1,
            )
        )
        base += count
    return segments


def settings(
    retention_ms: int = -1,
    retention_bytes: int = -1,
    policy: str = "delete",
    segment_ms: int | None = 7 * 24 * HOUR_MS,
    segment_bytes: int | None = 1 << 30,
) -> RetentionSettings:
    return RetentionSettings(
        retention_ms=retention_ms,
        retention_bytes=retention_bytes,
        cleanup_policy=frozenset(policy.split(",")),
        segment_ms=segment_ms,
        segment_bytes=segment_bytes,
    )
