"""The produce API: append each partition's batches, on the event loop when the
batch headers promise cheap validation, else in a worker thread; `acks: -1` waits
for the group commit's fsync beside the requests that follow (`Deferred`)."""

from __future__ import annotations

import trio

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
from protocol.batch import (
    COMPRESSION_MASK,
    F_ATTRIBUTES,
    F_RECORD_COUNT,
    HEADER_SIZE,
    BatchWalk,
)
from protocol.errors import RequestTimedOut, TidelogError, UnknownTopicOrPartition
from protocol.schemas import check_topic_name
from storage.log import Log

log = get_logger(component="handlers")

# The event-loop budget of one append. Validation costs ~0.3 ms per 1,000-record
# 100 KB batch (a default 1 MiB producer request: ~3 ms) and at worst ~60 ns per byte
# of the densest msgpack (~60 ms for 1 MiB), so an append is validated on the loop only
# if it is uncompressed, at most this many bytes, its batch headers promise at most
# this many records and each payload's array header agrees with its record_count.
# Anything else goes to a worker thread, decided from those header facts before any
# decoding: a compressed batch's decoded size is unknown until it is decompressed (a
# 3.6 KB zstd batch can hold 6.5 M records). Sending every 1 MiB request to a thread
# instead would cost ~20% of produce throughput (two thread hops under GIL contention).
INLINE_APPEND_MAX_BYTES = 1024 * 1024
INLINE_APPEND_MAX_RECORDS = 16_384
# Batch headers read to make that choice; a request packing more goes to a worker.
INLINE_APPEND_MAX_BATCHES = 16


async def _get_or_create_log(ctx: BrokerContext, topic: str, partition: int) -> Log:
    try:
        return get_log(ctx, topic, partition)
    except UnknownTopicOrPartition:
        if not ctx.config.auto_create_topics_enable or topic in ctx.manager.topics():
            raise
        check_topic_name(topic)
        try:
            await trio.to_thread.run_sync(
                ctx.manager.create_topic, topic, ctx.config.num_partitions, {}
            )
            log.info("topic_auto_created", topic=topic, partitions=ctx.config.num_partitions)
        except TidelogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                raise
        return get_log(ctx, topic, partition)


def append_inline(records: bytes | bytearray | memoryview) -> bool:
    """True if validating `records` fits the event-loop budget, judged from the batch
    headers alone (sizes, compression, record counts): nothing is decoded here."""
    if len(records) > INLINE_APPEND_MAX_BYTES:
        return False
    count = 0
    for batches, (pos, fields) in enumerate(BatchWalk(records), start=1):
        count += fields[F_RECORD_COUNT]
        if fields[F_ATTRIBUTES] & COMPRESSION_MASK or batches > INLINE_APPEND_MAX_BATCHES:
            return False
        if count > INLINE_APPEND_MAX_RECORDS:
            return False
        if _array_length(records, pos + HEADER_SIZE) != fields[F_RECORD_COUNT]:
            return False  # a lying header: the decoder would build what the array says
    # Bytes the walk stopped at are refused by the append before anything is decoded.
    return True


# msgpack's array16 and array32 tags: the width of the count that follows.
_ARRAY_COUNT_WIDTHS = {0xDC: 2, 0xDD: 4}


def _array_length(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """The element count a msgpack array header at `pos` announces (None if not one)."""
    if pos >= len(buf):
        return None
    tag = buf[pos]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    width = _ARRAY_COUNT_WIDTHS.get(tag)
    if width is None or pos + 1 + width > len(buf):
        return None
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")


async def produce(
    ctx: BrokerContext, body: ProduceRequest
) -> ProduceAnswer | Deferred[ProduceAnswer] | None:
    acks = body["acks"]
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
                if append_inline(records):
                    info = plog.append(records)
                else:  # decoding it could stall every other client
                    info = await trio.to_thread.run_sync(plog.append, records)
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
