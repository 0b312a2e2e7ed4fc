"""Kafka's group APIs on Tidelog's group handlers (docs/groups.md).

FindCoordinator names this broker; JoinGroup, SyncGroup, Heartbeat, LeaveGroup,
ListGroups, DescribeGroups, DeleteGroups, OffsetCommit and OffsetFetch call the
same native handlers as the msgpack APIs (`broker.dispatch.handler_for`), so a
Kafka consumer and a Tidelog consumer are members of the same groups, seen by the
same coordinator. OffsetDelete has no native API and calls the coordinator
directly. Tidelog error names become Kafka codes through `for_tidelog_code`.

Version notes (Kafka's own behaviour): JoinGroup v0-v3 clients do not know
MEMBER_ID_REQUIRED, so they are added at once; v0 has no rebalance timeout (the
session timeout is used). LeaveGroup v0-v2 name one member and get its error at
the top. OffsetCommit v2-v4's retention_time_ms is ignored (offsets.retention.minutes
applies, as in Kafka 2.1+ for clients that send -1). DescribeGroups gives a member's
host as Kafka's broker does (`kafka_client_host`), which kafka-consumer-groups prints.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from broker.authz.access import denied_message
from broker.dispatch import handler_for
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.core import advertised_address
from broker.kafka.transactions import DESCRIBE_TRANSACTIONAL_ID, transactional_id_permitted
from broker.security.acl import Operation, ResourceType
from broker.security.requires import Requires, Right
from protocol.errors import GroupAuthorizationFailed, TidelogError
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.kafka.messages import (
    DELETE_GROUPS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    HEARTBEAT,
    JOIN_GROUP,
    LEAVE_GROUP,
    LIST_GROUPS,
    OFFSET_COMMIT,
    OFFSET_DELETE,
    OFFSET_FETCH,
    SYNC_GROUP,
)
from protocol.offsets_schema import MAX_METADATA_CHARS

# FindCoordinator key types (KIP-98): this broker coordinates groups and transactions.
GROUP_KEY_TYPE = 0
TRANSACTION_KEY_TYPE = 1
# FindCoordinator versions that batch their keys (KIP-699).
BATCHED_COORDINATORS_MIN_VERSION = 4
# OffsetFetch versions that batch their groups (KIP-709).
BATCHED_OFFSET_FETCH_MIN_VERSION = 8
# ListGroups' group type (v5+): every group here is a classic one.
CLASSIC_GROUP_TYPE = "classic"
# JoinGroup versions whose clients know MEMBER_ID_REQUIRED (KIP-394).
MEMBER_ID_REQUIRED_MIN_VERSION = 4
# LeaveGroup versions that name several members (KIP-345).
LEAVE_MEMBERS_MIN_VERSION = 3
NO_EPOCH = -1
# DescribeGroups' authorized_operations when the client did not ask for them.
NO_OPERATIONS = -(2**31)


def _code(error: str | None) -> int:
    return for_tidelog_code(error).code


async def _native(call: KafkaCall, api: str, body: dict[str, Any]) -> dict[str, Any]:
    answer = await handler_for(api)(call.ctx, body)
    assert isinstance(answer, dict), answer
    return answer


def _coordinator(call: KafkaCall, key_type: int, key: str) -> dict[str, Any]:
    """One key's coordinator: this broker for a group the principal may describe, and
    for a transactional id it may describe once the transaction log is loaded
    (COORDINATOR_NOT_AVAILABLE, retriable, until then: Kafka's answer)."""
    if key_type == TRANSACTION_KEY_TYPE:
        if not key:
            return _none(key, KafkaError.INVALID_REQUEST, "an empty transactional id")
        if not transactional_id_permitted(call, DESCRIBE_TRANSACTIONAL_ID, key):
            message = denied_message(Operation.DESCRIBE, ResourceType.TRANSACTIONAL_ID, key)
            return _none(key, KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, message)
        if not call.ctx.transactions.loaded:
            error = KafkaError.COORDINATOR_NOT_AVAILABLE
            return _none(key, error, "the transaction log is loading")
    elif key_type != GROUP_KEY_TYPE:
        return _none(
            key,
            KafkaError.INVALID_REQUEST,
            f"key_type {key_type}: groups (0) and transactions (1) have coordinators here",
        )
    elif not call.permits(_DESCRIBE_GROUP, key):
        message = denied_message(Operation.DESCRIBE, ResourceType.GROUP, key)
        return _none(key, KafkaError.GROUP_AUTHORIZATION_FAILED, message)
    host, port = advertised_address(call)
    return {
        "key": key,
        "node_id": call.ctx.config.node_id,
        "host": host,
        "port": port,
        "error_code": KafkaError.NONE.code,
        "error_message": None,
    }


def _none(key: str, error: KafkaError, message: str) -> dict[str, Any]:
    return {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": error.code,
        "error_message": message,
    }


async def find_coordinator(call: KafkaCall) -> KafkaAnswer:
    """This broker coordinates every group and every transactional id.
    From v4 the keys come batched, each answered on its own (KIP-699)."""
    body = call.body
    if call.version >= BATCHED_COORDINATORS_MIN_VERSION:
        keys = body["coordinator_keys"]
        found = [_coordinator(call, body["key_type"], key) for key in keys]
        return {"throttle_time_ms": 0, "coordinators": found}
    one = _coordinator(call, body["key_type"], body["key"])
    del one["key"]
    return {"throttle_time_ms": 0, **one}


def _member_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The native fields that say which member of which group is asking."""
    return {
        "group": body["group_id"],
        "member_id": body["member_id"],
        "group_instance_id": body.get("group_instance_id"),
    }


async def _member_call(
    call: KafkaCall, api: str, fields: dict[str, Any]
) -> tuple[KafkaAnswer, dict[str, Any]]:
    """A member's request (JoinGroup, SyncGroup, Heartbeat) on the native `api`, with
    the member's fields and the API's own `fields`: the Kafka response's head
    (throttle and error code, first, as every one of these answers starts) and the
    native answer, whose other fields each adapter maps itself."""
    answer = await _native(call, api, {**_member_fields(call.body), **fields})
    return {"throttle_time_ms": 0, "error_code": _code(answer["error"])}, answer


async def join_group(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    head, answer = await _member_call(
        call,
        "join_group",
        {
            "protocol_type": body["protocol_type"],
            "protocols": [
                {"name": p["name"], "metadata": bytes(p["metadata"])} for p in body["protocols"]
            ],
            "session_timeout_ms": body["session_timeout_ms"],
            "rebalance_timeout_ms": body.get("rebalance_timeout_ms", -1),
            "client_id": call.request.header.client_id or "",
            "client_host": call.conn.peer.rpartition(":")[0] or call.conn.peer,
            "require_known_member_id": call.version >= MEMBER_ID_REQUIRED_MIN_VERSION,
        },
    )
    return {
        **head,
        "generation_id": answer["generation"],
        "protocol_type": answer["protocol_type"],  # v7+
        "protocol_name": answer["protocol"] or "",
        "leader": answer["leader"],
        "member_id": answer["member_id"],
        "members": [
            {
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "metadata": m["metadata"],
            }
            for m in answer["members"]
        ],
    }


async def sync_group(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    head, answer = await _member_call(
        call,
        "sync_group",
        {
            "generation": body["generation_id"],
            # v5+: checked against the group's (INCONSISTENT_GROUP_PROTOCOL); null before
            "protocol_type": body["protocol_type"],
            "protocol": body["protocol_name"],
            "assignments": [
                {"member_id": a["member_id"], "assignment": bytes(a["assignment"])}
                for a in body["assignments"]
            ],
        },
    )
    return {
        **head,
        "protocol_type": answer["protocol_type"],
        "protocol_name": answer["protocol"],
        "assignment": answer["assignment"],
    }


async def heartbeat(call: KafkaCall) -> KafkaAnswer:
    head, _ = await _member_call(call, "heartbeat", {"generation": call.body["generation_id"]})
    return head


async def leave_group(call: KafkaCall) -> KafkaAnswer:
    body = call.body
    if call.version >= LEAVE_MEMBERS_MIN_VERSION:
        members = [
            {"member_id": m["member_id"], "group_instance_id": m["group_instance_id"]}
            for m in body["members"]
        ]
    else:
        members = [{"member_id": body["member_id"], "group_instance_id": None}]
    answer = await _native(call, "leave_group", {"group": body["group_id"], "members": members})
    error = answer["error"]
    if call.version < LEAVE_MEMBERS_MIN_VERSION and error is None and answer["members"]:
        error = answer["members"][0]["error"]  # one member: its error is the answer's
    return {
        "throttle_time_ms": 0,
        "error_code": _code(error),
        "members": [
            {
                "member_id": m["member_id"],
                "group_instance_id": m["group_instance_id"],
                "error_code": _code(m["error"]),
            }
            for m in answer["members"]
        ],
    }


async def list_groups(call: KafkaCall) -> KafkaAnswer:
    """Every group, or (v4+) those in the states asked, (v5+) of the types asked (all
    classic here); both filters are case-insensitive, as Kafka's."""
    answer = await _native(call, "list_groups", {})
    states = {state.lower() for state in call.body["states_filter"]}
    types = {kind.lower() for kind in call.body["types_filter"]}
    groups = [] if types and CLASSIC_GROUP_TYPE not in types else answer["groups"]
    return {
        "throttle_time_ms": 0,
        "error_code": KafkaError.NONE.code,
        "groups": [
            {
                "group_id": g["group"],
                "protocol_type": g["protocol_type"] or "",
                "group_state": g["state"],
                "group_type": CLASSIC_GROUP_TYPE,
            }
            for g in groups
            if not states or g["state"].lower() in states
        ],
    }


def kafka_client_host(host: str) -> str:
    """A member's host as Kafka's DescribeGroups gives it: Java's InetAddress.toString()
    of the client's address, "/127.0.0.1" (IPv6 written out in full, "/0:0:0:0:0:0:0:1").
    Members keep the plain address (`tidelog groups describe` shows that)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return host  # not an address (an in-memory connection): nothing to format
    if address.version == 6:
        return "/" + ":".join(f"{int(group, 16):x}" for group in address.exploded.split(":"))
    return f"/{address}"


async def _each_group(call: KafkaCall, api: str, names: list[str]) -> list[dict[str, Any]]:
    """The native answer's entries, one call per group, so that a group the principal
    may not see is its own GROUP_AUTHORIZATION_FAILED, as Kafka answers, not the
    whole request's (the native policy refuses the request)."""
    entries = []
    for name in names:
        try:
            entries.extend((await _native(call, api, {"groups": [name]}))["groups"])
        except GroupAuthorizationFailed:
            entries.append(_denied_group(name))
    return entries


def _denied_group(name: str) -> dict[str, Any]:
    return {
        "group": name,
        "error": GroupAuthorizationFailed.code,
        "state": "",
        "protocol_type": None,
        "protocol": None,
        "members": [],
    }


async def describe_groups(call: KafkaCall) -> KafkaAnswer:
    groups = await _each_group(call, "describe_groups", list(call.body["groups"]))
    return {
        "throttle_time_ms": 0,
        "groups": [
            {
                "error_code": _code(g["error"]),
                "group_id": g["group"],
                "group_state": g["state"],
                "protocol_type": g["protocol_type"] or "",
                "protocol_data": g["protocol"] or "",
                "members": [
                    {
                        "member_id": m["member_id"],
                        "group_instance_id": m["group_instance_id"],
                        "client_id": m["client_id"],
                        "client_host": kafka_client_host(m["client_host"]),
                        "member_metadata": m["metadata"],
                        "member_assignment": m["assignment"],
                    }
                    for m in g["members"]
                ],
                "authorized_operations": NO_OPERATIONS,
            }
            for g in groups
        ],
    }


async def delete_groups(call: KafkaCall) -> KafkaAnswer:
    groups = await _each_group(call, "delete_groups", list(call.body["groups_names"]))
    return {
        "throttle_time_ms": 0,
        "results": [{"group_id": g["group"], "error_code": _code(g["error"])} for g in groups],
    }


def _partition_errors(
    topics: list[dict[str, Any]], error_of: dict[tuple[str, int], int]
) -> list[dict[str, Any]]:
    return [
        {
            "name": t["name"],
            "partitions": [
                {
                    "partition_index": p["partition_index"],
                    "error_code": error_of.get(
                        (t["name"], p["partition_index"]), KafkaError.NONE.code
                    ),
                }
                for p in t["partitions"]
            ],
        }
        for t in topics
    ]


async def offset_commit(call: KafkaCall) -> KafkaAnswer:
    """Through the native commit_offsets, fenced by the member's generation; metadata
    over 4096 characters is that partition's OFFSET_METADATA_TOO_LARGE."""
    body = call.body
    error_of: dict[tuple[str, int], int] = {}
    native_topics = []
    for t in body["topics"]:
        parts = []
        for p in t["partitions"]:
            metadata = p["committed_metadata"] or ""
            if len(metadata) > MAX_METADATA_CHARS:
                too_large = KafkaError.OFFSET_METADATA_TOO_LARGE
                error_of[(t["name"], p["partition_index"])] = too_large.code
                continue
            parts.append(
                {
                    "partition": p["partition_index"],
                    "offset": p["committed_offset"],
                    "metadata": metadata,
                }
            )
        if parts:
            native_topics.append({"topic": t["name"], "partitions": parts})
    native = {
        **_member_fields(body),
        "topics": native_topics,
        "generation": body["generation_id_or_member_epoch"],
    }
    try:
        answer = await _native(call, "commit_offsets", native)
    except TidelogError as exc:  # not authorized, an empty group id, a negative offset
        if isinstance(exc, GroupAuthorizationFailed):
            code = KafkaError.GROUP_AUTHORIZATION_FAILED  # Kafka puts it on every partition
        elif not body["group_id"]:
            code = KafkaError.INVALID_GROUP_ID
        else:
            code = KafkaError.INVALID_REQUEST
        for t in native_topics:
            for p in t["partitions"]:
                error_of[(t["topic"], p["partition"])] = code.code
    else:
        for t in answer["topics"]:
            for p in t["partitions"]:
                error_of[(t["topic"], p["partition"])] = _code(p["error"])
    return {"throttle_time_ms": 0, "topics": _partition_errors(body["topics"], error_of)}


async def _group_offsets(
    call: KafkaCall, group: str, topics: list[dict[str, Any]] | None, require_stable: bool
) -> tuple[list[dict[str, Any]], KafkaError]:
    """One group's committed offsets (-1 and no error where none was committed, as
    Kafka answers) in Kafka's topic layout, and the group's error. `require_stable`:
    a partition an open transaction holds a TxnOffsetCommit for answers
    UNSTABLE_OFFSET_COMMIT (retriable) until the transaction ends (KIP-447)."""
    wanted = (
        None
        if topics is None
        else [{"topic": t["name"], "partitions": list(t["partition_indexes"])} for t in topics]
    )
    if not group:
        return [], KafkaError.INVALID_GROUP_ID
    try:
        answer = await _native(call, "fetch_offsets", {"group": group, "topics": wanted})
    except GroupAuthorizationFailed:  # v2+ read the top-level code, v0-1 each partition's
        denied = GroupAuthorizationFailed.code
        refused = [
            {
                "topic": t["topic"],
                "partitions": [
                    {"partition": p, "offset": -1, "metadata": "", "error": denied}
                    for p in t["partitions"]
                ],
            }
            for t in wanted or []
        ]
        answer = {"topics": refused, "error": denied}
    pending = call.ctx.transactions.has_pending_offset if require_stable else None
    found = []
    for t in answer["topics"]:
        parts = []
        for p in t["partitions"]:
            error = _code(p.get("error"))  # a topic not described: TOPIC_AUTHORIZATION_FAILED
            offset = p["offset"]
            if pending is not None and error == 0 and pending(group, (t["topic"], p["partition"])):
                error, offset = KafkaError.UNSTABLE_OFFSET_COMMIT.code, -1
            parts.append(
                {
                    "partition_index": p["partition"],
                    "committed_offset": offset,
                    "committed_leader_epoch": NO_EPOCH,
                    "metadata": p["metadata"],
                    "error_code": error,
                }
            )
        found.append({"name": t["topic"], "partitions": parts})
    return found, for_tidelog_code(answer.get("error"))


async def offset_fetch(call: KafkaCall) -> KafkaAnswer:
    """Committed offsets of one group, or (v8+) of each group asked; `require_stable`
    (v7+) as `_group_offsets` says. v9's member id and epoch belong to KIP-848 groups, which
    Tidelog does not have (a classic group's offsets are answered as Kafka does)."""
    body = call.body
    stable = bool(body.get("require_stable", False))
    if call.version >= BATCHED_OFFSET_FETCH_MIN_VERSION:
        groups = []
        for g in body["groups"]:
            topics, error = await _group_offsets(call, g["group_id"], g["topics"], stable)
            groups.append({"group_id": g["group_id"], "topics": topics, "error_code": error.code})
        return {"throttle_time_ms": 0, "groups": groups}
    topics, error = await _group_offsets(call, body["group_id"], body["topics"], stable)
    return {"throttle_time_ms": 0, "topics": topics, "error_code": error.code}


async def offset_delete(call: KafkaCall) -> KafkaAnswer:
    """The listed partitions' offsets of an Empty group (NON_EMPTY_GROUP otherwise)."""
    body = call.body
    group = body["group_id"]  # Delete on it: checked by the gate (its row)
    error_of: dict[tuple[str, int], int] = {}
    partitions = []
    for t in body["topics"]:  # Kafka: Read on each topic, else its partitions are refused
        allowed = call.permits(_READ_TOPIC, t["name"])
        for p in t["partitions"]:
            key = (t["name"], p["partition_index"])
            if allowed:
                partitions.append(key)
            else:
                error_of[key] = KafkaError.TOPIC_AUTHORIZATION_FAILED.code
    response = await call.ctx.groups.call(lambda c: c.delete_offsets(group, partitions))
    return {
        "error_code": _code(response.error),
        "throttle_time_ms": 0,
        "topics": _partition_errors(body["topics"], error_of),
    }


# FindCoordinator's and OffsetDelete's rights (the other rows': their native rows'):
# the group's, checked by the gate; OffsetDelete's topics', per topic above.
_DESCRIBE_GROUP = Right(Operation.DESCRIBE, ResourceType.GROUP)
_DELETE_GROUP = Right(Operation.DELETE, ResourceType.GROUP)
_READ_TOPIC = Right(Operation.READ, ResourceType.TOPIC)
HANDLERS: dict[int, KafkaApi] = {
    FIND_COORDINATOR.key: KafkaApi(find_coordinator, Requires(each=_DESCRIBE_GROUP)),
    JOIN_GROUP.key: KafkaApi(join_group, via=("join_group",)),
    SYNC_GROUP.key: KafkaApi(sync_group, via=("sync_group",)),
    HEARTBEAT.key: KafkaApi(heartbeat, via=("heartbeat",)),
    LEAVE_GROUP.key: KafkaApi(leave_group, via=("leave_group",)),
    LIST_GROUPS.key: KafkaApi(list_groups, via=("list_groups",)),
    DESCRIBE_GROUPS.key: KafkaApi(describe_groups, via=("describe_groups",)),
    DELETE_GROUPS.key: KafkaApi(delete_groups, via=("delete_groups",)),
    OFFSET_COMMIT.key: KafkaApi(offset_commit, via=("commit_offsets",)),
    OFFSET_FETCH.key: KafkaApi(offset_fetch, via=("fetch_offsets",), versions="1-9"),
    OFFSET_DELETE.key: KafkaApi(
        offset_delete, Requires(whole=_DELETE_GROUP, name_from="group_id", each=_READ_TOPIC)
    ),
}
