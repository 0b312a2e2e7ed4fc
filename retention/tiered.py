"""Retention of a tiered log (KIP-405): local retention and total retention.

Pure functions of segment metadata, in the shape of `retention.rules`, whose passes
they reuse:

- **local** (`plan_local_deletion`): over the local segments, with
  `local.retention.ms/bytes` (-2 resolved to `retention.*`). Segments wholly below the
  log start offset go whatever their upload state; any other local segment may go only
  when the store holds it (it ends at or below `uploaded_end`, where the segments the
  manifest covers end), never the active one. The size rule measures the whole local
  log (uploaded or not), as Kafka does.
- **total** (`plan_remote_deletion`): over the log across both tiers: the readable
  remote segments, then the local segments the store does not hold. `retention.*`
  and the log start offset (delete-records) delete from the oldest end; the walk stops
  at the first segment that is not in the store, so a segment not yet uploaded is never
  deleted by total retention (it is uploaded first, then deleted: Kafka's rule). The
  new log start offset is the base of the first segment kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from retention.explain import SegmentVerdict, Verdict, explain_retention
from retention.rules import (
    DeletionPlan,
    RetentionSettings,
    SegmentMeta,
    log_start_pass,
    plan_deletion,
    size_pass,
    time_pass,
)

__all__ = [
    "LocalPlan",
    "RemotePlan",
    "TierSegment",
    "explain_tiered",
    "local_settings",
    "plan_local_deletion",
    "plan_remote_deletion",
    "total_segments",
]


@dataclass(frozen=True, slots=True)
class TierSegment:
    """A segment of the log across tiers (`SegmentMeta`'s shape), and whether the
    store holds it."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    mtime_ms: int
    is_active: bool
    remote: bool


@dataclass(frozen=True, slots=True)
class LocalPlan:
    """How many of the oldest local segments go, by reason."""

    start_offset_count: int
    size_count: int
    time_count: int

    @property
    def total(self) -> int:
        return self.start_offset_count + self.size_count + self.time_count


@dataclass(frozen=True, slots=True)
class RemotePlan:
    """How many of the oldest remote segments go, and the log start offset after."""

    plan: DeletionPlan
    log_start_offset: int | None  # None: nothing to delete

    @property
    def total(self) -> int:
        return self.plan.total


def local_settings(
    local_retention_ms: int, local_retention_bytes: int, cleanup_policy: frozenset[str]
) -> RetentionSettings:
    """Settings for the local passes (values already resolved from -2)."""
    return RetentionSettings(local_retention_ms, local_retention_bytes, cleanup_policy)


def plan_local_deletion(
    segments: Sequence[SegmentMeta],
    settings: RetentionSettings,
    log_start_offset: int,
    high_watermark: int,
    uploaded_end: int,
    now_ms: int,
) -> LocalPlan:
    """The local segments to delete (see the module docstring)."""
    if not segments:
        return LocalPlan(0, 0, 0)
    by_start = log_start_pass(segments, 0, log_start_offset, high_watermark)
    bound = min(high_watermark, uploaded_end)
    by_size = by_time = 0
    if settings.size_limited:
        by_size = size_pass(segments, by_start, settings.retention_bytes, bound)
    if settings.time_limited:
        start = by_start + by_size
        by_time = time_pass(segments, start, settings.retention_ms, now_ms, bound)
    # Never the active segment (the walks stop before it: it is above `bound`).
    total = min(by_start + by_size + by_time, len(segments) - 1)
    by_time = max(0, total - by_start - by_size)
    by_size = max(0, min(by_size, total - by_start))
    return LocalPlan(min(by_start, total), by_size, by_time)


def total_segments(
    remote: Sequence[SegmentMeta], local: Sequence[SegmentMeta], remote_end_offset: int
) -> list[TierSegment]:
    """The log across tiers, oldest first: remote segments, then local ones above
    `remote_end_offset` (a segment in both tiers is counted once, as remote)."""
    out = [
        TierSegment(s.base_offset, s.next_offset, s.size_bytes, s.largest_timestamp_ms,
                    s.mtime_ms, False, True)
        for s in remote
    ]  # fmt: skip
    out += [
        TierSegment(s.base_offset, s.next_offset, s.size_bytes, s.largest_timestamp_ms,
                    s.mtime_ms, s.is_active, False)
        for s in local
        if s.next_offset > remote_end_offset or s.is_active
    ]  # fmt: skip
    return out


def plan_remote_deletion(
    segments: Sequence[TierSegment],
    settings: RetentionSettings,
    log_start_offset: int,
    now_ms: int,
) -> RemotePlan:
    """The remote segments to delete (the oldest `total`), see the module docstring."""
    remote_count = 0
    while remote_count < len(segments) and segments[remote_count].remote:
        remote_count += 1
    if remote_count == 0:
        return RemotePlan(plan_deletion([], settings, 0, 0, now_ms), None)
    # The walk's bound: the first segment the store does not hold.
    bound = segments[remote_count].base_offset if remote_count < len(segments) else 0
    if remote_count == len(segments):
        bound = segments[-1].base_offset  # (no local segment: keep the newest remote)
    plan = plan_deletion(segments, settings, log_start_offset, bound, now_ms)
    if plan.total == 0:
        return RemotePlan(plan, None)
    total = min(plan.total, remote_count)
    new_start = segments[total].base_offset if total < len(segments) else segments[-1].next_offset
    return RemotePlan(plan, max(new_start, log_start_offset))


# -- explain ---------------------------------------------------------------------------


def explain_tiered(
    local: Sequence[SegmentMeta],
    remote: Sequence[SegmentMeta],
    total_settings: RetentionSettings,
    local_retention: RetentionSettings,
    log_start_offset: int,
    high_watermark: int,
    uploaded_end: int,
    remote_end_offset: int,
    now_ms: int,
) -> dict[str, Any]:
    """The wire form of a tiered partition's explanation (protocol.schemas
    PARTITION_EXPLANATION): every segment across both tiers, oldest first, with where
    it lives and the verdict of each tier, consistent with the two plans above."""
    local_bound = min(high_watermark, uploaded_end)
    local_view = explain_retention(local, local_retention, log_start_offset, local_bound, now_ms)
    across = total_segments(remote, local, remote_end_offset)
    remote_count = next((i for i, s in enumerate(across) if not s.remote), len(across))
    bound = across[remote_count].base_offset if remote_count < len(across) else 0
    total_view = explain_retention(across, total_settings, log_start_offset, bound, now_ms)
    remote_bases = {s.base_offset for s in remote}
    by_base = {v.base_offset: v for v in total_view.segments if v.base_offset in remote_bases}
    rows: list[dict[str, Any]] = []
    local_bases = {s.base_offset for s in local}
    for verdict in total_view.segments:  # the remote-only segments
        if verdict.base_offset in remote_bases and verdict.base_offset not in local_bases:
            row = verdict.to_wire()
            row.update(tier="remote", remote_verdict=row["verdict"], remote_reason=row["reason"])
            rows.append(row)
    for verdict in local_view.segments:
        row = _local_row(verdict, uploaded_end)
        in_store = by_base.get(verdict.base_offset)
        if in_store is not None:
            row.update(tier="both", remote_verdict=in_store.verdict.value,
                       remote_reason=in_store.reason)  # fmt: skip
        rows.append(row)
    going = [r for r in rows if r["deletable"] or _remote_deletable(r)]
    wire = local_view.to_wire()
    wire.update(
        retention_ms=total_settings.retention_ms,
        retention_bytes=total_settings.retention_bytes,
        size_bytes=sum(s.size_bytes for s in across),
        deletable_segments=len(going),
        deletable_bytes=sum(r["size_bytes"] for r in going),
        roll_first=False,
        segments=rows,
        remote_storage_enable=True,
        local_log_start_offset=local[0].base_offset if local else log_start_offset,
        local_retention_ms=local_retention.retention_ms,
        local_retention_bytes=local_retention.retention_bytes,
    )
    return wire


def _remote_deletable(row: dict[str, Any]) -> bool:
    verdict = row.get("remote_verdict")
    return isinstance(verdict, str) and verdict.startswith("delete_")


def _local_row(verdict: SegmentVerdict, uploaded_end: int) -> dict[str, Any]:
    row = verdict.to_wire()
    waiting = verdict.next_offset > uploaded_end and not verdict.is_active
    if waiting and not verdict.verdict.deletable:
        row.update(
            verdict=Verdict.KEEP_NOT_UPLOADED.value,
            reason="not yet in the object store: its local copy stays until the upload "
            "finishes (then local.retention.* applies)",
        )
    return row
