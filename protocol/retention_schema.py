"""The `explain_retention` API (a Tidelog extension): its schemas and typed call.

Request `{topic, partitions = nil}` (nil = every partition) answers, per partition,
what the next retention pass will do with each segment and why (retention/explain.py
computes it; docs/retention.md explains the verdicts). An unknown topic is a
request-level `UNKNOWN_TOPIC_OR_PARTITION`; an unknown partition number is that
partition's `error`.

Importing this module registers the API in `protocol.schemas.APIS` and
`API_VERSIONS`, so the broker and the clients validate it like any other API.
"""

from __future__ import annotations

from typing import Any

from protocol.calls import Call
from protocol.schemas import (
    API_VERSIONS,
    APIS,
    INT32,
    INT64,
    ApiSchema,
    ListOf,
    Nullable,
    Schema,
    Str,
    Struct,
    _Invalid,
    _type_name,
    opt,
)

API_NAME = "explain_retention"

VERDICTS = frozenset(
    {
        "delete_start_offset",
        "delete_size",
        "delete_time",
        "keep_active",
        "keep_within_retention",
        "keep_high_watermark",
        "keep_blocked",
        "keep_compact",
        "keep_future_timestamp",
    }
)


class Bool(Schema):
    """A msgpack boolean (ints are refused)."""

    def check(self, value: Any) -> Any:
        if type(value) is not bool:
            raise _Invalid(f"expected bool, got {_type_name(value)}")
        return value


_NULLABLE_INT64 = opt(Nullable(INT64), None)

SEGMENT_VERDICT = Struct(
    base_offset=INT64,
    next_offset=INT64,
    size_bytes=INT64,
    largest_timestamp_ms=INT64,
    timestamp_ms=INT64,
    timestamp_from_mtime=Bool(),
    age_ms=INT64,
    is_active=Bool(),
    verdict=Str(VERDICTS),
    deletable=Bool(),
    reason=Str(),
)

PARTITION_EXPLANATION = Struct(
    partition=INT32,
    error=opt(Nullable(Str()), None),
    message=opt(Nullable(Str()), None),
    now_ms=_NULLABLE_INT64,
    log_start_offset=_NULLABLE_INT64,
    high_watermark=_NULLABLE_INT64,
    log_end_offset=_NULLABLE_INT64,
    size_bytes=_NULLABLE_INT64,
    retention_ms=_NULLABLE_INT64,
    retention_bytes=_NULLABLE_INT64,
    cleanup_policy=opt(ListOf(Str()), []),
    segment_ms=_NULLABLE_INT64,
    segment_bytes=_NULLABLE_INT64,
    roll_first=opt(Bool(), False),
    deletable_segments=opt(INT64, 0),
    deletable_bytes=opt(INT64, 0),
    segments=opt(ListOf(SEGMENT_VERDICT), []),
)

EXPLAIN_RETENTION = ApiSchema(
    API_NAME,
    Struct(topic=Str(), partitions=opt(Nullable(ListOf(INT32)), None)),
    Struct(topic=Str(), partitions=ListOf(PARTITION_EXPLANATION)),
)

APIS.setdefault(API_NAME, EXPLAIN_RETENTION)
API_VERSIONS.setdefault(API_NAME, (EXPLAIN_RETENTION.min_version, EXPLAIN_RETENTION.max_version))


def explain_retention(topic: str, partitions: list[int] | None = None) -> Call:
    """A typed call: the answer is the list of per-partition explanations."""

    def extract(body: dict[str, Any]) -> list[dict[str, Any]]:
        return list(body["partitions"])

    return Call(API_NAME, {"topic": topic, "partitions": partitions}, extract)
