"""The `remote_segments` API (an extension, docs/protocol.md §9): which objects of the
remote tier hold a partition's offsets below its local log start.

Readers outside the broker (the Spark connector's tasks) then GET those objects from
the bucket themselves. The answer comes from each partition's in-memory view of its
manifest (`Log.remote`, the COPY_SEGMENT_FINISHED entries) and the broker's store
settings, and the aborted transactions of the listed range from the segments'
`.txnindex` objects (small, cached by the broker); no credential is sent. Answered
per partition, so an unknown partition never fails its neighbours.
"""

from __future__ import annotations

import functools

from broker import remote_read
from broker.context import BrokerContext
from broker.handlers.common import get_log, high_watermark, partition_error, require_topic
from protocol.api_types import (
    RemoteSegment,
    RemoteSegmentsAnswer,
    RemoteSegmentsPartition,
    RemoteSegmentsPartitionAnswer,
    RemoteSegmentsRequest,
    RemoteStore,
)
from storage.log import Log
from storage.remote.remote_segment import RemoteSegmentRef

# Segments one partition's answer lists at most (a reader asks again from the last one's
# end): bounds the answer at a few hundred KiB however long the remote tier is.
MAX_SEGMENTS_PER_PARTITION = 2000
_INDEX_SUFFIX = ".index"


async def remote_segments(ctx: BrokerContext, body: RemoteSegmentsRequest) -> RemoteSegmentsAnswer:
    """Per partition, the readable remote segments holding offsets of the asked range that
    only the store serves (below the local log start)."""
    topic = body["topic"]
    require_topic(ctx, topic)
    settings = ctx.config.remote_store_settings
    store: RemoteStore | None = None
    if settings is not None:
        store = {
            "bucket": settings.bucket,
            "prefix": settings.prefix,
            "endpoint": settings.endpoint or None,
            "region": settings.region or None,
            "path_style": settings.path_style,
        }
    partitions = []
    for wanted in body["partitions"]:
        try:
            plog = get_log(ctx, topic, wanted["partition"])
            answer = _partition(plog, wanted)
            listed = answer.get("segments") or []
            if listed:  # a read_committed reader of the objects needs the aborted list
                low = max(wanted["start_offset"], listed[0]["base_offset"])
                high = listed[-1]["end_offset"] + 1
                where = f"{topic}-{wanted['partition']} aborted transactions"
                aborted = await remote_read.call(
                    ctx, functools.partial(plog.aborted_transactions_between, low, high), where
                )
                answer["aborted_transactions"] = [
                    {"producer_id": pid, "first_offset": first} for pid, first in aborted
                ]
            partitions.append(answer)
        except Exception as exc:
            error, message = partition_error(exc)
            failed: RemoteSegmentsPartitionAnswer = {
                "partition": wanted["partition"],
                "error": error,
                "message": message,
            }
            partitions.append(failed)
    return {"topic": topic, "store": store, "partitions": partitions}


def _partition(plog: Log, wanted: RemoteSegmentsPartition) -> RemoteSegmentsPartitionAnswer:
    start, local_start = plog.log_start_offset, plog.local_log_start_offset
    hw = high_watermark(plog)
    end = hw if wanted["end_offset"] < 0 else min(wanted["end_offset"], hw)
    low, high = max(wanted["start_offset"], start), min(end, local_start)
    segments: list[RemoteSegment] = []
    remote = plog.remote
    if remote is not None and low < high:
        for ref in remote.segments():
            if ref.end_offset >= low and ref.base_offset < high:
                segments.append(_segment(ref))
                if len(segments) >= MAX_SEGMENTS_PER_PARTITION:
                    break
    return {
        "partition": wanted["partition"],
        "error": None,
        "message": None,
        "log_start_offset": start,
        "local_log_start_offset": local_start,
        "high_watermark": hw,
        "segments": segments,
    }


def _segment(ref: RemoteSegmentRef) -> RemoteSegment:
    return {
        "log_key": ref.log_key,
        "index_key": f"{ref.stem}{_INDEX_SUFFIX}",
        "base_offset": ref.base_offset,
        "end_offset": ref.end_offset,
        "size_bytes": ref.size_bytes,
        "base_timestamp_ms": ref.base_timestamp_ms,
        "max_timestamp_ms": ref.max_timestamp_ms,
    }
