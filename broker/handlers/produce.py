"""The produce API: append each partition's batches, on the event loop when their
headers price validation within the budget, else in a worker thread (broker/offload.py);
`acks: -1` waits for the group commit's fsync beside the requests that follow
(`Deferred`). A body from the Kafka edge holds Kafka v2 batches, stored as they are
(`KAFKA_BATCHES_KEY`: never on the msgpack wire, whose bodies hold only the
schema's keys)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any, cast

import trio

from broker import offload
from broker.context import BrokerContext, Deferred
from broker.handlers.common import get_log, partition_error, share_loop
from broker.handlers.group_offsets import check_not_internal
from broker.logging import get_logger
from protocol.api_types import (
    ProduceAnswer,
    ProducePartitionAnswer,
    ProduceRequest,
    ProduceTopicAnswer,
)
from protocol.batch import KAFKA_LAYOUT, LAYOUT, BatchLayout, append_cost_ns
from protocol.errors import RequestTimedOut, TidelogError, UnknownTopicOrPartition
from protocol.schemas import check_topic_name
from storage.log import AppendInfo, Log

log = get_logger(component="handlers")

# Set (True) in a produce body by the Kafka edge (broker/kafka/core.py): the records
# are Kafka v2 batches. Not a schema key, so no msgpack request can carry it.
KAFKA_BATCHES_KEY = "kafka_batches"


async def _get_or_create_log(ctx: BrokerContext, topic: str, partition: int) -> Log:
    try:
        return get_log(ctx, topic, partition)
    except UnknownTopicOrPartition:
        if not ctx.config.auto_create_topics_enable or topic in ctx.manager.topics():
            raise
        check_topic_name(topic)
        try:
            await offload.to_worker(ctx.manager.create_topic, topic, ctx.config.num_partitions, {})
            log.info("topic_auto_created", topic=topic, partitions=ctx.config.num_partitions)
        except TidelogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
        return get_log(ctx, topic, partition)


async def produce(
    ctx: BrokerContext, body: ProduceRequest
) -> ProduceAnswer | Deferred[ProduceAnswer] | None:
    acks = body["acks"]
    kafka = cast("Mapping[str, Any]", body).get(KAFKA_BATCHES_KEY, False)
    layout = KAFKA_LAYOUT if kafka else LAYOUT
    append = functools.partial(_append, layout=layout)
    results: list[ProduceTopicAnswer] = []
    to_sync: list[tuple[ProducePartitionAnswer, Log, int]] = []
    done = 0
    for t in body["topics"]:
        topic = t["topic"]
        parts_out = []
        for p in t["partitions"]:
            done = await share_loop(done)
            res: ProducePartitionAnswer = {
                "partition": p["partition"],
                "error": None,
                "message": None,
            }
            try:
                check_not_internal(topic, "append to")
                plog = await _get_or_create_log(ctx, topic, p["partition"])
                records = p["records"]
                # Priced by the batch format from the headers alone: validation
                # decodes every record, which could stall every other client.
                cost = append_cost_ns(records, layout=layout)
                info = await offload.run(cost, append, plog, records)
            except Exception as exc:
                res["error"], res["message"] = partition_error(exc)
                res["base_offset"] = res["log_append_time"] = res["log_start_offset"] = -1
                log.info(
                    "produce_rejected",
                    topic=topic,
                    partition=p["partition"],
                    error=res["error"],
                    reason=res["message"],
                )
            else:
                res["base_offset"] = info.base_offset
                res["log_append_time"] = info.log_append_time
                res["log_start_offset"] = info.log_start_offset
                if not info.duplicate:  # a retried batch: answered, not stored again
                    ctx.metrics.produced(
                        topic, info.last_offset - info.base_offset + 1, len(records)
                    )
                if acks == -1:
                    to_sync.append((res, plog, info.last_offset + 1))
                elif info.flush_needed:
                    ctx.committer.flush_soon(plog)  # flush.messages / flush.ms
            parts_out.append(res)
        results.append({"topic": topic, "partitions": parts_out})
    if acks == 0:
        return None
    if to_sync:
        timeout_ms = body["timeout_ms"]

        async def finish() -> ProduceAnswer:
            await _wait_durable(ctx, to_sync, timeout_ms)
            return {"topics": results}

        return Deferred(finish)
    return {"topics": results}


def _append(plog: Log, records: bytes, *, layout: BatchLayout) -> AppendInfo:
    return plog.append(records, layout=layout)


async def _wait_durable(
    ctx: BrokerContext, to_sync: list[tuple[ProducePartitionAnswer, Log, int]], timeout_ms: int
) -> None:
    """Wait for the fsync of every appended partition, concurrently, within the timeout."""

    async def one(res: ProducePartitionAnswer, plog: Log, end_offset: int) -> None:
        try:
            with trio.fail_after(timeout_ms / 1000):
                await ctx.committer.wait_durable(plog, end_offset)
        except trio.TooSlowError:
            exc: Exception = RequestTimedOut(
                f"appended at offset {res['base_offset']} but not fsynced within {timeout_ms} ms"
            )
            res["error"], res["message"] = partition_error(exc)
        except Exception as exc:
            res["error"], res["message"] = partition_error(exc)

    if len(to_sync) == 1:
        await one(*to_sync[0])
        return
    async with trio.open_nursery() as nursery:
        for item in to_sync:
            nursery.start_soon(one, *item)
