"""Request handlers: one per API of PROTOCOL.md §4, in the `HANDLERS` table.

`handle_request` turns one decoded frame into a response: it parses the envelope,
validates the body against `protocol.schemas`, runs the handler and maps
exceptions to codes. A `TidelogError` becomes its own code; anything else becomes
`UNKNOWN_SERVER_ERROR` for that request only, logged with its traceback. APIs
over partitions report failures per partition, so one bad partition never fails
its neighbours.

Appends and small reads run on the event loop (one `write` / `pread` each);
admin changes, fsyncs and large reads run in worker threads.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import structlog
import trio

from broker.config import BrokerConfig, unknown_key_error
from broker.fetch_send import RecordSpan, locate_records, record_count
from broker.groupcommit import GroupCommitter
from broker.handlers_offsets import OFFSETS_HANDLERS, check_not_internal
from broker.housekeeping import explain_retention_handler
from broker.logging import get_logger
from broker.longpoll import FETCH_MAX_WAIT_MS_CAP, AppendNotifier
from broker.membudget import MemoryBudget
from broker.metrics import BrokerMetrics
from protocol.batch import HEADER_SIZE, iter_headers, read_header
from protocol.clock import ClockMs, wall_clock_ms
from protocol.envelope import Response, error_response, parse_request, request_id_of
from protocol.errors import (
    InvalidPartitions,
    InvalidRequest,
    RequestTimedOut,
    StorageError,
    TidelogError,
    UnknownServerError,
    UnknownTopicOrPartition,
)
from protocol.schemas import API_VERSIONS, check_topic_name, validate_request
from storage.config import TOPIC_CONFIG_DEFS

if TYPE_CHECKING:
    from broker.connection import ConnectionState

log = get_logger(component="handlers")

SERVER_NAME = "tidelog"
try:
    from importlib.metadata import version as _dist_version

    SERVER_VERSION = _dist_version("tidelog")
except Exception:  # running from a tree that was never installed
    SERVER_VERSION = "0.0.0"

# Partitions one topic may have: each is a directory with open files, and a
# typo of 10^6 should not exhaust file descriptors (BI-09).
MAX_PARTITIONS_PER_TOPIC = 10_000
# One fetch response never carries more than this many record bytes (Kafka's
# fetch.max.bytes default is 55 MiB); still at least one batch.
FETCH_RESPONSE_MAX_BYTES = 55 * 1024 * 1024
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
# Per-partition loops yield to other tasks this often, so a request naming thousands
# of partitions shares the loop instead of holding it for all of them.
PARTITIONS_PER_CHECKPOINT = 64
# Reads allowed to return more than this go to a worker thread: a cold read of
# megabytes must not stall every other client on the event loop.
INLINE_READ_MAX_BYTES = 256 * 1024


@dataclass
class BrokerContext:
    """What every handler may use: config, storage and the broker's shared services."""

    config: BrokerConfig
    manager: Any  # storage.manager.LogManager
    notifier: AppendNotifier
    committer: GroupCommitter
    metrics: BrokerMetrics
    connections: dict[int, ConnectionState] = field(default_factory=dict)
    inflight_total: int = 0
    clock_ms: ClockMs = wall_clock_ms  # the broker's one wall clock (protocol/clock.py)
    memory: MemoryBudget = field(init=False)  # queued.max.request.bytes, broker-wide

    def __post_init__(self) -> None:
        self.memory = MemoryBudget(self.config.queued_max_request_bytes)

    def connection_opened(self, state: ConnectionState) -> None:
        self.connections[state.conn_id] = state
        self.metrics.get("tidelog_connections").set(len(self.connections))
        self.metrics.get("tidelog_connections_opened").inc()

    def inflight_changed(self, state: ConnectionState, delta: int) -> None:
        """A request was read (+1) or answered (-1) on `state`'s connection."""
        state.inflight += delta
        self.inflight_total += delta
        self.metrics.get("tidelog_inflight_requests").set(self.inflight_total)

    def connection_closed(self, state: ConnectionState) -> None:
        self.memory.release(state.held_bytes)  # whatever its queues still held
        state.held_bytes = 0
        self.inflight_changed(state, -state.inflight)
        self.connections.pop(state.conn_id, None)
        self.metrics.get("tidelog_connections").set(len(self.connections))
        self.metrics.get("tidelog_connections_closed").labels(state.close_reason).inc()

    def request_finished(self, api: str, error: str | None, duration_s: float) -> None:
        self.metrics.request_finished(api, error, duration_s)

    def drain(self) -> None:
        """Stop reading new requests on every connection; queued ones are still answered."""
        for state in list(self.connections.values()):
            state.reader_scope.cancel()
        self.notifier.close()


@dataclass(frozen=True, slots=True)
class Deferred:
    """A handler result that needs more waiting (an `acks: -1` fsync).

    The connection completes it beside the requests that follow and writes its
    response in its place, so pipelined durable produces share fsync rounds.
    """

    finish: Callable[[], Awaitable[dict[str, Any]]]


Handler = Callable[[BrokerContext, dict[str, Any]], Awaitable[dict[str, Any] | Deferred | None]]


# --- helpers ----------------------------------------------------------------


def _partition_error(exc: BaseException) -> tuple[str, str | None]:
    """(code, message) for a per-partition failure; unexpected ones are logged."""
    if isinstance(exc, TidelogError):
        return exc.code, exc.message or None
    if isinstance(exc, OSError):
        log.error("storage_error", error=str(exc), errno=exc.errno)
        return StorageError.code, str(exc)
    log.error("partition_request_failed", exc_info=exc)
    return UnknownServerError.code, f"{type(exc).__name__}: {exc}"


def _get_log(ctx: BrokerContext, topic: str, partition: int) -> Any:
    try:
        return ctx.manager.get_log(topic, partition)
    except TidelogError:
        raise
    except (KeyError, IndexError) as exc:
        raise UnknownTopicOrPartition(f"unknown topic or partition {topic}-{partition}") from exc


async def _share_loop(done: int) -> int:
    """Count one partition of a request; every PARTITIONS_PER_CHECKPOINT, let other
    tasks run (a per-partition loop never holds the event loop for a whole request)."""
    done += 1
    if done % PARTITIONS_PER_CHECKPOINT == 0:
        await trio.lowlevel.checkpoint()
    return done


def _high_watermark(plog: Any) -> int:
    """High watermark; on a single broker it is the log end offset (DESIGN.md)."""
    return plog.high_watermark


# --- admin APIs ---------------------------------------------------------------


async def api_versions(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    return {
        "server": SERVER_NAME,
        "version": SERVER_VERSION,
        "apis": {name: list(API_VERSIONS.get(name, (1, 1))) for name in sorted(HANDLERS)},
        "limits": {
            "socket.request.max.bytes": ctx.config.socket_request_max_bytes,
            "message.max.bytes": ctx.config.message_max_bytes,
        },
    }


async def create_topic(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    topic, partitions, configs = body["topic"], body["partitions"], body["configs"]
    check_topic_name(topic)
    check_not_internal(topic, "create")
    if not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
        raise InvalidPartitions(
            f"partitions must be between 1 and {MAX_PARTITIONS_PER_TOPIC}, got {partitions}"
        )
    _check_topic_keys(configs)
    str_configs = {k: _config_text(v) for k, v in configs.items()}
    await trio.to_thread.run_sync(ctx.manager.create_topic, topic, partitions, str_configs)
    return {}


async def delete_topic(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    topic = body["topic"]
    check_topic_name(topic)
    check_not_internal(topic, "delete")
    _require_topic(ctx, topic)
    logs = [ctx.manager.get_log(topic, p) for p in range(ctx.manager.partition_count(topic))]
    await trio.to_thread.run_sync(ctx.manager.delete_topic, topic)
    for plog in logs:
        ctx.notifier.wake(plog)  # their long polls answer UNKNOWN_TOPIC_OR_PARTITION now
    ctx.metrics.forget_topic(topic)
    return {}


def _check_topic_keys(names: Iterable[str]) -> None:
    """INVALID_CONFIG for an unknown topic key, naming the closest valid one."""
    for name in names:
        if name not in TOPIC_CONFIG_DEFS:
            raise unknown_key_error(name, TOPIC_CONFIG_DEFS)


def _config_text(value: Any) -> str:
    """Config values travel as str, int, float or bool; storage parses Kafka's text form."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _partition_meta(plog: Any, partition: int) -> dict[str, Any]:
    return {
        "partition": partition,
        "log_start_offset": plog.log_start_offset,
        "high_watermark": _high_watermark(plog),
        "log_end_offset": plog.log_end_offset,
        "size_bytes": plog.size_bytes,
        "segments": plog.segment_count,
    }


async def metadata(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    names = body["topics"]
    known = set(ctx.manager.topics())
    wanted = sorted(known) if names is None else list(names)
    out = []
    done = 0
    for topic in wanted:
        done = await _share_loop(done)  # every topic's partitions are listed: share the loop
        entry: dict[str, Any] = {"topic": topic, "error": None, "message": None}
        try:
            if topic not in known:
                raise UnknownTopicOrPartition(f"unknown topic {topic!r}")
            count = ctx.manager.partition_count(topic)
            entry["configs"] = dict(ctx.manager.topic_overrides(topic))
            entry["partitions"] = [
                _partition_meta(ctx.manager.get_log(topic, p), p) for p in range(count)
            ]
        except Exception as exc:
            entry["error"], entry["message"] = _partition_error(exc)
            entry["configs"], entry["partitions"] = {}, []
        out.append(entry)
    return {"topics": out}


def _require_topic(ctx: BrokerContext, topic: str) -> None:
    check_topic_name(topic)
    if topic not in ctx.manager.topics():
        raise UnknownTopicOrPartition(f"unknown topic {topic!r}")


async def describe_configs(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    topic = body["topic"]
    _require_topic(ctx, topic)
    overrides = ctx.manager.topic_overrides(topic)
    return {"configs": ctx.config.describe_topic_configs(overrides)}


async def alter_configs(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    topic = body["topic"]
    _require_topic(ctx, topic)
    check_not_internal(topic, "alter the configs of")
    _check_topic_keys([*body["set"], *body["delete"]])
    new_values = {k: _config_text(v) for k, v in body["set"].items()}
    # The manager validates the whole result, persists it, applies it to every
    # partition at once and logs `config_changed`.
    await trio.to_thread.run_sync(
        ctx.manager.alter_topic_config, topic, new_values, list(body["delete"])
    )
    return {}


# --- produce ------------------------------------------------------------------


async def _get_or_create_log(ctx: BrokerContext, topic: str, partition: int) -> Any:
    try:
        return _get_log(ctx, topic, partition)
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
        return _get_log(ctx, topic, partition)


def append_inline(records: bytes | bytearray | memoryview) -> bool:
    """True if validating `records` fits the event-loop budget, judged from the batch
    headers alone (sizes, compression, record counts): nothing is decoded here."""
    if len(records) > INLINE_APPEND_MAX_BYTES:
        return False
    pos = batches = count = 0
    while pos + HEADER_SIZE <= len(records):
        try:
            header = read_header(records, pos)
        except TidelogError:
            return True  # refused at once by the append, before any decoding
        batches += 1
        count += header.record_count
        if header.compression or batches > INLINE_APPEND_MAX_BATCHES:
            return False
        if count > INLINE_APPEND_MAX_RECORDS:
            return False
        if _array_length(records, pos + HEADER_SIZE) != header.record_count:
            return False  # a lying header: the decoder would build what the array says
        pos += header.size
    return True


def _array_length(buf: bytes | bytearray | memoryview, pos: int) -> int | None:
    """The element count a msgpack array header at `pos` announces (None if not one)."""
    if pos >= len(buf):
        return None
    tag = buf[pos]
    if 0x90 <= tag <= 0x9F:
        return tag & 0x0F
    width = {0xDC: 2, 0xDD: 4}.get(tag)
    if width is None or pos + 1 + width > len(buf):
        return None
    return int.from_bytes(buf[pos + 1 : pos + 1 + width], "big")


async def produce(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any] | Deferred | None:
    acks = body["acks"]
    results: list[dict[str, Any]] = []
    to_sync: list[tuple[dict[str, Any], Any, int]] = []
    done = 0
    for t in body["topics"]:
        topic = t["topic"]
        parts_out = []
        for p in t["partitions"]:
            done = await _share_loop(done)
            res: dict[str, Any] = {"partition": p["partition"], "error": None, "message": None}
            try:
                check_not_internal(topic, "append to")
                plog = await _get_or_create_log(ctx, topic, p["partition"])
                records = p["records"]
                if append_inline(records):
                    info = plog.append(records)
                else:  # decoding it could stall every other client
                    info = await trio.to_thread.run_sync(plog.append, records)
            except Exception as exc:
                res["error"], res["message"] = _partition_error(exc)
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
                ctx.metrics.produced(topic, info.last_offset - info.base_offset + 1, len(records))
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

        async def finish() -> dict[str, Any]:
            await _wait_durable(ctx, to_sync, timeout_ms)
            return {"topics": results}

        return Deferred(finish)
    return {"topics": results}


async def _wait_durable(
    ctx: BrokerContext, to_sync: list[tuple[dict[str, Any], Any, int]], timeout_ms: int
) -> None:
    """Wait for the fsync of every appended partition, concurrently, within the timeout."""

    async def one(res: dict[str, Any], plog: Any, end_offset: int) -> None:
        try:
            with trio.fail_after(timeout_ms / 1000):
                await ctx.committer.wait_durable(plog, end_offset)
        except trio.TooSlowError:
            exc: Exception = RequestTimedOut(
                f"appended at offset {res['base_offset']} but not fsynced within {timeout_ms} ms"
            )
            res["error"], res["message"] = _partition_error(exc)
        except Exception as exc:
            res["error"], res["message"] = _partition_error(exc)

    if len(to_sync) == 1:
        await one(*to_sync[0])
        return
    async with trio.open_nursery() as nursery:
        for item in to_sync:
            nursery.start_soon(one, *item)


# --- fetch --------------------------------------------------------------------


async def _read(plog: Any, offset: int, limit: int, *, min_one: bool) -> Any:
    if limit <= INLINE_READ_MAX_BYTES:
        return plog.read(offset, limit, min_one=min_one)
    # A large answer: located in a worker thread, its records sent from the file.
    return await trio.to_thread.run_sync(
        functools.partial(locate_records, min_one=min_one), plog, offset, limit
    )


async def _fetch_once(
    ctx: BrokerContext,
    wanted: list[tuple[str, dict[str, Any], Any]],
    max_bytes: int,
    *,
    local_read: bool = False,
) -> tuple[dict[str, list[dict[str, Any]]], int]:
    """Read every wanted partition once; returns results by topic and record bytes.

    With `local_read` (docs/protocol.md §9), records that would be sent from a segment
    file are described instead (`local`), and `records` is empty.
    """
    by_topic: dict[str, list[dict[str, Any]]] = {}
    remaining = max_bytes
    total = done = 0
    for topic, p, _ in wanted:
        done = await _share_loop(done)
        res: dict[str, Any] = {"partition": p["partition"], "error": None, "message": None}
        try:
            plog = _get_log(ctx, topic, p["partition"])  # afresh: the topic may be gone
            # Never read more than the broker-wide memory budget has room for.
            limit = min(p["max_bytes"], remaining, ctx.memory.room())
            if total and limit <= 0:
                res["records"] = b""
                res["high_watermark"] = _high_watermark(plog)
                res["log_start_offset"] = plog.log_start_offset
            else:
                # Only the first partition with data may exceed the limit (one whole batch).
                # The read is charged while it runs, so concurrent reads share the room.
                ctx.memory.charge(max(limit, 1))
                try:
                    data = await _read(plog, p["offset"], max(limit, 1), min_one=total == 0)
                finally:
                    ctx.memory.release(max(limit, 1), freed=False)
                res["records"] = data.records
                res["high_watermark"] = data.high_watermark
                res["log_start_offset"] = data.log_start_offset
                size = len(data.records)
                if local_read and isinstance(data.records, RecordSpan):
                    res["local"] = data.records.local_records()
                    res["records"] = b""
                    data.records.close()
                total += size
                remaining -= size
        except Exception as exc:
            res["error"], res["message"] = _partition_error(exc)
            res["records"], res["high_watermark"], res["log_start_offset"] = b"", -1, -1
        by_topic.setdefault(topic, []).append(res)
    return by_topic, total


async def fetch(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    max_bytes = min(body["max_bytes"], FETCH_RESPONSE_MAX_BYTES)
    min_bytes = body["min_bytes"]
    wait_ms = min(body["max_wait_ms"], FETCH_MAX_WAIT_MS_CAP)
    local_read = body.get("local_read", False)
    deadline = trio.current_time() + wait_ms / 1000
    wanted: list[tuple[str, dict[str, Any], Any]] = []
    for t in body["topics"]:
        for p in t["partitions"]:
            try:
                plog = _get_log(ctx, t["topic"], p["partition"])
            except TidelogError:
                plog = None  # reported by _fetch_once
            wanted.append((t["topic"], p, plog))
    logs = [plog for _, _, plog in wanted if plog is not None]
    with ctx.notifier.subscribe(logs if wait_ms > 0 and min_bytes > 0 else []) as sub:
        while True:
            by_topic, total = await _fetch_once(ctx, wanted, max_bytes, local_read=local_read)
            if total >= min_bytes or wait_ms <= 0 or not logs or ctx.notifier.closed:
                break
            if _any_error(by_topic):
                break
            if not await sub.wait_until(deadline):
                by_topic, total = await _fetch_once(ctx, wanted, max_bytes, local_read=local_read)
                break
    for topic, parts in by_topic.items():
        ctx.metrics.fetched(
            topic,
            sum(_sent_bytes(r) for r in parts),
            sum(_sent_records(r) for r in parts),
        )
    return {"topics": [{"topic": t, "partitions": parts} for t, parts in by_topic.items()]}


def _sent_bytes(res: dict[str, Any]) -> int:
    """Record bytes a partition's answer carries, or describes for a local read."""
    local = res.get("local")
    return local["length"] if local is not None else len(res["records"])


def _sent_records(res: dict[str, Any]) -> int:
    local = res.get("local")
    return local["record_count"] if local is not None else _record_count(res["records"])


def _record_count(records: bytes | RecordSpan) -> int:
    """Records in fetched batches, from their headers (one struct read per batch).

    For metrics only, counted after every partition was answered: it never fails
    the request (storage checked these headers; a bad one just ends the count).
    """
    counted = record_count(records)
    if counted is not None:
        return counted
    total = 0
    try:
        for _, header in iter_headers(records, allow_partial=True):
            total += header.record_count
    except TidelogError:  # CorruptMessage
        pass
    return total


def _any_error(by_topic: dict[str, list[dict[str, Any]]]) -> bool:
    return any(r["error"] is not None for parts in by_topic.values() for r in parts)


# --- offsets ------------------------------------------------------------------


async def _per_partition(
    ctx: BrokerContext,
    body: dict[str, Any],
    fn: Callable[[Any, dict[str, Any]], Awaitable[dict[str, Any]]],
    error_fields: dict[str, Any],
) -> dict[str, Any]:
    out = []
    done = 0
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            done = await _share_loop(done)
            res: dict[str, Any] = {"partition": p["partition"], "error": None, "message": None}
            try:
                plog = _get_log(ctx, t["topic"], p["partition"])
                res.update(await fn(plog, p))
            except Exception as exc:
                res["error"], res["message"] = _partition_error(exc)
                res.update(error_fields)
            parts.append(res)
        out.append({"topic": t["topic"], "partitions": parts})
    return {"topics": out}


_NO_OFFSET = {"offset": None, "timestamp": None}


async def _list_offset(plog: Any, p: dict[str, Any]) -> dict[str, Any]:
    spec = p["spec"]
    if spec == "earliest":
        return {"offset": plog.log_start_offset, "timestamp": -1}
    if spec == "latest":
        return {"offset": _high_watermark(plog), "timestamp": -1}
    found = plog.max_timestamp()
    if found is None:
        return dict(_NO_OFFSET)
    offset, timestamp = found
    if offset is None or offset < 0:
        return dict(_NO_OFFSET)
    return {"offset": offset, "timestamp": timestamp}


async def list_offsets(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    return await _per_partition(ctx, body, _list_offset, _NO_OFFSET)


async def _offset_for_time(plog: Any, p: dict[str, Any]) -> dict[str, Any]:
    found = await trio.to_thread.run_sync(plog.offset_for_timestamp, p["timestamp"])
    if found is None:
        return dict(_NO_OFFSET)
    offset, timestamp = found
    return {"offset": offset, "timestamp": timestamp}


async def offset_for_time(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    return await _per_partition(ctx, body, _offset_for_time, _NO_OFFSET)


async def _delete_records(plog: Any, p: dict[str, Any]) -> dict[str, Any]:
    check_not_internal(plog.topic, "delete records of")
    # The log checks the range (-1 = high watermark) and the policy (compact-only
    # topics refuse, POLICY_VIOLATION as in Kafka); it may write a checkpoint.
    low = await trio.to_thread.run_sync(plog.delete_records, p["offset"])
    log.info("records_deleted", topic=plog.topic, partition=plog.partition, low_watermark=low)
    return {"low_watermark": low}


async def delete_records(ctx: BrokerContext, body: dict[str, Any]) -> dict[str, Any]:
    return await _per_partition(ctx, body, _delete_records, {"low_watermark": -1})


# The API table: PROTOCOL.md §4 names -> handlers. Extensions add a row here
# (and their schema in protocol/); api_versions reports exactly these names.
HANDLERS: dict[str, Handler] = {
    "api_versions": api_versions,
    "create_topic": create_topic,
    "delete_topic": delete_topic,
    "metadata": metadata,
    "describe_configs": describe_configs,
    "alter_configs": alter_configs,
    "produce": produce,
    "fetch": fetch,
    "list_offsets": list_offsets,
    "offset_for_time": offset_for_time,
    "delete_records": delete_records,
    # Extension (docs/retention.md; schema in protocol/retention_schema.py).
    "explain_retention": explain_retention_handler,
    # Extension (docs/compaction.md §9; schema in protocol/offsets_schema.py).
    **OFFSETS_HANDLERS,
}


# --- dispatch -----------------------------------------------------------------


def first_error(body: dict[str, Any]) -> str | None:
    """The first per-topic or per-partition error code in a response body, for metrics.

    A request counts as failed with that code (Kafka's failed-request and
    per-error meters count partition errors too).
    """
    for topic in body.get("topics", ()):
        if topic.get("error"):
            return topic["error"]
        for part in topic.get("partitions", ()):
            if isinstance(part, dict) and part.get("error"):
                return part["error"]
    return None


def _failure(api: str, exc: Exception) -> TidelogError:
    """The wire error for an exception escaping a handler (unexpected ones are logged)."""
    if isinstance(exc, TidelogError):
        log.info("request_failed", api=api, error=exc.code, reason=exc.message)
        return exc
    log.error("request_crashed", api=api, exc_info=exc)
    return UnknownServerError(f"{type(exc).__name__}: {exc}")


class PendingResponse:
    """The rest of a request whose handler returned `Deferred`; `resolve` never raises."""

    def __init__(
        self, ctx: BrokerContext, request_id: int, api: str, arrived: float, deferred: Deferred
    ) -> None:
        self._ctx, self._id, self._api, self._arrived = ctx, request_id, api, arrived
        self._deferred = deferred

    async def resolve(self) -> Response:
        try:
            body = await self._deferred.finish()
            response, error = Response(id=self._id, body=body), first_error(body)
        except Exception as exc:
            failure = _failure(self._api, exc)
            response, error = error_response(self._id, failure), failure.code
        self._ctx.request_finished(self._api, error, time.perf_counter() - self._arrived)
        return response


async def handle_request(
    ctx: BrokerContext, obj: Any, arrived: float, *, large: bool = False
) -> Response | PendingResponse | None:
    """The response to one decoded frame: None for `acks: 0` produce, pending for `acks: -1`.

    A `large` frame (too many objects for the event-loop budget) is validated in a
    worker thread: validation walks every object of the body.
    """
    request_id = request_id_of(obj)
    api = "unknown"
    try:
        request = parse_request(obj)
        api = request.api if request.api in HANDLERS else "unknown"
        if large:
            body = await trio.to_thread.run_sync(validate_request, request)
        else:
            body = validate_request(request)
        handler = HANDLERS.get(request.api)
        if handler is None:
            raise InvalidRequest(f"api: unknown api {request.api!r}")
        with structlog.contextvars.bound_contextvars(api=request.api, request_id=request_id):
            result = await handler(ctx, body)
        if isinstance(result, Deferred):
            return PendingResponse(ctx, request_id, api, arrived, result)
        response = None if result is None else Response(id=request_id, body=result)
        error = None if result is None else first_error(result)
    except Exception as exc:
        failure = _failure(api, exc)
        response, error = error_response(request_id, failure), failure.code
    ctx.request_finished(api, error, time.perf_counter() - arrived)
    return response
