"""The consumer-group APIs (a Tidelog extension, docs/protocol.md §9): their schemas.

Kafka's classic group protocol over msgpack, one API per Kafka request, with
Kafka's error codes (protocol/errors.py) in an `error` field of the answer body
rather than as a request-level error: a JoinGroup answered MEMBER_ID_REQUIRED
still carries the member id to rejoin with.

- `join_group {group, member_id = "", group_instance_id = nil, protocol_type,
  protocols: [{name, metadata: bin}], session_timeout_ms, rebalance_timeout_ms = -1,
  client_id = ""}` -> `{error, message, generation, protocol_type, protocol, leader,
  member_id, members: [{member_id, group_instance_id, metadata}]}`; only the leader's
  answer lists the members. It waits until the join phase ends.
- `sync_group {group, member_id, generation, group_instance_id = nil, protocol_type =
  nil, protocol = nil, assignments = []}` where the leader sends `[{member_id,
  assignment: bin}]` -> `{error, message, protocol_type, protocol, assignment: bin}`.
- `heartbeat {group, member_id, generation, group_instance_id = nil}` -> `{error, message}`.
- `leave_group {group, members: [{member_id = "", group_instance_id = nil}]}` ->
  `{error, message, members: [{member_id, group_instance_id, error}]}`.
- `list_groups {}` -> `{groups: [{group, state, protocol_type}]}`.
- `describe_groups {groups: [str]}` -> `{groups: [{group, error, message, state,
  protocol_type, protocol, generation, leader, members: [{member_id,
  group_instance_id, client_id, client_host, metadata: bin, assignment: bin}]}]}`.
- `delete_groups {groups: [str]}` -> `{groups: [{group, error, message}]}`.

Registered with every other API in `protocol.schemas`.
"""

from __future__ import annotations

from protocol.schema_types import (
    INT32,
    ApiSchema,
    Bin,
    ListOf,
    Nullable,
    Str,
    Struct,
    opt,
)

JOIN_GROUP = "join_group"
SYNC_GROUP = "sync_group"
HEARTBEAT = "heartbeat"
LEAVE_GROUP = "leave_group"
LIST_GROUPS = "list_groups"
DESCRIBE_GROUPS = "describe_groups"
DELETE_GROUPS = "delete_groups"

# Kafka's client-side limit on the assignors one member offers is none; a bound keeps
# one JoinGroup's metadata (kept per member for the whole generation) small.
MAX_PROTOCOLS = 16
# Groups named in one describe or delete.
MAX_GROUPS_PER_REQUEST = 1000

_ERROR = opt(Nullable(Str()), None)
_MESSAGE = opt(Nullable(Str()), None)
_NULLABLE_STR = opt(Nullable(Str()), None)
_ERROR_ONLY = Struct(error=_ERROR, message=_MESSAGE)

JOIN_GROUP_SCHEMA = ApiSchema(
    JOIN_GROUP,
    Struct(
        group=Str(),
        member_id=opt(Str(), ""),
        group_instance_id=_NULLABLE_STR,
        protocol_type=Str(),
        protocols=ListOf(Struct(name=Str(), metadata=Bin()), max_items=MAX_PROTOCOLS),
        session_timeout_ms=INT32,
        rebalance_timeout_ms=opt(INT32, -1),  # -1: the session timeout (Kafka's v0)
        client_id=opt(Str(), ""),
    ),
    Struct(
        error=_ERROR,
        message=_MESSAGE,
        generation=INT32,
        protocol_type=_NULLABLE_STR,
        protocol=_NULLABLE_STR,
        leader=Str(),
        member_id=Str(),
        members=ListOf(Struct(member_id=Str(), group_instance_id=_NULLABLE_STR, metadata=Bin())),
    ),
)

SYNC_GROUP_SCHEMA = ApiSchema(
    SYNC_GROUP,
    Struct(
        group=Str(),
        member_id=Str(),
        generation=INT32,
        group_instance_id=_NULLABLE_STR,
        protocol_type=_NULLABLE_STR,
        protocol=_NULLABLE_STR,
        assignments=opt(ListOf(Struct(member_id=Str(), assignment=Bin())), []),
    ),
    Struct(
        error=_ERROR,
        message=_MESSAGE,
        protocol_type=_NULLABLE_STR,
        protocol=_NULLABLE_STR,
        assignment=Bin(),
    ),
)

HEARTBEAT_SCHEMA = ApiSchema(
    HEARTBEAT,
    Struct(group=Str(), member_id=Str(), generation=INT32, group_instance_id=_NULLABLE_STR),
    _ERROR_ONLY,
)

LEAVE_GROUP_SCHEMA = ApiSchema(
    LEAVE_GROUP,
    Struct(
        group=Str(),
        members=ListOf(Struct(member_id=opt(Str(), ""), group_instance_id=_NULLABLE_STR)),
    ),
    Struct(
        error=_ERROR,
        message=_MESSAGE,
        members=ListOf(Struct(member_id=Str(), group_instance_id=_NULLABLE_STR, error=_ERROR)),
    ),
)

LIST_GROUPS_SCHEMA = ApiSchema(
    LIST_GROUPS,
    Struct(),
    Struct(groups=ListOf(Struct(group=Str(), state=Str(), protocol_type=_NULLABLE_STR))),
)

_GROUP_NAMES = Struct(groups=ListOf(Str(), max_items=MAX_GROUPS_PER_REQUEST))

DESCRIBE_GROUPS_SCHEMA = ApiSchema(
    DESCRIBE_GROUPS,
    _GROUP_NAMES,
    Struct(
        groups=ListOf(
            Struct(
                group=Str(),
                error=_ERROR,
                message=_MESSAGE,
                state=Str(),
                protocol_type=_NULLABLE_STR,
                protocol=_NULLABLE_STR,
                generation=INT32,
                leader=_NULLABLE_STR,
                members=ListOf(
                    Struct(
                        member_id=Str(),
                        group_instance_id=_NULLABLE_STR,
                        client_id=Str(),
                        client_host=Str(),
                        metadata=Bin(),
                        assignment=Bin(),
                    )
                ),
            )
        )
    ),
)

DELETE_GROUPS_SCHEMA = ApiSchema(
    DELETE_GROUPS,
    _GROUP_NAMES,
    Struct(groups=ListOf(Struct(group=Str(), error=_ERROR, message=_MESSAGE))),
)

GROUP_SCHEMAS: tuple[ApiSchema, ...] = (
    JOIN_GROUP_SCHEMA,
    SYNC_GROUP_SCHEMA,
    HEARTBEAT_SCHEMA,
    LEAVE_GROUP_SCHEMA,
    LIST_GROUPS_SCHEMA,
    DESCRIBE_GROUPS_SCHEMA,
    DELETE_GROUPS_SCHEMA,
)
