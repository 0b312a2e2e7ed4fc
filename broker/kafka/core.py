"""Kafka's core data APIs on Tidelog's handlers: Metadata, Produce, Fetch, ListOffsets.

Each adapter turns a Kafka request into the body of the native handler that answers
the same question (`broker.dispatch.handler_for`), awaits it, and turns the answer
into Kafka's response fields; per-partition Tidelog error names become Kafka codes
through `for_tidelog_code`. Record batches are stored as Kafka producers send them
and fetched as stored; only Tidelog batches a msgpack producer wrote are converted
(broker/kafka/edge.py). ApiVersions is the connection's (broker/kafka/connection.py).

A single broker is every partition's leader and the controller: Metadata names this
node (`node.id`) at the address clients should use (`advertised.listeners`, else the
address the client connected to). Its leader epoch is always 0 (Metadata and
ListOffsets say so; Java consumers check positions with OffsetForLeaderEpoch,
broker/kafka/leader_epoch.py).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from typing import Any, cast

from broker.context import BrokerContext, Deferred
from broker.dispatch import handler_for
from broker.handlers.fetch import REPORT_LSO_KEY
from broker.handlers.produce import KAFKA_BATCHES_KEY
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.edge import check_batch_sizes, to_kafka
from broker.logging import get_logger
from broker.security.acl import Operation, ResourceType
from broker.security.requires import Right, each_topic
from protocol.api_types import (
    CreateTopicRequest,
    FetchRequest,
    ListOffsetsPartition,
    ListOffsetsRequest,
    MetadataRequest,
    OffsetForTimePartition,
    OffsetForTimeRequest,
    ProducePartition,
    ProduceRequest,
    ProduceTopic,
)
from protocol.batch import KAFKA_LAYOUT
from protocol.errors import TidelogError
from protocol.kafka.errors import KafkaCodecError, KafkaError, for_tidelog_code
from protocol.kafka.messages import FETCH, LIST_OFFSETS, METADATA, PRODUCE
from protocol.offsets_schema import INTERNAL_TOPICS
from storage.record_source import RecordSource

# Where a v2 batch keeps its producer id and epoch (the KIP-890 verifier needs them).
KAFKA_HEADER_SIZE = KAFKA_LAYOUT.size
_PRODUCER = struct.Struct(">qh")
_PRODUCER_AT = KAFKA_LAYOUT.offset["producer_id"]

log = get_logger(component="kafka")

# Produce v0-2 carry message-format v0/v1 batches, which Kafka 4 refuses too
# (KIP-896); they stay advertised so old librdkafka keeps compression on.
PRODUCE_MIN_SERVED_VERSION = 3
# Kafka's acks, as Tidelog's produce takes them (-1 = all = fsynced here).
KAFKA_ACKS = frozenset({0, 1, -1})
# ListOffsets' special timestamps (Kafka's ListOffsetsRequest constants).
EARLIEST_TIMESTAMP = -2
LATEST_TIMESTAMP = -1
MAX_TIMESTAMP = -3
# Max-timestamp lookups exist from ListOffsets v7 (KIP-734).
MAX_TIMESTAMP_MIN_VERSION = 7
# Fetch sessions (KIP-227) are declined: every fetch is a full one, answered with
# session id 0, which tells the client not to send incremental fetches.
NO_SESSION = 0
INT32_MAX = 2**31 - 1
# The cluster id Metadata reports (a single broker, no KRaft metadata log).
CLUSTER_ID = "tidelog"
# This node has led every partition since its creation, in leader epoch 0.
LEADER_EPOCH = 0


def _kafka_error(code: str | None) -> KafkaError:
    return for_tidelog_code(code)


def _or_minus_one(value: int | None) -> int:
    return -1 if value is None else value


# --- Metadata -------------------------------------------------------------------


def parse_advertised(text: str) -> tuple[str, int] | None:
    """The first `NAME://HOST:PORT` of `advertised.listeners` (None when unset)."""
    first = text.split(",")[0].strip()
    if not first:
        return None
    address = first.split("://", 1)[-1]
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


def advertised_address(call: KafkaCall) -> tuple[str, int]:
    configured = parse_advertised(call.ctx.config.advertised_listeners)
    if configured is not None:
        return configured
    if call.conn.local is not None:
        return call.conn.local
    return call.ctx.config.listen


async def _auto_create(ctx: BrokerContext, names: Iterable[str]) -> dict[str, KafkaError]:
    """Create the unknown topics among `names` (auto.create.topics.enable); the
    errors of those that could not be, by name."""
    known = set(ctx.manager.topics())
    failed: dict[str, KafkaError] = {}
    create = handler_for("create_topic")
    for name in names:
        if name in known:
            continue
        body: CreateTopicRequest = {
            "topic": name,
            "partitions": ctx.config.num_partitions,
            "configs": {},
            "validate_only": False,
        }
        try:
            await create(ctx, body)
            log.info("topic_auto_created", topic=name, partitions=ctx.config.num_partitions)
        except TidelogError as exc:
            if exc.code != "TOPIC_ALREADY_EXISTS":
                failed[name] = _kafka_error(exc.code)
    return failed


def _topic_metadata(
    entry: dict[str, Any], node: int, failed: dict[str, KafkaError]
) -> dict[str, Any]:
    error = failed.get(entry["topic"]) or _kafka_error(entry["error"])
    partitions = [
        {
            "error_code": 0,
            "partition_index": p["partition"],
            "leader_id": node,
            "leader_epoch": LEADER_EPOCH,
            "replica_nodes": [node],
            "isr_nodes": [node],
            "offline_replicas": [],
        }
        for p in entry["partitions"]
    ]
    return {
        "error_code": error.code,
        "name": entry["topic"],
        "is_internal": entry["topic"] in INTERNAL_TOPICS,
        "partitions": partitions,
    }


async def metadata(call: KafkaCall) -> KafkaAnswer:
    ctx, body = call.ctx, call.body
    requested = body["topics"]
    names = None if requested is None else [t["name"] for t in requested]
    if call.version == 0 and not names:
        names = None  # v0 has no null: an empty list means every topic
    failed: dict[str, KafkaError] = {}
    if names and ctx.config.auto_create_topics_enable and body["allow_auto_topic_creation"]:
        failed = await _auto_create(ctx, names)
    metadata_body: MetadataRequest = {"topics": names}
    native = await handler_for("metadata")(ctx, metadata_body)
    assert native is not None and not isinstance(native, Deferred)
    node = ctx.config.node_id
    host, port = advertised_address(call)
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
        "cluster_id": CLUSTER_ID,
        "controller_id": node,
        "topics": [_topic_metadata(entry, node, failed) for entry in native["topics"]],
    }


# --- Produce --------------------------------------------------------------------

# Declared on the row (each topic of the request), checked here before conversion.
_WRITE_TOPIC = Right(Operation.WRITE, ResourceType.TOPIC)


def _partition_refused(index: int, error: KafkaError, message: str | None) -> dict[str, Any]:
    return {
        "index": index,
        "error_code": error.code,
        "base_offset": -1,
        "log_append_time_ms": -1,
        "log_start_offset": -1,
        "record_errors": [],
        "error_message": message,
    }


def _refuse_all(body: dict[str, Any], error: KafkaError, message: str) -> KafkaAnswer:
    return {
        "responses": [
            {
                "name": t["name"],
                "partition_responses": [
                    _partition_refused(p["index"], error, message) for p in t["partition_data"]
                ],
            }
            for t in body["topic_data"]
        ],
        "throttle_time_ms": 0,
    }


def _produce_answer(
    body: dict[str, Any],
    native: Mapping[str, Any],
    refused: dict[tuple[str, int], tuple[KafkaError, str]],
) -> KafkaAnswer:
    results = {(t["topic"], p["partition"]): p for t in native["topics"] for p in t["partitions"]}
    responses = []
    for t in body["topic_data"]:
        parts = []
        for p in t["partition_data"]:
            key = (t["name"], p["index"])
            if key in refused:
                parts.append(_partition_refused(p["index"], *refused[key]))
                continue
            res = results[key]
            parts.append(
                {
                    "index": p["index"],
                    "error_code": _kafka_error(res["error"]).code,
                    "base_offset": _or_minus_one(res.get("base_offset")),
                    "log_append_time_ms": _or_minus_one(res.get("log_append_time")),
                    "log_start_offset": _or_minus_one(res.get("log_start_offset")),
                    "record_errors": [],
                    "error_message": res.get("message"),
                }
            )
        responses.append({"name": t["name"], "partition_responses": parts})
    return {"responses": responses, "throttle_time_ms": 0}


def _max_message_bytes(ctx: BrokerContext, topic: str) -> int:
    """The topic's `max.message.bytes` (the broker's default for one not created yet)."""
    try:
        return ctx.manager.topic_config(topic).max_message_bytes
    except TidelogError:
        return ctx.manager.default_config().max_message_bytes


def _verify_txn(
    ctx: BrokerContext, body: dict[str, Any], topic: str, partition: int, records: Any
) -> tuple[KafkaError, str] | None:
    """KIP-890 part 1: the coordinator's verifier (`LogManager.txn_verifier`), asked for
    a transactional producer's batch when one is installed; else nothing to verify."""
    verifier = ctx.manager.txn_verifier
    txn_id = body.get("transactional_id")
    if verifier is None or txn_id is None or len(records) < KAFKA_HEADER_SIZE:
        return None
    producer_id, producer_epoch = _PRODUCER.unpack_from(records, _PRODUCER_AT)
    error = verifier(txn_id, producer_id, producer_epoch, topic, partition)
    if error is None:
        return None
    kafka_error = for_tidelog_code(error)
    return kafka_error, f"transaction {txn_id!r} did not add {topic}-{partition}"


async def produce(call: KafkaCall) -> KafkaAnswer | Deferred[KafkaAnswer] | None:
    """Append through the native produce, the Kafka batches as they were sent.

    Cheapest check first (issue 38 #3): the gate has checked the login; Write on each
    topic is checked here, then each batch's size as sent, and only then does storage
    inflate and walk its records (the native produce checks Write again, allowed)."""
    body = call.body
    acks = body["acks"]
    if call.version < PRODUCE_MIN_SERVED_VERSION:
        message = f"Produce v{call.version} (message format v0/v1) is not supported; use v3+"
        return _refuse_all(body, KafkaError.UNSUPPORTED_VERSION, message)
    if acks not in KAFKA_ACKS:
        return _refuse_all(
            body, KafkaError.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, got {acks}"
        )
    refused: dict[tuple[str, int], tuple[KafkaError, str]] = {}
    topics: list[ProduceTopic] = []
    for t in body["topic_data"]:
        name = t["name"]
        if not call.permits(_WRITE_TOPIC, name):  # before any byte of it is read
            denied = (KafkaError.TOPIC_AUTHORIZATION_FAILED, f"Write on topic {name} denied")
            refused.update(((name, p["index"]), denied) for p in t["partition_data"])
            continue
        max_message_bytes = _max_message_bytes(call.ctx, name)
        parts: list[ProducePartition] = []
        for p in t["partition_data"]:
            records = p["records"]
            try:
                if not records:
                    raise KafkaCodecError(
                        KafkaError.INVALID_RECORD, "a produce request needs a record batch"
                    )
                check_batch_sizes(records, max_message_bytes)
            except KafkaCodecError as exc:
                refused[(t["name"], p["index"])] = (exc.error, exc.message)
                log.info("kafka_produce_rejected", topic=t["name"], partition=p["index"],
                         error=exc.error.name, reason=exc.message)  # fmt: skip
                continue
            refusal = _verify_txn(call.ctx, body, name, p["index"], records)
            if refusal is not None:
                refused[(name, p["index"])] = refusal
                continue
            parts.append({"partition": p["index"], "records": records})
        topics.append({"topic": t["name"], "partitions": parts})
    native_body: ProduceRequest = {
        "acks": acks,
        "timeout_ms": max(body["timeout_ms"], 0),
        "topics": topics,
    }
    # Stored as sent (docs/kafka.md "Storage decision"): the batches are Kafka's.
    cast("dict[str, Any]", native_body)[KAFKA_BATCHES_KEY] = True
    result = await handler_for("produce")(call.ctx, native_body)
    if result is None:
        return None  # acks=0: nothing is sent back
    if isinstance(result, Deferred):
        deferred = result

        async def finish() -> KafkaAnswer:
            return _produce_answer(body, await deferred.finish(), refused)

        return Deferred(finish)
    return _produce_answer(body, result, refused)


# --- Fetch ----------------------------------------------------------------------


def _fetch_partition(
    res: dict[str, Any], records: bytes | RecordSource, committed: bool
) -> dict[str, Any]:
    error = _kafka_error(res["error"])
    ok = error is KafkaError.NONE
    high_watermark = res["high_watermark"] if ok else -1
    aborted = res.get("aborted_transactions") if ok else None
    return {
        "partition_index": res["partition"],
        "error_code": error.code,
        "high_watermark": high_watermark,
        "last_stable_offset": res.get("last_stable_offset", high_watermark) if ok else -1,
        "log_start_offset": res["log_start_offset"] if ok else -1,
        # read_committed: the aborted transactions of the range (Kafka sends null, not
        # an empty list, to a read_uncommitted fetch).
        "aborted_transactions": (aborted if aborted is not None else []) if committed else None,
        "preferred_read_replica": -1,
        "records": records,
    }


async def _kafka_partition(res: dict[str, Any], committed: bool) -> dict[str, Any]:
    records: bytes | RecordSource = b""
    try:
        records = await to_kafka(res["records"]) if res["records"] else b""
    except TidelogError as exc:  # CorruptMessage: a stored Tidelog batch would not convert
        log.error("kafka_fetch_convert_failed", partition=res["partition"], reason=exc.message)
        res = {**res, "error": exc.code}
    return _fetch_partition(res, records, committed)


async def fetch(call: KafkaCall) -> KafkaAnswer:
    """Read through the native fetch (long poll included); the stored Kafka batches go
    out as they are (a span of the file by sendfile), Tidelog ones converted."""
    body = call.body
    if body["session_id"] != NO_SESSION:
        return {
            "throttle_time_ms": 0,
            "error_code": KafkaError.FETCH_SESSION_ID_NOT_FOUND.code,
            "session_id": NO_SESSION,
            "responses": [],
        }
    native_body: FetchRequest = {
        "max_wait_ms": max(body["max_wait_ms"], 0),
        "min_bytes": max(body["min_bytes"], 0),
        "max_bytes": min(max(body["max_bytes"], 0), INT32_MAX),
        "topics": [
            {
                "topic": t["topic"],
                "partitions": [
                    {
                        "partition": p["partition"],
                        "offset": p["fetch_offset"],
                        "max_bytes": max(p["partition_max_bytes"], 0),
                    }
                    for p in t["partitions"]
                ],
            }
            for t in body["topics"]
        ],
        "local_read": False,  # the records travel on this connection
        "kafka_batches": True,  # as stored: edge.to_kafka converts Tidelog batches only
        "isolation_level": 1 if body["isolation_level"] == 1 else 0,
    }
    cast("dict[str, Any]", native_body)[REPORT_LSO_KEY] = True  # Kafka answers the LSO
    native = await handler_for("fetch")(call.ctx, native_body)
    assert native is not None and not isinstance(native, Deferred)
    committed = body["isolation_level"] == 1
    responses = []
    for t in native["topics"]:
        parts = [await _kafka_partition(res, committed) for res in t["partitions"]]
        responses.append({"topic": t["topic"], "partitions": parts})
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": NO_SESSION,
        "responses": responses,
    }


# --- ListOffsets ----------------------------------------------------------------


def _offsets_query(
    body: dict[str, Any], version: int
) -> tuple[ListOffsetsRequest, OffsetForTimeRequest, dict[tuple[str, int], KafkaError]]:
    """Split a ListOffsets request into native list_offsets and offset_for_time bodies."""
    specs: dict[str, list[ListOffsetsPartition]] = {}
    times: dict[str, list[OffsetForTimePartition]] = {}
    refused: dict[tuple[str, int], KafkaError] = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            ts, index = p["timestamp"], p["partition_index"]
            if ts == EARLIEST_TIMESTAMP:
                specs.setdefault(t["name"], []).append({"partition": index, "spec": "earliest"})
            elif ts == LATEST_TIMESTAMP:
                specs.setdefault(t["name"], []).append({"partition": index, "spec": "latest"})
            elif ts == MAX_TIMESTAMP and version >= MAX_TIMESTAMP_MIN_VERSION:
                specs.setdefault(t["name"], []).append(
                    {"partition": index, "spec": "max_timestamp"}
                )
            elif ts == MAX_TIMESTAMP:
                refused[(t["name"], index)] = KafkaError.UNSUPPORTED_VERSION
            elif ts < 0:
                refused[(t["name"], index)] = KafkaError.INVALID_REQUEST
            else:
                times.setdefault(t["name"], []).append({"partition": index, "timestamp": ts})

    by_spec: ListOffsetsRequest = {
        "topics": [{"topic": name, "partitions": parts} for name, parts in specs.items()]
    }
    by_time: OffsetForTimeRequest = {
        "topics": [{"topic": name, "partitions": parts} for name, parts in times.items()]
    }
    return by_spec, by_time, refused


async def list_offsets(call: KafkaCall) -> KafkaAnswer:
    """Earliest, latest and by-timestamp offsets through the native offset handlers."""
    specs, times, refused = _offsets_query(call.body, call.version)
    found: dict[tuple[str, int], dict[str, Any]] = {}
    native_bodies: tuple[tuple[str, ListOffsetsRequest | OffsetForTimeRequest], ...] = (
        ("list_offsets", specs),
        ("offset_for_time", times),
    )
    for api, native_body in native_bodies:
        if native_body["topics"]:
            answer = await handler_for(api)(call.ctx, native_body)
            assert answer is not None and not isinstance(answer, Deferred)
            for t in answer["topics"]:
                for p in t["partitions"]:
                    found[(t["topic"], p["partition"])] = p
    committed = call.body.get("isolation_level", 0) == 1
    topics = []
    for t in call.body["topics"]:
        parts = []
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            res = found.get(key)
            error = refused.get(key) or _kafka_error(res["error"] if res else None)
            if committed and res is not None and p["timestamp"] == LATEST_TIMESTAMP:
                res = _last_stable(call.ctx, key, res)
            parts.append(
                {
                    "partition_index": p["partition_index"],
                    "error_code": error.code,
                    "timestamp": _or_minus_one(res.get("timestamp")) if res else -1,
                    "offset": _or_minus_one(res.get("offset")) if res else -1,
                    "leader_epoch": LEADER_EPOCH,
                }
            )
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _last_stable(ctx: BrokerContext, key: tuple[str, int], res: dict[str, Any]) -> dict[str, Any]:
    """ListOffsets read_committed: "latest" is the last stable offset (Kafka's)."""
    if res.get("error") is not None:
        return res
    try:
        plog = ctx.manager.get_log(*key)
    except (TidelogError, KeyError, IndexError):
        return res
    return {**res, "offset": plog.last_stable_offset}


HANDLERS: dict[int, KafkaApi] = {
    PRODUCE.key: KafkaApi(produce, via=("produce",), requires=each_topic(Operation.WRITE)),
    FETCH.key: KafkaApi(fetch, via=("fetch",)),
    LIST_OFFSETS.key: KafkaApi(list_offsets, via=("list_offsets", "offset_for_time")),
    METADATA.key: KafkaApi(metadata, via=("metadata", "create_topic")),
}
