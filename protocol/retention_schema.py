"""The `explain_retention` API (a Tidelog extension): its schemas and typed call.

Request `{topic, partitions = nil}` (nil = every partition) answers, per partition,
what the next retention pass will do with each segment and why (retention/explain.py
computes it; docs/retention.md explains the verdicts). An unknown topic is a
request-level `UNKNOWN_TOPIC_OR_PARTITION`; an unknown partition number is that
partition's `error`.

Its schema is declared and registered in `protocol.schemas` with every other API's
(one table, whatever is imported first); this module has its typed call.
"""

from __future__ import annotations

from typing import Any

from protocol.calls import Call
from protocol.schemas import EXPLAIN_RETENTION as API_NAME
from protocol.schemas import (
    EXPLAIN_RETENTION_SCHEMA,
    PARTITION_EXPLANATION,
    SEGMENT_VERDICT,
    VERDICTS,
)

# The schema keeps its old name here too.
EXPLAIN_RETENTION = EXPLAIN_RETENTION_SCHEMA

__all__ = [
    "API_NAME",
    "EXPLAIN_RETENTION",
    "PARTITION_EXPLANATION",
    "SEGMENT_VERDICT",
    "VERDICTS",
    "explain_retention",
]


def explain_retention(
    topic: str, partitions: list[int] | None = None
) -> Call[list[dict[str, Any]]]:
    """A typed call: the answer is the list of per-partition explanations."""

    def extract(body: dict[str, Any]) -> list[dict[str, Any]]:
        return list(body["partitions"])

    return Call(API_NAME, {"topic": topic, "partitions": partitions}, extract)
