"""The `remote_segments` API (a Tidelog extension): its typed call and answer records.

`remote_segments` says which objects of the remote tier (docs/tiered-storage.md) hold a
partition's offsets, so a reader outside the broker can GET them from the bucket itself:
the Spark connector plans its ranges with it and its tasks read cold data straight from
the store (docs/spark.md "Reading cold data from the bucket").

    -> {"topic": "orders", "partitions": [{"partition": 0, "start_offset": 0,
                                            "end_offset": 5000}]}
    <- {"topic": "orders",
        "store": {"bucket": "logs", "prefix": "tidelog", "endpoint": "http://s3:9000",
                  "region": "us-east-1", "path_style": true},
        "partitions": [{"partition": 0, "error": nil, "message": nil,
                        "log_start_offset": 0, "local_log_start_offset": 4000,
                        "high_watermark": 9000,
                        "segments": [{"log_key": "tidelog/orders-0/000...0-<uuid>.log",
                                      "index_key": "tidelog/orders-0/000...0-<uuid>.index",
                                      "base_offset": 0, "end_offset": 1999,
                                      "size_bytes": 1048500, ...}, ...]}]}

The segments listed are the manifest's COPY_SEGMENT_FINISHED entries that hold offsets
in [start_offset, min(end_offset, local_log_start_offset)) and are at or above the log
start offset, in offset order; `end_offset` -1 means the high watermark. `store` is nil
when the broker has no remote storage; credentials never travel.

Its schema is declared and registered in `protocol.schemas` with every other API's;
this module has the typed call and the plain records the connector pickles into tasks.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.calls import Call
from protocol.errors import error_from_wire
from protocol.schemas import REMOTE_SEGMENT, REMOTE_SEGMENTS_SCHEMA, REMOTE_STORE
from protocol.schemas import REMOTE_SEGMENTS as API_NAME

__all__ = [
    "API_NAME",
    "REMOTE_SEGMENT",
    "REMOTE_SEGMENTS_SCHEMA",
    "REMOTE_STORE",
    "PartitionSegments",
    "SegmentObject",
    "StoreInfo",
    "remote_segments",
]


@dataclass(frozen=True, slots=True)
class SegmentObject:
    """One remote segment: its `.log` object (and offset index object) and offsets
    [base_offset, end_offset] (inclusive, the manifest's)."""

    log_key: str
    index_key: str | None
    base_offset: int
    end_offset: int
    size_bytes: int
    base_timestamp_ms: int = -1
    max_timestamp_ms: int = -1


@dataclass(frozen=True, slots=True)
class StoreInfo:
    """Where the broker's remote tier lives (no credentials: the reader brings its own)."""

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str | None = None
    path_style: bool = False


@dataclass(frozen=True, slots=True)
class PartitionSegments:
    """One partition's answer."""

    topic: str
    partition: int
    log_start_offset: int
    local_log_start_offset: int
    high_watermark: int
    segments: tuple[SegmentObject, ...]
    store: StoreInfo | None
    # (producer id, first offset) of the aborted transactions meeting the range.
    aborted_transactions: tuple[tuple[int, int], ...] = ()


def _segment(wire: dict[str, Any]) -> SegmentObject:
    return SegmentObject(
        wire["log_key"],
        wire.get("index_key"),
        wire["base_offset"],
        wire["end_offset"],
        wire["size_bytes"],
        wire.get("base_timestamp_ms", -1),
        wire.get("max_timestamp_ms", -1),
    )


def remote_segments(
    topic: str, ranges: dict[int, tuple[int, int]]
) -> Call[dict[int, PartitionSegments]]:
    """Per partition, the remote objects holding offsets [start, end) (end -1: the high
    watermark). A partition's error is raised as its TidelogError."""
    body = {
        "topic": topic,
        "partitions": [
            {"partition": p, "start_offset": start, "end_offset": end}
            for p, (start, end) in sorted(ranges.items())
        ],
    }

    def extract(answer: dict[str, Any]) -> dict[int, PartitionSegments]:
        wire_store = answer.get("store")
        store = StoreInfo(**wire_store) if wire_store else None
        out: dict[int, PartitionSegments] = {}
        for part in answer["partitions"]:
            if part.get("error"):
                raise error_from_wire(part["error"], part.get("message"))
            out[part["partition"]] = PartitionSegments(
                topic,
                part["partition"],
                part["log_start_offset"],
                part["local_log_start_offset"],
                part["high_watermark"],
                tuple(_segment(s) for s in part.get("segments", [])),
                store,
                tuple(
                    (a["producer_id"], a["first_offset"])
                    for a in part.get("aborted_transactions", [])
                ),
            )
        return out

    return Call(API_NAME, body, extract)
