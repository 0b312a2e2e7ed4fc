"""The fetch API: read each partition within the memory budget, long-poll until
`min_bytes` or `max_wait_ms`; a large read is a `RecordSource` (storage cut and fenced
it) the connection sends from the segment file (broker/fetch_send.py).

A log holds the layout each producer sent. The answer carries §3 batches, Kafka v2
ones converted (protocol.layouts, priced through broker.offload), unless the request
says `kafka_batches` (docs/protocol.md §4): then the batches go as they are stored.
Storage says which layouts a read holds (`FetchData.layouts`), so a read of §3
batches only costs nothing more than before."""

from __future__ import annotations

import functools
from typing import cast

import trio

from broker import offload, remote_read
from broker.context import BrokerContext
from broker.handlers.common import get_log, high_watermark, partition_error, share_loop
from broker.longpoll import FETCH_MAX_WAIT_MS_CAP
from protocol.api_types import FetchAnswer, FetchPartition, FetchPartitionAnswer, FetchRequest
from protocol.batch import ANY_LAYOUT, F_RECORD_COUNT, KAFKA_BATCHES, MAGIC, BatchWalk
from protocol.errors import TidelogError
from protocol.layouts import conversion_cost, to_layout
from storage.fileio import ReadWouldWait, reads_must_not_wait
from storage.log import FetchData, Location, Log
from storage.record_source import RecordSource

# One fetch response never carries more than this many record bytes (Kafka's
# fetch.max.bytes default is 55 MiB); still at least one batch.
FETCH_RESPONSE_MAX_BYTES = 55 * 1024 * 1024
# Reads allowed to return more than this are located from their batch headers and
# sent from the file: a cold read of megabytes must not stall every other client.
INLINE_READ_MAX_BYTES = 256 * 1024
# A large answer is located on the event loop when its header reads all hit the page
# cache (RWF_NOWAIT) and it spans at most this many batches (~2 us of header walk
# each); else in a worker thread, whose hop costs more than walking a few hundred.
INLINE_LOCATE_MAX_BATCHES = 256


async def _read(
    ctx: BrokerContext, plog: Log, offset: int, limit: int, *, min_one: bool
) -> FetchData | Location:
    if plog.needs_remote(offset):  # below the local log start: the object store
        return await remote_read.read(ctx, plog, offset, limit, min_one=min_one)
    if limit <= INLINE_READ_MAX_BYTES:
        return plog.read(offset, limit, min_one=min_one)
    try:
        with reads_must_not_wait():
            return plog.locate(
                offset, limit, min_one=min_one, max_batches=INLINE_LOCATE_MAX_BATCHES
            )
    except ReadWouldWait:
        pass  # a header not cached, or too many: locate where waiting is allowed
    return await offload.to_worker(functools.partial(plog.locate, min_one=min_one), offset, limit)


async def _fetch_once(
    ctx: BrokerContext,
    wanted: list[tuple[str, FetchPartition, Log | None]],
    max_bytes: int,
    *,
    local_read: bool = False,
    kafka_batches: bool = False,
) -> tuple[dict[str, list[FetchPartitionAnswer]], int]:
    """Read every wanted partition once; returns results by topic and record bytes.

    With `local_read` (docs/protocol.md §9), records that would be sent from a segment
    file are described instead (`local`), and `records` is empty. Without
    `kafka_batches`, Kafka v2 batches are converted to §3 ones (never read locally).
    """
    by_topic: dict[str, list[FetchPartitionAnswer]] = {}
    remaining = max_bytes
    total = done = 0
    # Partitions below their local log start, read from the store concurrently first.
    remote = await remote_read.prefetch(ctx, wanted, max_bytes)
    for i, (topic, p, _) in enumerate(wanted):
        done = await share_loop(done)
        res: FetchPartitionAnswer = {"partition": p["partition"], "error": None, "message": None}
        try:
            plog = get_log(ctx, topic, p["partition"])  # afresh: the topic may be gone
            # Never read more than the broker-wide memory budget has room for.
            limit = min(p["max_bytes"], remaining, ctx.memory.room())
            if total and limit <= 0:
                res["records"] = b""
                res["high_watermark"] = high_watermark(plog)
                res["log_start_offset"] = plog.log_start_offset
            else:
                # Only the first partition with data may exceed the limit (one whole batch).
                # The read is charged while it runs, so concurrent reads share the room.
                ctx.memory.charge(max(limit, 1))
                try:
                    data: FetchData | Location | None = _prefetched(
                        remote.pop(i, None), max(limit, 1)
                    )
                    if data is None:
                        data = await _read(
                            ctx, plog, p["offset"], max(limit, 1), min_one=total == 0
                        )
                finally:
                    ctx.memory.release(max(limit, 1), freed=False)
                records = data.records
                if data.layouts & KAFKA_BATCHES and not kafka_batches:
                    records = await _as_tidelog(records)
                res["records"] = records
                res["high_watermark"] = data.high_watermark
                res["log_start_offset"] = data.log_start_offset
                size = len(records)
                if local_read and isinstance(records, RecordSource):
                    local = records.local_records()
                    if local is not None:  # a local file: the client reads it itself
                        res["local"] = local
                        res["records"] = b""
                        records.close()
                total += size
                remaining -= size
        except Exception as exc:
            res["error"], res["message"] = partition_error(exc)
            res["records"], res["high_watermark"], res["log_start_offset"] = b"", -1, -1
        by_topic.setdefault(topic, []).append(res)
    return by_topic, total


def _prefetched(found: FetchData | Exception | None, limit: int) -> FetchData | None:
    """A prefetched remote read if it fits this partition's share of the answer (else
    None: read again with the smaller limit, from the now warm cache); its error is
    this partition's."""
    if isinstance(found, Exception):
        raise found
    if found is None or len(found.records) > limit:
        return None
    return found


def _read_as_tidelog(source: RecordSource) -> bytes:
    try:
        return to_layout(source.read(), MAGIC)
    finally:
        source.close()


async def _as_tidelog(records: bytes | RecordSource) -> bytes:
    """Fetched batches with every Kafka v2 one converted to §3 (a msgpack reader that
    did not ask for Kafka batches). A span is read first, in a worker: it may wait
    for the disk."""
    if isinstance(records, RecordSource):
        return await offload.to_worker(_read_as_tidelog, records)
    return await offload.run(conversion_cost(records), to_layout, records, MAGIC)


async def fetch(ctx: BrokerContext, body: FetchRequest) -> FetchAnswer:
    max_bytes = min(body["max_bytes"], FETCH_RESPONSE_MAX_BYTES)
    min_bytes = body["min_bytes"]
    wait_ms = min(body["max_wait_ms"], FETCH_MAX_WAIT_MS_CAP)
    local_read = body.get("local_read", False)
    kafka_batches = body.get("kafka_batches", False)
    deadline = trio.current_time() + wait_ms / 1000
    wanted: list[tuple[str, FetchPartition, Log | None]] = []
    for t in body["topics"]:
        for p in t["partitions"]:
            try:
                plog = get_log(ctx, t["topic"], p["partition"])
            except TidelogError:
                plog = None  # reported by _fetch_once
            wanted.append((t["topic"], p, plog))
    logs = [plog for _, _, plog in wanted if plog is not None]
    with ctx.notifier.subscribe(logs if wait_ms > 0 and min_bytes > 0 else []) as sub:
        while True:
            by_topic, total = await _fetch_once(
                ctx, wanted, max_bytes, local_read=local_read, kafka_batches=kafka_batches
            )
            if total >= min_bytes or wait_ms <= 0 or not logs or ctx.notifier.closed:
                break
            if _any_error(by_topic):
                break
            if not await sub.wait_until(deadline):
                by_topic, total = await _fetch_once(
                    ctx, wanted, max_bytes, local_read=local_read, kafka_batches=kafka_batches
                )
                break
    for topic, parts in by_topic.items():
        ctx.metrics.fetched(
            topic,
            sum(_sent_bytes(r) for r in parts),
            sum(_sent_records(r) for r in parts),
        )
    return {"topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]}


# What `_fetch_once` puts in a partition's `records`: bytes, or a span sent from the
# file (the schema's type is wider: nil, any sized bin).
_Records = bytes | RecordSource


def _sent_bytes(res: FetchPartitionAnswer) -> int:
    """Record bytes a partition's answer carries, or describes for a local read."""
    local = res.get("local")
    return local["length"] if local is not None else len(cast(_Records, res["records"]))


def _sent_records(res: FetchPartitionAnswer) -> int:
    local = res.get("local")
    if local is not None:
        return local["record_count"]
    return _record_count(cast(_Records, res["records"]))


def _record_count(records: bytes | RecordSource) -> int:
    """Records in fetched batches, from their headers (one struct read per batch).

    For metrics only, counted after every partition was answered: it never fails
    the request (storage checked these headers; a bad one just ends the count).
    """
    if isinstance(records, RecordSource):
        return records.record_count  # counted while locating it
    total = 0
    for _, fields in BatchWalk(records, whole=False, layout=ANY_LAYOUT):
        total += fields[F_RECORD_COUNT]
    return total


def _any_error(by_topic: dict[str, list[FetchPartitionAnswer]]) -> bool:
    return any(r["error"] is not None for parts in by_topic.values() for r in parts)
