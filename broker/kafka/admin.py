"""Kafka's admin APIs over Tidelog's native handlers (issue 19).

CreateTopics, DeleteTopics, DeleteRecords and DescribeCluster here; the config
APIs in `broker.kafka.admin_configs`. Each adapter calls the same native handler
the msgpack codec uses (`create_topic`, `delete_topic`, `delete_records`) and
answers what a single-broker Apache Kafka 4.4 answers, checked side by side in
interop/ (codes exactly; messages Kafka's where Kafka's rule is ours, else the
native one). What Kafka checks and Tidelog's handlers do not (duplicate names in
one request, replication factors, replica assignments, null config values,
names that collide once `.` and `_` are confused) is checked here, before the
native call; differences are listed in docs/kafka.md.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from broker.authz.access import allows
from broker.kafka.admin_configs import CONFIG_HANDLERS
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.config_view import topic_entries
from broker.kafka.core import CLUSTER_ID, advertised_address
from broker.kafka.native_call import NativeOutcome, Refused, run_native
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.security.requires import Requires, Right
from protocol.api_types import (
    CreateTopicRequest,
    DeleteRecordsRequest,
    DeleteTopicRequest,
    DescribeConfigsRequest,
)
from protocol.errors import InvalidTopic
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import CREATE_TOPICS, DELETE_RECORDS, DELETE_TOPICS, DESCRIBE_CLUSTER
from protocol.offsets_schema import INTERNAL_TOPICS
from protocol.schemas import check_topic_name
from storage.topic_id import ZERO_TOPIC_ID

# Kafka's "use the broker's default" for num_partitions and replication_factor.
USE_DEFAULT = -1
# KRaft's own log: Kafka refuses to create it (Tidelog has none; the name stays refused).
KAFKA_RESERVED_TOPICS = frozenset({"__cluster_metadata"})
# DescribeCluster v1+ endpoint types (Kafka's EndpointType).
BROKERS_ENDPOINT, CONTROLLERS_ENDPOINT = 1, 2
# DescribeCluster: "authorized operations not requested" (Kafka's Integer.MIN_VALUE).
OPERATIONS_NOT_REQUESTED = -(2**31)
# The cluster's operations by Kafka's AclOperation codes (the bits of
# cluster_authorized_operations); without an authorizer every one is allowed.
CLUSTER_OPERATIONS = {
    Operation.CREATE: 5, Operation.ALTER: 7, Operation.DESCRIBE: 8,
    Operation.CLUSTER_ACTION: 9, Operation.DESCRIBE_CONFIGS: 10,
    Operation.ALTER_CONFIGS: 11, Operation.IDEMPOTENT_WRITE: 12,
}  # fmt: skip
ALL_CLUSTER_OPERATIONS = sum(1 << code for code in CLUSTER_OPERATIONS.values())


# --- CreateTopics ---------------------------------------------------------------------


def _partition_count(call: KafkaCall, topic: dict[str, Any]) -> int:
    """Partitions to create; Refused for what a single-broker Kafka refuses."""
    partitions, factor = topic["num_partitions"], topic["replication_factor"]
    if topic["assignments"]:
        return _assigned_partitions(call, topic)
    if partitions < USE_DEFAULT or partitions == 0:
        raise Refused(
            KafkaError.INVALID_PARTITIONS,
            "Number of partitions was set to an invalid non-positive value.",
        )
    if factor < USE_DEFAULT or factor == 0:
        raise Refused(
            KafkaError.INVALID_REPLICATION_FACTOR,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    if factor > 1:
        raise Refused(
            KafkaError.INVALID_REPLICATION_FACTOR,
            f"Unable to replicate the partition {factor} time(s): The target replication "
            f"factor of {factor} cannot be reached because only 1 broker(s) are registered.",
        )
    return call.ctx.config.num_partitions if partitions == USE_DEFAULT else partitions


def _assigned_partitions(call: KafkaCall, topic: dict[str, Any]) -> int:
    """A manual assignment: partitions 0..n-1, each on this one broker alone."""
    if topic["num_partitions"] != USE_DEFAULT or topic["replication_factor"] != USE_DEFAULT:
        raise Refused(
            KafkaError.INVALID_REQUEST,
            "Both numPartitions or replicationFactor and replicasAssignments were set. "
            "Both cannot be used at the same time.",
        )
    me = call.ctx.config.node_id
    assignments = topic["assignments"]
    indexes = sorted(a["partition_index"] for a in assignments)
    if indexes != list(range(len(assignments))):
        raise Refused(
            KafkaError.INVALID_REPLICA_ASSIGNMENT,
            f"Partitions must be numbered 0..{len(assignments) - 1}, got {indexes}.",
        )
    for assignment in assignments:
        if list(assignment["broker_ids"]) != [me]:
            raise Refused(
                KafkaError.INVALID_REPLICA_ASSIGNMENT,
                f"Partition {assignment['partition_index']} is assigned to brokers "
                f"{list(assignment['broker_ids'])}; the only broker is {me}.",
            )
    return len(assignments)


def _topic_configs(topic: dict[str, Any]) -> dict[str, str | int | float]:
    """The configs as a dict (a repeated key: the last wins, as in Kafka)."""
    configs: dict[str, str | int | float] = {}
    for entry in topic["configs"]:
        if entry["value"] is None:
            raise Refused(
                KafkaError.INVALID_CONFIG,
                f"Null value not supported for topic configs: {entry['name']}",
            )
        configs[entry["name"]] = entry["value"]
    return configs


def _flat(name: str) -> str:
    """Kafka's metric names turn '.' into '_': two topics differing only so would collide."""
    return name.replace(".", "_")


def _check_new_name(name: str, names: frozenset[str], flat: dict[str, str]) -> None:
    """Kafka's name rules beyond the native legality check, against the existing
    `names` (`flat` maps each one's flat form to it)."""
    check_topic_name(name)
    exists = name in names
    if name in KAFKA_RESERVED_TOPICS or (name in INTERNAL_TOPICS and not exists):
        raise Refused(
            KafkaError.INVALID_REQUEST, f"Creation of internal topic {name} is prohibited."
        )
    if exists:
        raise Refused(KafkaError.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
    other = flat.get(_flat(name))
    if other is not None:
        raise Refused(
            KafkaError.INVALID_TOPIC_EXCEPTION,
            f"Topic '{name}' collides with existing topic: {other}",
        )


async def _create_one(
    call: KafkaCall,
    topic: dict[str, Any],
    existing: tuple[frozenset[str], dict[str, str]],
    validate_only: bool,
) -> NativeOutcome:
    name = topic["name"]
    if not _may_create(call, name):  # before the name checks, which would tell it exists
        return NativeOutcome.failed(
            KafkaError.TOPIC_AUTHORIZATION_FAILED, f"not authorized to Create topic {name!r}"
        )
    try:
        _check_new_name(name, *existing)
        body: CreateTopicRequest = {
            "topic": name,
            "partitions": _partition_count(call, topic),
            "configs": _topic_configs(topic),
            "validate_only": validate_only,
        }
    except InvalidTopic as exc:
        return NativeOutcome.failed(KafkaError.INVALID_TOPIC_EXCEPTION, exc.message or None)
    except Refused as exc:
        return exc.outcome
    return await run_native(call.ctx, "create_topic", body)


def _may_create(call: KafkaCall, name: str) -> bool:
    """Kafka's rule: Create on the cluster, else on the topic (that denial is audited)."""
    return call.permits(_CREATE, name)


async def create_topics(call: KafkaCall) -> KafkaAnswer:
    """CreateTopics v2-7: one result per topic (once per name for a repeated one); from
    v5 a created topic's partitions, replication factor and configs, from v7 its id."""
    topics = call.body["topics"]
    counts = Counter(t["name"] for t in topics)
    results = []
    for name in [n for n, c in counts.items() if c > 1]:
        results.append(_topic_result(name, KafkaError.INVALID_REQUEST, "Duplicate topic name."))
    # Names are checked against the topics before the request, as Kafka's controller
    # does: two colliding names in one request are both created (seen in Kafka 4.4).
    names = frozenset(call.ctx.manager.topics())
    existing = (names, {_flat(n): n for n in names})
    validate_only = call.body["validate_only"]
    for topic in topics:
        if counts[topic["name"]] > 1:
            continue
        outcome = await _create_one(call, topic, existing, validate_only)
        result = _topic_result(topic["name"], outcome.error, outcome.message)
        if outcome.error is KafkaError.NONE and call.version >= CREATED_DETAILS_MIN_VERSION:
            result.update(await _created_details(call, topic, validate_only))
        results.append(result)
    return {"throttle_time_ms": 0, "topics": results}


# CreateTopics versions whose results describe the created topic (KIP-525).
CREATED_DETAILS_MIN_VERSION = 5


async def _created_details(
    call: KafkaCall, topic: dict[str, Any], validate_only: bool
) -> dict[str, Any]:
    """What Kafka's v5+ result tells of a created topic: its id, partitions, factor
    (always 1 here) and configs as DescribeConfigs shows them, when the principal may
    describe them (else `topic_config_error_code`). A validate-only creation made
    nothing: the partitions it would have, no id, no configs."""
    name = topic["name"]
    if validate_only:
        return {"num_partitions": _partition_count(call, topic), "replication_factor": 1}
    manager = call.ctx.manager
    details: dict[str, Any] = {
        "topic_id": manager.topic_id(name),
        "num_partitions": manager.partition_count(name),
        "replication_factor": 1,
    }
    outcome = await run_native(call.ctx, "describe_configs", DescribeConfigsRequest(topic=name))
    if outcome.answer is None:
        details["topic_config_error_code"] = outcome.error.code
        return details
    entries = topic_entries(
        call.ctx.config, outcome.answer["configs"], None, include_synonyms=False
    )
    details["configs"] = [
        {
            "name": e["name"],
            "value": e["value"],
            "read_only": e["read_only"],
            "config_source": e["config_source"],
            "is_sensitive": e["is_sensitive"],
        }
        for e in entries
    ]
    return details


def _topic_result(name: str, error: KafkaError, message: str | None) -> dict[str, Any]:
    return {"name": name, "error_code": error.code, "error_message": message}


# --- DeleteTopics ---------------------------------------------------------------------


# DeleteTopics names topics by name or by id from v6 (KIP-516).
DELETE_BY_ID_MIN_VERSION = 6


def _deletions(call: KafkaCall) -> list[dict[str, Any]]:
    """The request's topics as {name, topic_id} (v6+: either may be given, not both)."""
    if call.version < DELETE_BY_ID_MIN_VERSION:
        return [{"name": n, "topic_id": ZERO_TOPIC_ID} for n in call.body["topic_names"]]
    return [{"name": t["name"], "topic_id": t["topic_id"]} for t in call.body["topics"]]


async def delete_topics(call: KafkaCall) -> KafkaAnswer:
    """DeleteTopics v1-6, by name or (v6) by id; an unknown or illegal name is
    UNKNOWN_TOPIC_OR_PARTITION, an unknown id UNKNOWN_TOPIC_ID, a topic named twice
    (or by both name and id) INVALID_REQUEST, as Kafka's controller answers."""
    wanted = _deletions(call)
    counts = Counter(t["name"] if t["topic_id"] == ZERO_TOPIC_ID else t["topic_id"] for t in wanted)
    results = []
    known = set(call.ctx.manager.topics())
    reported: set[Any] = set()
    for t in wanted:
        name, topic_id = t["name"], t["topic_id"]
        key = name if topic_id == ZERO_TOPIC_ID else topic_id
        message = None
        if counts[key] > 1:
            if key in reported:
                continue
            reported.add(key)
            error, message = KafkaError.INVALID_REQUEST, "Duplicate topic name or id."
        elif name is not None and topic_id != ZERO_TOPIC_ID:
            error = KafkaError.INVALID_REQUEST
            message = "You may not specify both topic name and topic id."
        elif name is None and topic_id == ZERO_TOPIC_ID:
            error, message = KafkaError.INVALID_REQUEST, "Neither topic name nor id were specified."
        else:
            if topic_id != ZERO_TOPIC_ID:
                name = call.ctx.manager.topic_by_id(topic_id)
            error = await _delete_one(call, name, known)
        results.append(
            {"name": name, "topic_id": topic_id, "error_code": error.code, "error_message": message}
        )
    return {"throttle_time_ms": 0, "responses": results}


async def _delete_one(call: KafkaCall, name: str | None, known: set[str]) -> KafkaError:
    if name is None:  # an id no topic has
        return KafkaError.UNKNOWN_TOPIC_ID
    if name not in known:  # Kafka says so only to who may describe it
        seen = call.permits(_DESCRIBE_TOPIC, name)
        return (
            KafkaError.UNKNOWN_TOPIC_OR_PARTITION if seen else KafkaError.TOPIC_AUTHORIZATION_FAILED
        )
    return (await run_native(call.ctx, "delete_topic", DeleteTopicRequest(topic=name))).error


# --- DeleteRecords --------------------------------------------------------------------


async def delete_records(call: KafkaCall) -> KafkaAnswer:
    """DeleteRecords v0-1: the native per-partition answer in Kafka's shape."""
    topics = call.body["topics"]
    native_body: DeleteRecordsRequest = {
        "topics": [
            {
                "topic": t["name"],
                "partitions": [
                    {"partition": p["partition_index"], "offset": p["offset"]}
                    for p in t["partitions"]
                ],
            }
            for t in topics
        ]
    }
    outcome = await run_native(call.ctx, "delete_records", native_body)
    if outcome.answer is None:  # the whole request refused: every partition says why
        return {
            "throttle_time_ms": 0,
            "topics": [
                {
                    "name": t["name"],
                    "partitions": [
                        _deleted(p["partition_index"], None, outcome.error) for p in t["partitions"]
                    ],
                }
                for t in topics
            ],
        }
    return {
        "throttle_time_ms": 0,
        "topics": [
            {
                "name": t["topic"],
                "partitions": [
                    _deleted(p["partition"], p["low_watermark"], for_tidelog_code(p["error"]))
                    for p in t["partitions"]
                ],
            }
            for t in outcome.answer["topics"]
        ],
    }


def _deleted(partition: int, low: int | None, error: KafkaError) -> dict[str, Any]:
    return {
        "partition_index": partition,
        "low_watermark": -1 if low is None or error is not KafkaError.NONE else low,
        "error_code": error.code,
    }


# --- DescribeCluster ------------------------------------------------------------------


def _endpoint_error(endpoint_type: int) -> tuple[KafkaError, str | None]:
    """v1+: this listener serves brokers (1); Kafka's answers for controllers (2) or others."""
    if endpoint_type == BROKERS_ENDPOINT:
        return KafkaError.NONE, None
    if endpoint_type == CONTROLLERS_ENDPOINT:
        return KafkaError.MISMATCHED_ENDPOINT_TYPE, (
            "The request was sent to an endpoint of type BROKER, "
            "but we wanted an endpoint of type CONTROLLER"
        )
    return KafkaError.UNSUPPORTED_ENDPOINT_TYPE, f"Unsupported endpoint type {endpoint_type}"


def _cluster_operations(call: KafkaCall) -> int:
    """The cluster operations the principal may perform, as Kafka's bit field."""
    return sum(
        1 << code
        for op, code in CLUSTER_OPERATIONS.items()
        if allows(call.ctx, op, ResourceType.CLUSTER, CLUSTER_NAME)
    )


async def describe_cluster(call: KafkaCall) -> KafkaAnswer:
    """DescribeCluster v0-2: this broker is the cluster and its controller (the same
    broker and cluster id Metadata names)."""
    return _cluster_answer(call, *_endpoint_error(call.body["endpoint_type"]))


def _cluster_answer(call: KafkaCall, error: KafkaError, message: str | None) -> KafkaAnswer:
    """DescribeCluster's answer with `error` (also the gate's refusal, for a principal
    without Describe on the cluster: no brokers)."""
    me = call.ctx.config.node_id
    host, port = advertised_address(call)
    wanted = call.body["include_cluster_authorized_operations"]
    brokers = [{"broker_id": me, "host": host, "port": port, "rack": None, "is_fenced": False}]
    return {
        "throttle_time_ms": 0,
        "error_code": error.code,
        "error_message": message,
        "endpoint_type": call.body["endpoint_type"],
        "cluster_id": CLUSTER_ID,
        "controller_id": me,
        "brokers": brokers if error is KafkaError.NONE else [],
        "cluster_authorized_operations": _cluster_operations(call)
        if wanted
        else OPERATIONS_NOT_REQUESTED,
    }


# The rights the rows below declare besides their native rows': CreateTopics' and
# DeleteTopics' per topic (checked above), DescribeCluster's (by the gate).
_CREATE = Right(Operation.CREATE, ResourceType.TOPIC, or_cluster=True)
_DESCRIBE_TOPIC = Right(Operation.DESCRIBE, ResourceType.TOPIC)  # an unknown name's answer
_DESCRIBE_CLUSTER = Right(Operation.DESCRIBE, ResourceType.CLUSTER)
HANDLERS: dict[int, KafkaApi] = {
    CREATE_TOPICS.key: KafkaApi(create_topics, Requires(each=_CREATE), via=("create_topic",)),
    DELETE_TOPICS.key: KafkaApi(
        delete_topics, Requires(each=_DESCRIBE_TOPIC), via=("delete_topic",)
    ),
    DELETE_RECORDS.key: KafkaApi(delete_records, via=("delete_records",)),
    DESCRIBE_CLUSTER.key: KafkaApi(
        describe_cluster, Requires(whole=_DESCRIBE_CLUSTER), _cluster_answer
    ),
    **CONFIG_HANDLERS,
}
