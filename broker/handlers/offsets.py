"""The offset APIs over partitions: list_offsets, offset_for_time, delete_records.
Each answers per partition, so one bad partition never fails its neighbours."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TypeVar

from broker import offload, remote_read
from broker.context import BrokerContext
from broker.handlers.common import get_log, high_watermark, partition_error, share_loop
from broker.handlers.group_offsets import check_not_internal
from broker.logging import get_logger
from protocol.api_types import (
    DeleteRecordsAnswer,
    DeleteRecordsPartition,
    DeleteRecordsPartitionAnswer,
    DeleteRecordsRequest,
    ListOffsetsAnswer,
    ListOffsetsPartition,
    ListOffsetsRequest,
    OffsetForTimeAnswer,
    OffsetForTimePartition,
    OffsetForTimeRequest,
    OffsetResult,
)
from storage.log import Log

log = get_logger(component="handlers")

# A partition of a request, and its answer.
P = TypeVar("P", ListOffsetsPartition, OffsetForTimePartition, DeleteRecordsPartition)
R = TypeVar("R")


async def _per_partition(
    ctx: BrokerContext,
    topics: list[tuple[str, list[P]]],
    answer: Callable[[BrokerContext, Log, P], Awaitable[R]],
    failed: Callable[[int, str, str | None], R],
) -> list[tuple[str, list[R]]]:
    """Each topic's partition answers: `answer`, or `failed` with the error's code and message."""
    out = []
    done = 0
    for topic, partitions in topics:
        parts = []
        for p in partitions:
            done = await share_loop(done)
            try:
                plog = get_log(ctx, topic, p["partition"])
                res = await answer(ctx, plog, p)
            except Exception as exc:
                res = failed(p["partition"], *partition_error(exc))
            parts.append(res)
        out.append((topic, parts))
    return out


def _offset(partition: int, offset: int | None, timestamp: int | None) -> OffsetResult:
    return {
        "partition": partition,
        "error": None,
        "message": None,
        "offset": offset,
        "timestamp": timestamp,
    }


def _no_offset(partition: int, error: str, message: str | None) -> OffsetResult:
    return {
        "partition": partition,
        "error": error,
        "message": message,
        "offset": None,
        "timestamp": None,
    }


async def _list_offset(ctx: BrokerContext, plog: Log, p: ListOffsetsPartition) -> OffsetResult:
    spec, partition = p["spec"], p["partition"]
    if spec == "earliest":
        return _offset(partition, plog.log_start_offset, -1)
    if spec == "earliest_local":  # tiered storage: the first offset on local disk
        return _offset(partition, plog.local_log_start_offset, -1)
    if spec == "latest":
        return _offset(partition, high_watermark(plog), -1)
    if plog.remote_time_lookup(None):  # the largest timestamp may lie in the store
        where = f"{plog.topic}-{plog.partition} max timestamp"
        found = await remote_read.call(ctx, plog.max_timestamp, where)
    else:
        found = plog.max_timestamp()
    if found is None:
        return _offset(partition, None, None)
    offset, timestamp = found
    if offset is None or offset < 0:
        return _offset(partition, None, None)
    return _offset(partition, offset, timestamp)


async def list_offsets(ctx: BrokerContext, body: ListOffsetsRequest) -> ListOffsetsAnswer:
    topics = [(t["topic"], t["partitions"]) for t in body["topics"]]
    found = await _per_partition(ctx, topics, _list_offset, _no_offset)
    return {"topics": [{"topic": topic, "partitions": parts} for topic, parts in found]}


async def _offset_for_time(
    ctx: BrokerContext, plog: Log, p: OffsetForTimePartition
) -> OffsetResult:
    timestamp = p["timestamp"]
    if plog.remote_time_lookup(timestamp):  # the answer may lie in the object store
        where = f"{plog.topic}-{plog.partition} timestamp {timestamp}"
        lookup = functools.partial(plog.offset_for_timestamp, timestamp)
        found = await remote_read.call(ctx, lookup, where)
    else:
        found = await offload.to_worker(plog.offset_for_timestamp, timestamp)
    if found is None:
        return _offset(p["partition"], None, None)
    offset, timestamp = found
    return _offset(p["partition"], offset, timestamp)


async def offset_for_time(ctx: BrokerContext, body: OffsetForTimeRequest) -> OffsetForTimeAnswer:
    topics = [(t["topic"], t["partitions"]) for t in body["topics"]]
    found = await _per_partition(ctx, topics, _offset_for_time, _no_offset)
    return {"topics": [{"topic": topic, "partitions": parts} for topic, parts in found]}


async def _delete_records(
    ctx: BrokerContext, plog: Log, p: DeleteRecordsPartition
) -> DeleteRecordsPartitionAnswer:
    check_not_internal(plog.topic, "delete records of")
    # The log checks the range (-1 = high watermark) and the policy (compact-only
    # topics refuse, POLICY_VIOLATION as in Kafka); it may write a checkpoint.
    low = await offload.to_worker(plog.delete_records, p["offset"])
    log.info("records_deleted", topic=plog.topic, partition=plog.partition, low_watermark=low)
    return {"partition": p["partition"], "error": None, "message": None, "low_watermark": low}


def _not_deleted(partition: int, error: str, message: str | None) -> DeleteRecordsPartitionAnswer:
    return {"partition": partition, "error": error, "message": message, "low_watermark": -1}


async def delete_records(ctx: BrokerContext, body: DeleteRecordsRequest) -> DeleteRecordsAnswer:
    topics = [(t["topic"], t["partitions"]) for t in body["topics"]]
    found = await _per_partition(ctx, topics, _delete_records, _not_deleted)
    return {"topics": [{"topic": topic, "partitions": parts} for topic, parts in found]}
