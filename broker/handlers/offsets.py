"""The offset APIs over partitions: list_offsets, offset_for_time, delete_records.
Each answers per partition, so one bad partition never fails its neighbours."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import trio

from broker.context import Answer, Body, BrokerContext
from broker.handlers.common import get_log, high_watermark, partition_error, share_loop
from broker.handlers.group_offsets import check_not_internal
from broker.logging import get_logger
from storage.log import Log

log = get_logger(component="handlers")


async def _per_partition(
    ctx: BrokerContext,
    body: Body,
    fn: Callable[[Log, dict[str, Any]], Awaitable[dict[str, Any]]],
    error_fields: dict[str, Any],
) -> Answer:
    out = []
    done = 0
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            done = await share_loop(done)
            res: dict[str, Any] = {"partition": p["partition"], "error": None, "message": None}
            try:
                plog = get_log(ctx, t["topic"], p["partition"])
                res.update(await fn(plog, p))
            except Exception as exc:
                res["error"], res["message"] = partition_error(exc)
                res.update(error_fields)
            parts.append(res)
        out.append({"topic": t["topic"], "partitions": parts})
    return {"topics": out}


_NO_OFFSET = {"offset": None, "timestamp": None}


async def _list_offset(plog: Log, p: dict[str, Any]) -> dict[str, Any]:
    spec = p["spec"]
    if spec == "earliest":
        return {"offset": plog.log_start_offset, "timestamp": -1}
    if spec == "latest":
        return {"offset": high_watermark(plog), "timestamp": -1}
    found = plog.max_timestamp()
    if found is None:
        return dict(_NO_OFFSET)
    offset, timestamp = found
    if offset is None or offset < 0:
        return dict(_NO_OFFSET)
    return {"offset": offset, "timestamp": timestamp}


async def list_offsets(ctx: BrokerContext, body: Body) -> Answer:
    return await _per_partition(ctx, body, _list_offset, _NO_OFFSET)


async def _offset_for_time(plog: Log, p: dict[str, Any]) -> dict[str, Any]:
    found = await trio.to_thread.run_sync(plog.offset_for_timestamp, p["timestamp"])
    if found is None:
        return dict(_NO_OFFSET)
    offset, timestamp = found
    return {"offset": offset, "timestamp": timestamp}


async def offset_for_time(ctx: BrokerContext, body: Body) -> Answer:
    return await _per_partition(ctx, body, _offset_for_time, _NO_OFFSET)


async def _delete_records(plog: Log, p: dict[str, Any]) -> dict[str, Any]:
    check_not_internal(plog.topic, "delete records of")
    # The log checks the range (-1 = high watermark) and the policy (compact-only
    # topics refuse, POLICY_VIOLATION as in Kafka); it may write a checkpoint.
    low = await trio.to_thread.run_sync(plog.delete_records, p["offset"])
    log.info("records_deleted", topic=plog.topic, partition=plog.partition, low_watermark=low)
    return {"low_watermark": low}


async def delete_records(ctx: BrokerContext, body: Body) -> Answer:
    return await _per_partition(ctx, body, _delete_records, {"low_watermark": -1})
