"""Kafka's cluster-administration APIs on one broker: CreatePartitions,
DescribeLogDirs, ElectLeaders, List- and AlterPartitionReassignments.

What `kafka-topics --alter --partitions`, `kafka-log-dirs`, `kafka-leader-election`
and `kafka-reassign-partitions` call. Each answers what a single-node Apache Kafka
4.4 (KRaft, broker and controller in one process) answers, codes and messages
(its `ControllerApis`/`ReplicationControlManager` and `KafkaApis`, seen side by side
in interop/), with one broker as every partition's only replica and leader:

- CreatePartitions grows a topic (`LogManager.add_partitions`): only increases,
  per-topic errors, `validate_only`; Alter on each topic (denied ones answer
  TOPIC_AUTHORIZATION_FAILED beside the others, before their existence is told).
  The new partitions are served at once. Growing Tidelog's internal offsets topic
  is refused (its group -> partition mapping depends on the count).
- DescribeLogDirs: the data directory is the one log dir; sizes per partition,
  offset lag 0 (no follower), never a future log; the volume's total and usable
  bytes from v4. Describe on the cluster (else no dirs, and from v3 the error).
- ElectLeaders: the only replica already leads: ELECTION_NOT_NEEDED per named
  partition; for every partition (null) each topic with no results, as Kafka omits
  the partitions that need none. Alter on the cluster.
- ListPartitionReassignments: never any (Describe on the cluster);
  AlterPartitionReassignments: a partition's replicas set to this broker is a
  no-op success, another broker is not registered (INVALID_REPLICA_ASSIGNMENT), a
  cancel finds none in progress (Alter on the cluster).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import trio

from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.native_call import Refused
from broker.security.acl import Operation, ResourceType
from broker.security.requires import Requires, Right
from protocol.errors import TidelogError
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import (
    ALTER_PARTITION_REASSIGNMENTS,
    CREATE_PARTITIONS,
    DESCRIBE_LOG_DIRS,
    ELECT_LEADERS,
    LIST_PARTITION_REASSIGNMENTS,
)
from protocol.offsets_schema import INTERNAL_TOPICS

# Kafka's controller writes at most this many records for one request (its
# MAX_RECORDS_PER_USER_OP): more new partitions at once is a policy violation.
MAX_NEW_PARTITIONS_PER_REQUEST = 10_000
# ElectLeaders' election types (Kafka's ElectionType).
PREFERRED, UNCLEAN = 0, 1
# Kafka's message for ELECTION_NOT_NEEDED (Errors.ELECTION_NOT_NEEDED.message()).
ELECTION_NOT_NEEDED_MESSAGE = "Leader election not needed for topic partition."

_ALTER_TOPIC = Right(Operation.ALTER, ResourceType.TOPIC)
_ALTER_CLUSTER = Right(Operation.ALTER, ResourceType.CLUSTER)
_DESCRIBE_CLUSTER = Right(Operation.DESCRIBE, ResourceType.CLUSTER)


def _result(name: str, error: KafkaError, message: str | None) -> dict[str, Any]:
    return {"name": name, "error_code": error.code, "error_message": message}


# --- CreatePartitions -----------------------------------------------------------------


def _check_replicas(me: int, replicas: list[int]) -> None:
    """Kafka's `validateManualPartitionAssignment` on a one-broker cluster."""
    if not replicas:
        raise Refused(
            KafkaError.INVALID_REPLICA_ASSIGNMENT,
            "The manual partition assignment includes an empty replica list.",
        )
    previous = None
    for broker in sorted(replicas):
        if broker != me:
            raise Refused(
                KafkaError.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes broker {broker}, "
                "but no such broker is registered.",
            )
        if broker == previous:
            raise Refused(
                KafkaError.INVALID_REPLICA_ASSIGNMENT,
                f"The manual partition assignment includes the broker {broker} more than once.",
            )
        previous = broker


def _check_growth(call: KafkaCall, topic: dict[str, Any]) -> None:
    """What Kafka's controller checks of one topic before it adds any partition."""
    name, count, assignments = topic["name"], topic["count"], topic["assignments"]
    manager = call.ctx.manager
    if name not in manager.topics():
        raise Refused(KafkaError.UNKNOWN_TOPIC_OR_PARTITION, None)
    if name in INTERNAL_TOPICS:
        raise Refused(
            KafkaError.INVALID_REQUEST,
            f"Tidelog does not grow its internal topic {name}: "
            "its groups are placed by its partition count",
        )
    before = manager.partition_count(name)
    if count == before:
        raise Refused(KafkaError.INVALID_PARTITIONS, f"Topic already has {before} partition(s).")
    if count < before:
        raise Refused(
            KafkaError.INVALID_PARTITIONS,
            f"The topic {name} currently has {before} partition(s); "
            f"{count} would not be an increase.",
        )
    additional = count - before
    if assignments is not None:
        if len(assignments) != additional:
            raise Refused(
                KafkaError.INVALID_REPLICA_ASSIGNMENT,
                f"Attempted to add {additional} additional partition(s), "
                f"but only {len(assignments)} assignment(s) were specified.",
            )
        for assignment in assignments:
            _check_replicas(call.ctx.config.node_id, assignment["broker_ids"])
    if additional > MAX_NEW_PARTITIONS_PER_REQUEST:
        raise Refused(
            KafkaError.POLICY_VIOLATION,
            "Excessively large number of additional partitions per request.",
        )


async def _grow(call: KafkaCall, topic: dict[str, Any], validate_only: bool) -> dict[str, Any]:
    name = topic["name"]
    try:
        _check_growth(call, topic)
        await trio.to_thread.run_sync(
            lambda: call.ctx.manager.add_partitions(
                name, topic["count"], validate_only=validate_only
            )
        )
    except Refused as refused:
        return _result(name, refused.outcome.error, refused.outcome.message)
    except TidelogError as exc:  # the storage's own limits, or a deletion meanwhile
        return _result(name, for_tidelog_code(exc.code), exc.message or None)
    return _result(name, KafkaError.NONE, None)


async def create_partitions(call: KafkaCall) -> KafkaAnswer:
    """CreatePartitions v0-3, in Kafka's order: repeated names, then the topics the
    principal may not alter, then each topic's outcome."""
    topics = call.body["topics"]
    counts = Counter(t["name"] for t in topics)
    results = [
        _result(name, KafkaError.INVALID_REQUEST, "Duplicate topic name.")
        for name, seen in counts.items()
        if seen > 1
    ]
    allowed = []
    for topic in topics:
        name = topic["name"]
        if counts[name] > 1:
            continue
        if call.permits(_ALTER_TOPIC, name):
            allowed.append(topic)
        else:
            results.append(_result(name, KafkaError.TOPIC_AUTHORIZATION_FAILED, None))
    for topic in allowed:
        results.append(await _grow(call, topic, call.body["validate_only"]))
    return {"throttle_time_ms": 0, "results": results}


# --- DescribeLogDirs ------------------------------------------------------------------


def _wanted(call: KafkaCall) -> dict[str, list[int]]:
    """The (topic, partitions) that exist among those asked for (null: every one)."""
    manager = call.ctx.manager
    known = {name: manager.partition_count(name) for name in manager.topics()}
    asked = call.body["topics"]
    if asked is None:
        return {name: list(range(count)) for name, count in known.items()}
    wanted: dict[str, list[int]] = {}
    for entry in asked:
        count = known.get(entry["topic"])
        if count is None:
            continue
        parts = [p for p in entry["partitions"] if 0 <= p < count]
        if parts:
            wanted.setdefault(entry["topic"], []).extend(parts)
    return wanted


def _volume(path: str) -> tuple[int, int]:
    """The total and usable bytes of the volume `path` is on (Java's FileStore)."""
    stats = os.statvfs(path)
    return stats.f_blocks * stats.f_frsize, stats.f_bavail * stats.f_frsize


async def describe_log_dirs(call: KafkaCall) -> KafkaAnswer:
    """DescribeLogDirs v1-4: the data directory and the partitions asked for in it."""
    manager = call.ctx.manager
    topics = []
    for name, parts in _wanted(call).items():
        entries = []
        for partition in dict.fromkeys(parts):
            try:
                size = manager.get_log(name, partition).size_bytes
            except TidelogError:  # deleted meanwhile: Kafka has no log to describe
                continue
            entries.append(
                {
                    "partition_index": partition,
                    "partition_size": size,
                    "offset_lag": 0,  # no follower: the high watermark is the log end
                    "is_future_key": False,
                }
            )
        if entries:
            topics.append({"name": name, "partitions": entries})
    log_dir = str(call.ctx.config.data_dir.absolute())
    total, usable = await trio.to_thread.run_sync(_volume, log_dir)
    result = {
        "error_code": 0,
        "log_dir": log_dir,
        "topics": topics,
        "total_bytes": total,
        "usable_bytes": usable,
    }
    return {"throttle_time_ms": 0, "error_code": 0, "results": [result]}


def _log_dirs_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's answer without Describe on the cluster: no dirs (and the code from v3)."""
    return {"throttle_time_ms": 0, "error_code": error.code, "results": []}


# --- ElectLeaders ---------------------------------------------------------------------


def _election(call: KafkaCall, topic: str, partition: int) -> dict[str, Any]:
    manager = call.ctx.manager
    if topic not in manager.topics():
        error, message = KafkaError.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {topic}"
    elif not 0 <= partition < manager.partition_count(topic):
        error = KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        message = f"No such partition as {topic}-{partition}"
    else:  # this broker, the only replica, leads it: preferred and live alike
        error, message = KafkaError.ELECTION_NOT_NEEDED, ELECTION_NOT_NEEDED_MESSAGE
    return {"partition_id": partition, "error_code": error.code, "error_message": message}


async def elect_leaders(call: KafkaCall) -> KafkaAnswer:
    """ElectLeaders v0-2 (v0 has no election type: preferred)."""
    body = call.body
    election_type = body["election_type"]
    if election_type not in (PREFERRED, UNCLEAN):
        return _elections_refused(
            call, KafkaError.INVALID_REQUEST, f"Unknown election type {election_type}"
        )
    asked = body["topic_partitions"]
    results: list[dict[str, Any]]
    if asked is None:  # every partition: Kafka leaves out those that need no election
        results = [{"topic": name, "partition_result": []} for name in call.ctx.manager.topics()]
    else:
        results = [
            {
                "topic": t["topic"],
                "partition_result": [_election(call, t["topic"], p) for p in t["partitions"]],
            }
            for t in asked
        ]
    return {"throttle_time_ms": 0, "error_code": 0, "replica_election_results": results}


def _elections_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `ElectLeadersRequest.getErrorResponse`: the error on the request and on
    every partition it names."""
    asked = call.body["topic_partitions"] or []
    results = [
        {
            "topic": t["topic"],
            "partition_result": [
                {"partition_id": p, "error_code": error.code, "error_message": message}
                for p in t["partitions"]
            ],
        }
        for t in asked
    ]
    return {"throttle_time_ms": 0, "error_code": error.code, "replica_election_results": results}


# --- List- and AlterPartitionReassignments --------------------------------------------


async def list_partition_reassignments(call: KafkaCall) -> KafkaAnswer:
    """ListPartitionReassignments v0: one broker never has one in progress."""
    return {"throttle_time_ms": 0, "error_code": 0, "error_message": None, "topics": []}


def _listing_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `ListPartitionReassignmentsRequest.getErrorResponse`."""
    topics = [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p,
                    "replicas": [],
                    "adding_replicas": [],
                    "removing_replicas": [],
                }
                for p in t["partition_indexes"]
            ],
        }
        for t in call.body["topics"] or []
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": error.code,
        "error_message": message,
        "topics": topics,
    }


def _reassignment(call: KafkaCall, topic: str, partition: dict[str, Any]) -> dict[str, Any]:
    manager = call.ctx.manager
    index, replicas = partition["partition_index"], partition["replicas"]
    error, message = KafkaError.NONE, None
    try:
        if topic not in manager.topics():
            raise Refused(
                KafkaError.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {topic}."
            )
        if not 0 <= index < manager.partition_count(topic):
            raise Refused(
                KafkaError.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {topic}:{index}."
            )
        if replicas is None:  # a cancel: Kafka's message is the error's own (null)
            raise Refused(KafkaError.NO_REASSIGNMENT_IN_PROGRESS, None)
        _check_replicas(call.ctx.config.node_id, replicas)
    except Refused as refused:
        error, message = refused.outcome.error, refused.outcome.message
    return {"partition_index": index, "error_code": error.code, "error_message": message}


async def alter_partition_reassignments(call: KafkaCall) -> KafkaAnswer:
    """AlterPartitionReassignments v0: to this broker, nothing to move."""
    topics = call.body["topics"]
    responses = [
        {
            "name": t["name"],
            "partitions": [_reassignment(call, t["name"], p) for p in t["partitions"]],
        }
        for t in topics
    ]
    # Kafka 4.4 answers an empty request with an empty (not null) message.
    message = None if topics else ""
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "error_message": message,
        "responses": responses,
    }


def _reassignments_refused(call: KafkaCall, error: KafkaError, message: str) -> KafkaAnswer:
    """Kafka's `AlterPartitionReassignmentsRequest.getErrorResponse`."""
    responses = [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": error.code,
                    "error_message": message,
                }
                for p in t["partitions"]
            ],
        }
        for t in call.body["topics"]
    ]
    return {
        "throttle_time_ms": 0,
        "error_code": error.code,
        "error_message": message,
        "responses": responses,
    }


HANDLERS: dict[int, KafkaApi] = {
    CREATE_PARTITIONS.key: KafkaApi(create_partitions, Requires(each=_ALTER_TOPIC)),
    DESCRIBE_LOG_DIRS.key: KafkaApi(
        describe_log_dirs, Requires(whole=_DESCRIBE_CLUSTER), _log_dirs_refused
    ),
    ELECT_LEADERS.key: KafkaApi(elect_leaders, Requires(whole=_ALTER_CLUSTER), _elections_refused),
    LIST_PARTITION_REASSIGNMENTS.key: KafkaApi(
        list_partition_reassignments, Requires(whole=_DESCRIBE_CLUSTER), _listing_refused
    ),
    ALTER_PARTITION_REASSIGNMENTS.key: KafkaApi(
        alter_partition_reassignments, Requires(whole=_ALTER_CLUSTER), _reassignments_refused
    ),
}
