"""Explain, per segment, what retention will do with it and why.

Kafka only logs what it deleted; the question operators ask is the opposite
("why is my old data still here?"). `explain_retention` runs the same rules as
the retention pass (`rules.plan_deletion`) and gives every segment a verdict:
deletable by log start offset, size or time, or kept because it is the active
segment, it is within retention, the high watermark guards it, an earlier
segment blocks the walk, the policy is compact, or its timestamp is in the
future. The verdicts never disagree with what the pass deletes: the deletable
ones are exactly the plan's prefix.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from retention.rules import (
    DeletionPlan,
    RetentionSettings,
    SegmentMeta,
    high_watermark_allows,
    is_empty_last,
    log_start_breached,
    next_base_offset,
    plan_deletion,
    segment_timestamp_ms,
    size_breached,
    size_excess_bytes,
    time_breached,
    upper_bound_offset,
)


class Verdict(StrEnum):
    """What retention does with one segment; the values travel on the wire."""

    DELETE_START_OFFSET = "delete_start_offset"
    DELETE_SIZE = "delete_size"
    DELETE_TIME = "delete_time"
    KEEP_ACTIVE = "keep_active"
    KEEP_WITHIN_RETENTION = "keep_within_retention"
    KEEP_HIGH_WATERMARK = "keep_high_watermark"
    KEEP_BLOCKED = "keep_blocked"
    KEEP_COMPACT = "keep_compact"
    KEEP_FUTURE_TIMESTAMP = "keep_future_timestamp"
    KEEP_NOT_UPLOADED = "keep_not_uploaded"  # tiered: local copy kept until it is uploaded

    @property
    def deletable(self) -> bool:
        return self.value.startswith("delete_")


@dataclass(frozen=True, slots=True)
class SegmentVerdict:
    """One segment's metadata, its age and its verdict with a sentence saying why.

    `timestamp_ms` is what time retention compares (the largest record timestamp,
    or the file's mtime when `timestamp_from_mtime`); `age_ms` is negative for a
    timestamp in the future.
    """

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int
    timestamp_ms: int
    timestamp_from_mtime: bool
    age_ms: int
    is_active: bool
    verdict: Verdict
    reason: str

    def to_wire(self) -> dict[str, Any]:
        return {
            "base_offset": self.base_offset,
            "next_offset": self.next_offset,
            "size_bytes": self.size_bytes,
            "largest_timestamp_ms": self.largest_timestamp_ms,
            "timestamp_ms": self.timestamp_ms,
            "timestamp_from_mtime": self.timestamp_from_mtime,
            "age_ms": self.age_ms,
            "is_active": self.is_active,
            "verdict": self.verdict.value,
            "deletable": self.verdict.deletable,
            "reason": self.reason,
            # A tiered topic's explanation (retention.tiered) fills these in.
            "tier": "local",
            "remote_verdict": None,
            "remote_reason": None,
        }


@dataclass(frozen=True, slots=True)
class RetentionExplanation:
    """The verdicts of one partition at `now_ms`, with the inputs that decided them."""

    now_ms: int
    log_start_offset: int
    high_watermark: int
    log_end_offset: int
    size_bytes: int
    settings: RetentionSettings
    roll_first: bool
    segments: tuple[SegmentVerdict, ...]

    @property
    def deletable_count(self) -> int:
        return sum(1 for s in self.segments if s.verdict.deletable)

    @property
    def deletable_bytes(self) -> int:
        return sum(s.size_bytes for s in self.segments if s.verdict.deletable)

    def to_wire(self) -> dict[str, Any]:
        s = self.settings
        return {
            "now_ms": self.now_ms,
            "log_start_offset": self.log_start_offset,
            "high_watermark": self.high_watermark,
            "log_end_offset": self.log_end_offset,
            "size_bytes": self.size_bytes,
            "retention_ms": s.retention_ms,
            "retention_bytes": s.retention_bytes,
            "cleanup_policy": sorted(s.cleanup_policy),
            "segment_ms": s.segment_ms,
            "segment_bytes": s.segment_bytes,
            "roll_first": self.roll_first,
            "deletable_segments": self.deletable_count,
            "deletable_bytes": self.deletable_bytes,
            "segments": [v.to_wire() for v in self.segments],
            "remote_storage_enable": False,
            "local_log_start_offset": None,
            "local_retention_ms": None,
            "local_retention_bytes": None,
        }


def format_duration_ms(ms: int) -> str:
    """A short human duration: `250ms`, `42s`, `3m20s`, `5h0m`, `7d0h`."""
    sign = "-" if ms < 0 else ""
    ms = abs(ms)
    if ms < 1000:
        return f"{sign}{ms}ms"
    s = ms // 1000
    if s < 60:
        return f"{sign}{s}s"
    if s < 3600:
        return f"{sign}{s // 60}m{s % 60}s"
    if s < 86400:
        return f"{sign}{s // 3600}h{s % 3600 // 60}m"
    return f"{sign}{s // 86400}d{s % 86400 // 3600}h"


def explain_retention(
    segments: Sequence[SegmentMeta],
    settings: RetentionSettings,
    log_start_offset: int,
    high_watermark: int,
    now_ms: int,
) -> RetentionExplanation:
    """Every segment's verdict, oldest first, consistent with `plan_deletion`."""
    plan = plan_deletion(segments, settings, log_start_offset, high_watermark, now_ms)
    after_start = sum(s.size_bytes for s in segments[plan.start_offset_count :])
    ctx = _Context(
        segments,
        settings,
        log_start_offset,
        high_watermark,
        now_ms,
        plan,
        size_after_start_bytes=after_start,
        excess_after_size_bytes=_excess_after_size_pass(segments, settings, plan, after_start),
    )
    verdicts: list[SegmentVerdict] = []
    first_kept: tuple[int, Verdict] | None = None
    for index in range(len(segments)):
        if index < plan.total:
            verdict, reason = ctx.delete_verdict(index)
        elif first_kept is None:
            verdict, reason = ctx.keep_verdict(index)
            first_kept = (index, verdict)
        elif ctx.would_go_alone(index):
            blocker, blocker_verdict = first_kept
            verdict = Verdict.KEEP_BLOCKED
            reason = (
                f"retention would delete it, but segment {segments[blocker].base_offset} "
                f"before it is kept ({blocker_verdict.value}) and segments go only "
                "oldest first"
            )
        else:
            verdict, reason = ctx.keep_verdict(index)
        verdicts.append(ctx.segment_verdict(index, verdict, reason))
    return RetentionExplanation(
        now_ms=now_ms,
        log_start_offset=log_start_offset,
        high_watermark=high_watermark,
        log_end_offset=segments[-1].next_offset if segments else log_start_offset,
        size_bytes=sum(s.size_bytes for s in segments),
        settings=settings,
        roll_first=plan.roll_first,
        segments=tuple(verdicts),
    )


def _excess_after_size_pass(
    segments: Sequence[SegmentMeta],
    settings: RetentionSettings,
    plan: DeletionPlan,
    size_after_start_bytes: int,
) -> int | None:
    """The bytes the log could still shed under retention.bytes after the size pass."""
    if not settings.size_limited:
        return None
    excess = size_excess_bytes(size_after_start_bytes, settings.retention_bytes)
    if excess is None:
        return None
    start = plan.start_offset_count
    return excess - sum(s.size_bytes for s in segments[start : start + plan.size_count])


@dataclass(frozen=True, slots=True)
class _Context:
    segments: Sequence[SegmentMeta]
    settings: RetentionSettings
    log_start_offset: int
    high_watermark: int
    now_ms: int
    plan: DeletionPlan
    size_after_start_bytes: int  # the log as the size pass sees it
    excess_after_size_bytes: int | None

    def segment_verdict(self, index: int, verdict: Verdict, reason: str) -> SegmentVerdict:
        seg = self.segments[index]
        ts = segment_timestamp_ms(seg)
        return SegmentVerdict(
            base_offset=seg.base_offset,
            next_offset=seg.next_offset,
            size_bytes=seg.size_bytes,
            largest_timestamp_ms=seg.largest_timestamp_ms,
            timestamp_ms=ts,
            timestamp_from_mtime=seg.largest_timestamp_ms < 0,
            age_ms=self.now_ms - ts,
            is_active=seg.is_active,
            verdict=verdict,
            reason=reason,
        )

    def _age_text(self, index: int) -> str:
        seg = self.segments[index]
        age = format_duration_ms(self.now_ms - segment_timestamp_ms(seg))
        if seg.largest_timestamp_ms < 0:
            return f"its file was last modified {age} ago (it holds no timestamps)"
        return f"its newest record is {age} old"

    def delete_verdict(self, index: int) -> tuple[Verdict, str]:
        s = self.settings
        boundary = self.plan.start_offset_count
        if index < boundary:
            upper = upper_bound_offset(self.segments, index)
            reason = (
                f"every offset in it (< {upper}) is below the log start offset "
                f"{self.log_start_offset}"
            )
            verdict = Verdict.DELETE_START_OFFSET
        elif index < boundary + self.plan.size_count:
            reason = (
                f"the log holds {self.size_after_start_bytes} bytes, over "
                f"retention.bytes={s.retention_bytes}, and stays at or above it without this "
                "segment"
            )
            verdict = Verdict.DELETE_SIZE
        else:
            reason = (
                f"{self._age_text(index)}, older than "
                f"retention.ms={s.retention_ms} ({format_duration_ms(s.retention_ms)})"
            )
            verdict = Verdict.DELETE_TIME
        if self.plan.roll_first and index == len(self.segments) - 1:
            reason += "; every segment may go, so the log rolls a new empty segment first"
        return verdict, reason

    def would_go_alone(self, index: int) -> bool:
        """Whether some rule would delete this segment if the ones before it were gone."""
        segs = self.segments
        if not high_watermark_allows(upper_bound_offset(segs, index), self.high_watermark):
            return False
        if is_empty_last(segs, index):
            return False
        if log_start_breached(next_base_offset(segs, index), self.log_start_offset):
            return True
        s = self.settings
        if s.time_limited and time_breached(
            segment_timestamp_ms(segs[index]), self.now_ms, s.retention_ms
        ):
            return True
        excess = self.excess_after_size_bytes
        return excess is not None and size_breached(excess, segs[index].size_bytes)

    def keep_verdict(self, index: int) -> tuple[Verdict, str]:
        """Why this segment stays, judged on its own (the walk's blockers come first)."""
        segs = self.segments
        seg = segs[index]
        s = self.settings
        if is_empty_last(segs, index):
            return Verdict.KEEP_ACTIVE, (
                "it is the active segment and it is empty: the next append goes here, "
                "and a log always keeps one segment"
            )
        upper = upper_bound_offset(segs, index)
        if not high_watermark_allows(upper, self.high_watermark):
            return Verdict.KEEP_HIGH_WATERMARK, (
                f"it holds offsets up to {upper - 1}, at or above the high watermark "
                f"{self.high_watermark}; only data below the high watermark is deleted"
            )
        if not s.deletes:
            return Verdict.KEEP_COMPACT, (
                f"cleanup.policy={','.join(sorted(s.cleanup_policy))} has no 'delete': only "
                "segments below the log start offset are removed; the cleaner compacts the rest"
            )
        ts = segment_timestamp_ms(seg)
        if s.time_limited and ts > self.now_ms:
            return Verdict.KEEP_FUTURE_TIMESTAMP, (
                f"its newest timestamp is {format_duration_ms(ts - self.now_ms)} in the "
                "future, so it never ages past retention.ms; it also holds back every later "
                "segment"
            )
        reason = self._within_retention_text(index)
        if seg.is_active or index == len(segs) - 1:
            if s.time_limited:
                reason += (
                    ". A segment goes only when its newest record expires, and new records "
                    f"land here until it rolls ({self._roll_text()}), so its oldest records "
                    "can stay up to segment.ms + retention.ms"
                )
            else:
                reason += f". New records land here until it rolls ({self._roll_text()})"
            return Verdict.KEEP_ACTIVE, f"it is the active segment; {reason}"
        return Verdict.KEEP_WITHIN_RETENTION, reason

    def _within_retention_text(self, index: int) -> str:
        s = self.settings
        parts: list[str] = []
        if s.retention_ms < 0:
            parts.append("retention.ms=-1 (no time limit)")
        else:
            parts.append(
                f"{self._age_text(index)}, within retention.ms={s.retention_ms} "
                f"({format_duration_ms(s.retention_ms)})"
            )
        if s.retention_bytes < 0:
            parts.append("retention.bytes=-1 (no size limit)")
        else:
            excess = self.excess_after_size_bytes
            if excess is None:
                parts.append(f"the log is under retention.bytes={s.retention_bytes}")
            else:
                parts.append(
                    f"without its {self.segments[index].size_bytes} bytes the log would fall "
                    f"below retention.bytes={s.retention_bytes}"
                )
        return "; ".join(parts)

    def _roll_text(self) -> str:
        s = self.settings
        parts = []
        if s.segment_bytes is not None:
            parts.append(f"segment.bytes={s.segment_bytes}")
        if s.segment_ms is not None:
            parts.append(f"segment.ms={s.segment_ms} ({format_duration_ms(s.segment_ms)})")
        return " or ".join(parts) if parts else "segment.bytes or segment.ms"
