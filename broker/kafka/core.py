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
from protocol.errors import InvalidRequest, TidelogError
from protocol.kafka.errors import KafkaCodecError, KafkaError, for_tidelog_code
from protocol.kafka.messages import FETCH, LIST_OFFSETS, METADATA, PRODUCE
from protocol.offsets_schema import INTERNAL_TOPICS
from storage.log import Log
from storage.record_source import RecordSource
from storage.topic_id import ZERO_TOPIC_ID

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
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5
# Max-timestamp lookups exist from ListOffsets v7 (KIP-734), the local log start from
# v8 (KIP-405: all of the log is local here, so the log start offset), the last tiered
# offset from v9 (KIP-1005: nothing is tiered, so -1 with epoch -1, as Kafka answers
# without remote storage).
MAX_TIMESTAMP_MIN_VERSION = 7
EARLIEST_LOCAL_MIN_VERSION = 8
LATEST_TIERED_MIN_VERSION = 9
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


def topic_id_of(ctx: BrokerContext, name: str) -> bytes:
    """A topic's id (storage.topic_id), or the zero id for a topic that does not exist."""
    try:
        return ctx.manager.topic_id(name)
    except TidelogError:
        return ZERO_TOPIC_ID


# Metadata names topics by id from v12 (KIP-516; v10-11 carry the field, always zero).
METADATA_TOPIC_IDS_MIN_VERSION = 12


def _unknown_topic_id(topic_id: bytes) -> dict[str, Any]:
    return {
        "error_code": KafkaError.UNKNOWN_TOPIC_ID.code,
        "name": None,
        "topic_id": topic_id,
        "is_internal": False,
        "partitions": [],
    }


def _topic_metadata(
    ctx: BrokerContext, entry: dict[str, Any], node: int, failed: dict[str, KafkaError]
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
        # Kafka sends the zero id with an error (an unauthorized topic's id stays hidden).
        "topic_id": topic_id_of(ctx, entry["topic"]) if error is KafkaError.NONE else ZERO_TOPIC_ID,
        "is_internal": entry["topic"] in INTERNAL_TOPICS,
        "partitions": partitions,
    }


def _requested_names(
    ctx: BrokerContext, version: int, requested: list[dict[str, Any]]
) -> tuple[list[str], list[bytes]]:
    """The names a Metadata request asks for, and the ids it names that no topic has.

    As Kafka's KafkaApis: a null name or a non-zero id below v12 is INVALID_REQUEST
    (the connection answers it); from v12 a topic may be named by id alone."""
    names: list[str] = []
    unknown: list[bytes] = []
    for t in requested:
        topic_id = t["topic_id"]
        if version < METADATA_TOPIC_IDS_MIN_VERSION and (
            t["name"] is None or topic_id != ZERO_TOPIC_ID
        ):
            raise InvalidRequest(f"Metadata v{version} names topics by name only")
        if topic_id == ZERO_TOPIC_ID:
            if t["name"] is None:
                raise InvalidRequest("a topic without name or id")
            names.append(t["name"])
            continue
        name = ctx.manager.topic_by_id(topic_id)
        if name is None:
            unknown.append(topic_id)
        else:
            names.append(name)
    return names, unknown


async def metadata(call: KafkaCall) -> KafkaAnswer:
    ctx, body = call.ctx, call.body
    requested = body["topics"]
    names: list[str] | None = None
    unknown_ids: list[bytes] = []
    if requested is not None:
        names, unknown_ids = _requested_names(ctx, call.version, requested)
        by_id = any(t["topic_id"] != ZERO_TOPIC_ID for t in requested)
        if by_id and not names:  # every id unknown: nothing to look up
            return _metadata_answer(call, [], unknown_ids)
    if call.version == 0 and not names:
        names = None  # v0 has no null: an empty list means every topic
    failed: dict[str, KafkaError] = {}
    if names and ctx.config.auto_create_topics_enable and body["allow_auto_topic_creation"]:
        failed = await _auto_create(ctx, names)
    metadata_body: MetadataRequest = {"topics": names}
    native = await handler_for("metadata")(ctx, metadata_body)
    assert native is not None and not isinstance(native, Deferred)
    node = ctx.config.node_id
    topics = [_topic_metadata(ctx, entry, node, failed) for entry in native["topics"]]
    return _metadata_answer(call, topics, unknown_ids)


def _metadata_answer(
    call: KafkaCall, topics: list[dict[str, Any]], unknown_ids: list[bytes]
) -> KafkaAnswer:
    node = call.ctx.config.node_id
    host, port = advertised_address(call)
    return {
        "throttle_time_ms": 0,
        "brokers": [{"node_id": node, "host": host, "port": port, "rack": None}],
        "cluster_id": CLUSTER_ID,
        "controller_id": node,
        "topics": [*topics, *(_unknown_topic_id(i) for i in unknown_ids)],
        "error_code": 0,
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


def _topic_refused(t: dict[str, Any], error: KafkaError, message: str | None) -> dict[str, Any]:
    return {
        "name": t["name"],
        "topic_id": t["topic_id"],
        "partition_responses": [
            _partition_refused(p["index"], error, message) for p in t["partition_data"]
        ],
    }


def _refuse_all(body: dict[str, Any], error: KafkaError, message: str) -> KafkaAnswer:
    return {
        "responses": [_topic_refused(t, error, message) for t in body["topic_data"]],
        "throttle_time_ms": 0,
    }


# Produce names topics by id from v13 (KIP-516).
PRODUCE_TOPIC_IDS_MIN_VERSION = 13


def _named_by_id(
    ctx: BrokerContext, body: dict[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A v13+ produce with each topic's name filled in from its id, and the topics
    whose id no topic has (answered UNKNOWN_TOPIC_ID, as Kafka does)."""
    known, unknown = [], []
    for t in body["topic_data"]:
        name = ctx.manager.topic_by_id(t["topic_id"])
        if name is None:
            unknown.append(t)
        else:
            known.append({**t, "name": name})
    return {**body, "topic_data": known}, unknown


def _produce_answer(
    body: dict[str, Any],
    native: Mapping[str, Any],
    refused: dict[tuple[str, int], tuple[KafkaError, str]],
    unknown_ids: list[dict[str, Any]],
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
        responses.append(
            {"name": t["name"], "topic_id": t["topic_id"], "partition_responses": parts}
        )
    no_id = KafkaError.UNKNOWN_TOPIC_ID
    responses.extend(_topic_refused(t, no_id, "unknown topic id") for t in unknown_ids)
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
    unknown_ids: list[dict[str, Any]] = []
    if call.version >= PRODUCE_TOPIC_IDS_MIN_VERSION:
        body, unknown_ids = _named_by_id(call.ctx, body)
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
            return _produce_answer(body, await deferred.finish(), refused, unknown_ids)

        return Deferred(finish)
    return _produce_answer(body, result, refused, unknown_ids)


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


# Fetch names topics by id from v13 (KIP-516) and carries the last fetched epoch
# from v12 (KIP-320's truncation check, answered with `diverging_epoch`).
FETCH_TOPIC_IDS_MIN_VERSION = 13
FLEXIBLE_FETCH_MIN_VERSION = 12
UNDEFINED_EPOCH = -1


def fenced_epoch(current_leader_epoch: int) -> KafkaError | None:
    """Kafka's check of the client's view of the leader's epoch (unset = -1): below
    ours FENCED_LEADER_EPOCH, above it UNKNOWN_LEADER_EPOCH."""
    if current_leader_epoch in (UNDEFINED_EPOCH, LEADER_EPOCH):
        return None
    if current_leader_epoch < LEADER_EPOCH:
        return KafkaError.FENCED_LEADER_EPOCH
    return KafkaError.UNKNOWN_LEADER_EPOCH


def _fetch_error_partition(index: int, error: KafkaError) -> dict[str, Any]:
    return _fetch_partition(
        {"partition": index, "error": None, "high_watermark": -1, "log_start_offset": -1},
        b"",
        committed=False,
    ) | {"error_code": error.code}


def _diverged(
    ctx: BrokerContext, topic: str, asked: dict[str, Any], part: dict[str, Any]
) -> dict[str, Any] | None:
    """Kafka's answer when the client's last fetched epoch says its log diverged from
    ours (Partition.fetchRecords): our one epoch, 0, ends at the log end offset; a
    fetch past it gets that as `diverging_epoch` and no records; an epoch we never had
    ends at (-1, -1), which the answer carries as the tag's default (no tag)."""
    epoch = asked["last_fetched_epoch"]
    if epoch < 0 or part["error_code"] not in (0, KafkaError.OFFSET_OUT_OF_RANGE.code):
        return None
    try:
        plog = ctx.manager.get_log(topic, asked["partition"])
    except TidelogError:
        return None
    end = plog.log_end_offset
    if epoch == LEADER_EPOCH and asked["fetch_offset"] <= end:
        return None
    diverging = {"epoch": LEADER_EPOCH, "end_offset": end} if epoch == LEADER_EPOCH else {}
    return {
        **part,
        "error_code": 0,
        "high_watermark": plog.high_watermark,
        "last_stable_offset": plog.high_watermark,
        "log_start_offset": plog.log_start_offset,
        "records": b"",
        "diverging_epoch": diverging,
    }


def _fetch_topics(
    ctx: BrokerContext, version: int, topics: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """The request's topics by name (v13+: resolved from their ids), and the answers of
    those answered here: an unknown topic id (UNKNOWN_TOPIC_ID), a fenced leader epoch,
    by the topic's position in the request."""
    named: list[dict[str, Any]] = []
    answered: dict[int, list[dict[str, Any]]] = {}
    for at, t in enumerate(topics):
        if version >= FETCH_TOPIC_IDS_MIN_VERSION:
            name = ctx.manager.topic_by_id(t["topic_id"])
            if name is None:
                answered[at] = [
                    _fetch_error_partition(p["partition"], KafkaError.UNKNOWN_TOPIC_ID)
                    for p in t["partitions"]
                ]
                continue
            t = {**t, "topic": name}
        kept, fenced = [], []
        for p in t["partitions"]:
            error = fenced_epoch(p["current_leader_epoch"])
            if error is None:
                kept.append(p)
            else:
                fenced.append(_fetch_error_partition(p["partition"], error))
        if fenced:
            answered[at] = fenced
            t = {**t, "partitions": kept}
        named.append({**t, "at": at})
    return named, answered


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
    named, answered = _fetch_topics(call.ctx, call.version, body["topics"])
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
            for t in named
            if t["partitions"]
        ],
        "local_read": False,  # the records travel on this connection
        "kafka_batches": True,  # as stored: edge.to_kafka converts Tidelog batches only
        "isolation_level": 1 if body["isolation_level"] == 1 else 0,
    }
    cast("dict[str, Any]", native_body)[REPORT_LSO_KEY] = True  # Kafka answers the LSO
    if native_body["topics"]:
        native = await handler_for("fetch")(call.ctx, native_body)
        assert native is not None and not isinstance(native, Deferred)
        native_topics = native["topics"]
    else:
        native_topics = []
    committed = body["isolation_level"] == 1
    check_epochs = call.version >= FLEXIBLE_FETCH_MIN_VERSION
    # The native answer has one entry per topic name: each asked partition is taken
    # from it once, in the request's order (a topic asked twice gets its own back).
    results: dict[tuple[str, int], list[dict[str, Any]]] = {}
    for res_topic in native_topics:
        for res in res_topic["partitions"]:
            results.setdefault((res_topic["topic"], res["partition"]), []).append(res)
    by_at: dict[int, list[dict[str, Any]]] = dict(answered)
    for t in named:
        parts = []
        for asked in t["partitions"]:
            pending = results.get((t["topic"], asked["partition"]))
            if not pending:
                continue
            part = await _kafka_partition(pending.pop(0), committed)
            if check_epochs:
                part = _diverged(call.ctx, t["topic"], asked, part) or part
            parts.append(part)
        by_at[t["at"]] = [*by_at.get(t["at"], []), *parts]
    responses = [
        {"topic": t["topic"], "topic_id": t["topic_id"], "partitions": by_at[at]}
        for at, t in enumerate(body["topics"])
        if by_at.get(at)
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "session_id": NO_SESSION,
        "responses": responses,
    }


# --- ListOffsets ----------------------------------------------------------------


def _offsets_query(
    body: dict[str, Any], version: int
) -> tuple[
    ListOffsetsRequest,
    OffsetForTimeRequest,
    dict[tuple[str, int], KafkaError],
    dict[tuple[str, int], int],
]:
    """Split a ListOffsets request into native list_offsets and offset_for_time bodies;
    also the partitions refused here, and those asked their local log start or last
    tiered offset (asked as `earliest`, for the topic's checks, then answered from the
    log: `_tier_offset`)."""
    specs: dict[str, list[ListOffsetsPartition]] = {}
    times: dict[str, list[OffsetForTimePartition]] = {}
    refused: dict[tuple[str, int], KafkaError] = {}
    tiered: dict[tuple[str, int], int] = {}
    for t in body["topics"]:
        for p in t["partitions"]:
            ts, index = p["timestamp"], p["partition_index"]
            if (ts == EARLIEST_LOCAL_TIMESTAMP and version >= EARLIEST_LOCAL_MIN_VERSION) or (
                ts == LATEST_TIERED_TIMESTAMP and version >= LATEST_TIERED_MIN_VERSION
            ):
                tiered[(t["name"], index)] = ts
                ts = EARLIEST_TIMESTAMP
            elif ts in (EARLIEST_LOCAL_TIMESTAMP, LATEST_TIERED_TIMESTAMP):
                refused[(t["name"], index)] = KafkaError.UNSUPPORTED_VERSION
                continue
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
    return by_spec, by_time, refused, tiered


async def list_offsets(call: KafkaCall) -> KafkaAnswer:
    """Earliest, latest and by-timestamp offsets through the native offset handlers."""
    specs, times, refused, tiered = _offsets_query(call.body, call.version)
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
            epoch = LEADER_EPOCH
            if res is not None and key in tiered and res.get("error") is None:
                res, epoch = _tier_offset(call.ctx, key, tiered[key], res)
            parts.append(
                {
                    "partition_index": p["partition_index"],
                    "error_code": error.code,
                    "timestamp": _or_minus_one(res.get("timestamp")) if res else -1,
                    "offset": _or_minus_one(res.get("offset")) if res else -1,
                    "leader_epoch": epoch,
                }
            )
        topics.append({"name": t["name"], "partitions": parts})
    return {"throttle_time_ms": 0, "topics": topics}


def _tier_offset(
    ctx: BrokerContext, key: tuple[str, int], spec: int, res: dict[str, Any]
) -> tuple[dict[str, Any], int]:
    """KIP-405's two specs: -4 the local log start offset (above the log start once
    local copies of uploaded segments are gone), -5 the highest offset in the object
    store (-1 with epoch -1 when none is, or the topic is not tiered: Kafka's answer)."""
    plog = _log_or_none(ctx, key)
    if plog is None:
        return res, LEADER_EPOCH
    if spec == EARLIEST_LOCAL_TIMESTAMP:
        return {**res, "offset": plog.local_log_start_offset, "timestamp": None}, LEADER_EPOCH
    highest = plog.highest_remote_offset
    if highest < 0:
        return {**res, "offset": -1, "timestamp": None}, UNDEFINED_EPOCH
    return {**res, "offset": highest, "timestamp": None}, LEADER_EPOCH


def _last_stable(ctx: BrokerContext, key: tuple[str, int], res: dict[str, Any]) -> dict[str, Any]:
    """ListOffsets read_committed: "latest" is the last stable offset (Kafka's)."""
    if res.get("error") is not None:
        return res
    plog = _log_or_none(ctx, key)
    return res if plog is None else {**res, "offset": plog.last_stable_offset}


def _log_or_none(ctx: BrokerContext, key: tuple[str, int]) -> Log | None:
    """The partition's log, or None when it went since the request's own answer (that
    answer, with its error, then stands)."""
    try:
        return ctx.manager.get_log(*key)
    except (TidelogError, KeyError, IndexError):
        return None


HANDLERS: dict[int, KafkaApi] = {
    PRODUCE.key: KafkaApi(produce, via=("produce",), requires=each_topic(Operation.WRITE)),
    FETCH.key: KafkaApi(fetch, via=("fetch",)),
    LIST_OFFSETS.key: KafkaApi(list_offsets, via=("list_offsets", "offset_for_time")),
    METADATA.key: KafkaApi(metadata, via=("metadata", "create_topic")),
}
