"""Retention: which segments of a partition may be deleted and why, as small pure
functions of segment metadata and config, plus the pass that applies them.

It imports `storage` and `protocol` only; scheduling belongs to `broker`.
"""

from retention.explain import RetentionExplanation, SegmentVerdict, Verdict, explain_retention
from retention.rules import (
    DeleteReason,
    DeletionPlan,
    RetentionSettings,
    SegmentMeta,
    plan_deletion,
)
from retention.task import (
    MAX_SEGMENTS_DELETED_PER_PASS,
    Deletion,
    PassResult,
    RetentionStatistics,
    RetentionTask,
    apply_retention,
    explain_log,
)

__all__ = [
    "MAX_SEGMENTS_DELETED_PER_PASS",
    "DeleteReason",
    "Deletion",
    "DeletionPlan",
    "PassResult",
    "RetentionExplanation",
    "RetentionSettings",
    "RetentionStatistics",
    "RetentionTask",
    "SegmentMeta",
    "SegmentVerdict",
    "Verdict",
    "apply_retention",
    "explain_log",
    "explain_retention",
    "plan_deletion",
]
