"""Request and response schemas of every API in docs/protocol.md §4, with validation.

Each API has a request and a response schema built from a handful of field
types. Validation is structural: types (a bool is never an int), int32/int64
ranges, enumerations (`acks`, `spec`), list and map sizes. Semantic checks
that have their own error code (a legal topic name, a positive partition
count, an offset in range) are left to the broker, which answers them with
that code; `check_topic_name` is here so both sides share the rule.

A failure raises `InvalidRequest` whose message names the offending key by its
full path, e.g. `body.topics[0].partitions[2].offset: expected int64, got bool`.
Validation returns a fresh dict holding the known keys only (unknown keys are
ignored, docs/protocol.md §2) with defaults filled in; arrays come back as lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from protocol.envelope import Request
from protocol.errors import InvalidRequest, InvalidTopic, UnsupportedVersion
from protocol.groups_schema import GROUP_SCHEMAS
from protocol.schema_types import (
    INT32,
    INT32_MAX,
    INT32_MIN,
    INT64,
    INT64_MAX,
    INT64_MIN,
    MAX_CONFIG_ENTRIES,
    MAX_LIST_ITEMS,
    MAX_PARTITIONS_PER_REQUEST,
    NON_NEGATIVE_INT32,
    UINT64,
    ApiSchema,
    Bin,
    Bool,
    Field,
    Int,
    ListOf,
    MapOf,
    Nullable,
    Scalar,
    Schema,
    SchemaError,
    Str,
    Struct,
    TopicPartitions,
    opt,
)
from protocol.transactions_schema import TRANSACTION_SCHEMAS

# The field types are re-exported: API tables and tests build schemas from here.
__all__ = [
    "ACKS",
    "APIS",
    "API_VERSIONS",
    "FETCH_PARTITION_ANSWER",
    "INT32",
    "INT32_MAX",
    "INT32_MIN",
    "INT64",
    "INT64_MAX",
    "INT64_MIN",
    "LIST_OFFSET_SPECS",
    "LOCAL_RECORDS",
    "MAX_CONFIG_ENTRIES",
    "MAX_LIST_ITEMS",
    "MAX_PARTITIONS_PER_REQUEST",
    "MAX_TOPIC_NAME_CHARS",
    "NON_NEGATIVE_INT32",
    "UINT64",
    "ApiSchema",
    "Bin",
    "Bool",
    "Field",
    "Int",
    "ListOf",
    "MapOf",
    "Nullable",
    "Scalar",
    "Schema",
    "SchemaError",
    "Str",
    "Struct",
    "TopicPartitions",
    "api_schema",
    "build_request",
    "check_topic_name",
    "opt",
    "validate_request",
    "validate_request_body",
    "validate_response_body",
]

# docs/protocol.md §4: legal topic names are 1-249 chars of [a-zA-Z0-9._-], not "." or "..".
MAX_TOPIC_NAME_CHARS = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")


def _topics(partition: Struct, **topic_fields: Schema | Field) -> Schema:
    """The `topics: [{topic, partitions: [...]}]` shape most APIs share."""
    return TopicPartitions(Struct(topic=Str(), partitions=ListOf(partition), **topic_fields))


_ERROR = opt(Nullable(Str()), None)
_MESSAGE = opt(Nullable(Str()), None)
_NULLABLE_INT64 = opt(Nullable(INT64), None)
_CONFIGS = opt(MapOf(Scalar()), {})
# Where a fetch answer's records lie in a segment file (docs/protocol.md §9: local reads).
LOCAL_RECORDS = Struct(
    path=Str(),
    device=UINT64,
    inode=UINT64,
    position=INT64,
    length=INT64,
    record_count=INT64,
)

# One partition of a fetch answer (the Spark task client decodes it with a typed
# decoder made from this: protocol.schema_types.decoder_struct).
FETCH_PARTITION_ANSWER = Struct(
    partition=INT32,
    error=_ERROR,
    message=_MESSAGE,
    high_watermark=_NULLABLE_INT64,
    log_start_offset=_NULLABLE_INT64,
    records=opt(Nullable(Bin(external=True)), b""),  # a large read: sent from the file
    local=opt(Nullable(LOCAL_RECORDS), None),
    # docs/protocol.md §9 (extension), only for a fetch with isolation_level 1:
    last_stable_offset=_NULLABLE_INT64,
    aborted_transactions=opt(Nullable(ListOf(Struct(producer_id=INT64, first_offset=INT64))), None),
    # ... and without kafka_batches: where the next fetch starts (batches were left out).
    next_offset=_NULLABLE_INT64,
)

_OFFSET_RESULT = Struct(
    partition=INT32,
    error=_ERROR,
    message=_MESSAGE,
    offset=_NULLABLE_INT64,
    timestamp=_NULLABLE_INT64,
)

# "last_stable": the last stable offset (docs/protocol.md §9, transactions);
# "earliest_local": the first offset on local disk (tiered storage).
LIST_OFFSET_SPECS = frozenset(
    {"earliest", "earliest_local", "latest", "max_timestamp", "last_stable"}
)
ACKS = frozenset({0, 1, -1})


_SCHEMAS = (
    ApiSchema(
        "api_versions",
        Struct(),
        Struct(
            server=Str(),
            version=Str(),
            apis=MapOf(ListOf(INT32, length=2)),
            limits=opt(MapOf(INT64), {}),
        ),
    ),
    ApiSchema(
        "create_topic",
        # validate_only: docs/protocol.md (extension; Kafka's CreateTopics needs it)
        Struct(
            topic=Str(),
            partitions=opt(INT32, 1),
            configs=_CONFIGS,
            validate_only=opt(Bool(), False),
        ),
        Struct(),
    ),
    ApiSchema("delete_topic", Struct(topic=Str()), Struct()),
    ApiSchema(
        "metadata",
        Struct(topics=opt(Nullable(ListOf(Str())), None)),
        Struct(
            topics=ListOf(
                Struct(
                    topic=Str(),
                    error=_ERROR,
                    message=_MESSAGE,
                    configs=_CONFIGS,
                    partitions=opt(
                        ListOf(
                            Struct(
                                partition=INT32,
                                log_start_offset=INT64,
                                high_watermark=INT64,
                                log_end_offset=INT64,
                                size_bytes=INT64,
                                segments=INT64,
                                # docs/protocol.md §9 (extension): only while a
                                # transaction is open (else it equals high_watermark).
                                last_stable_offset=_NULLABLE_INT64,
                            )
                        ),
                        [],
                    ),
                )
            )
        ),
    ),
    ApiSchema(
        "describe_configs",
        Struct(topic=Str()),
        Struct(configs=MapOf(Struct(value=Nullable(Scalar()), source=Str()))),
    ),
    ApiSchema(
        "alter_configs",
        Struct(
            topic=Str(),
            set=_CONFIGS,
            delete=opt(ListOf(Str(), max_items=MAX_CONFIG_ENTRIES), []),
            validate_only=opt(Bool(), False),  # docs/protocol.md (extension)
        ),
        Struct(),
    ),
    ApiSchema(
        "produce",
        Struct(
            acks=Int(-1, 1, choices=ACKS),
            timeout_ms=NON_NEGATIVE_INT32,
            topics=_topics(Struct(partition=INT32, records=Bin())),
        ),
        Struct(
            topics=_topics(
                Struct(
                    partition=INT32,
                    error=_ERROR,
                    message=_MESSAGE,
                    base_offset=_NULLABLE_INT64,
                    log_append_time=_NULLABLE_INT64,
                    log_start_offset=_NULLABLE_INT64,
                )
            )
        ),
    ),
    ApiSchema(
        "fetch",
        Struct(
            max_wait_ms=NON_NEGATIVE_INT32,
            min_bytes=NON_NEGATIVE_INT32,
            max_bytes=NON_NEGATIVE_INT32,
            topics=_topics(Struct(partition=INT32, offset=INT64, max_bytes=NON_NEGATIVE_INT32)),
            local_read=opt(Bool(), False),  # docs/protocol.md §9: local reads
            # docs/protocol.md §4 (extension): the client reads Kafka v2 batches too.
            kafka_batches=opt(Bool(), False),
            # docs/protocol.md §9 (extension): 1 = read_committed (transactions).
            isolation_level=opt(Int(0, 1), 0),
        ),
        Struct(topics=_topics(FETCH_PARTITION_ANSWER)),
    ),
    ApiSchema(
        "list_offsets",
        Struct(topics=_topics(Struct(partition=INT32, spec=Str(LIST_OFFSET_SPECS)))),
        Struct(topics=_topics(_OFFSET_RESULT)),
    ),
    ApiSchema(
        "offset_for_time",
        Struct(topics=_topics(Struct(partition=INT32, timestamp=INT64))),
        Struct(topics=_topics(_OFFSET_RESULT)),
    ),
    ApiSchema(
        "delete_records",
        Struct(topics=_topics(Struct(partition=INT32, offset=INT64))),
        Struct(
            topics=_topics(
                Struct(
                    partition=INT32,
                    error=_ERROR,
                    message=_MESSAGE,
                    low_watermark=_NULLABLE_INT64,
                )
            )
        ),
    ),
)


# --- extensions ---------------------------------------------------------------
# Tidelog's own APIs, declared here beside the core ones so that one table holds
# every API whatever was imported first. Their calls and record formats live in
# protocol/offsets_schema.py (docs/compaction.md §9) and protocol/retention_schema.py
# (docs/retention.md).

COMMIT_OFFSETS = "commit_offsets"
FETCH_OFFSETS = "fetch_offsets"
EXPLAIN_RETENTION = "explain_retention"

COMMIT_OFFSETS_SCHEMA = ApiSchema(
    COMMIT_OFFSETS,
    Struct(
        group=Str(),
        topics=TopicPartitions(
            Struct(
                topic=Str(),
                partitions=ListOf(Struct(partition=INT32, offset=INT64, metadata=opt(Str(), ""))),
            )
        ),
        # Fencing (docs/groups.md): absent, a commit from outside group management.
        generation=opt(INT32, -1),
        member_id=opt(Str(), ""),
        group_instance_id=opt(Nullable(Str()), None),
    ),
    Struct(
        topics=ListOf(
            Struct(
                topic=Str(),
                partitions=ListOf(Struct(partition=INT32, error=_ERROR, message=_MESSAGE)),
            )
        )
    ),
)

FETCH_OFFSETS_SCHEMA = ApiSchema(
    FETCH_OFFSETS,
    Struct(
        group=Str(),
        topics=opt(
            Nullable(
                TopicPartitions(Struct(topic=Str(), partitions=opt(Nullable(ListOf(INT32)), None)))
            ),
            None,
        ),
    ),
    Struct(
        topics=ListOf(
            Struct(
                topic=Str(),
                partitions=ListOf(
                    Struct(
                        partition=INT32,
                        offset=INT64,
                        metadata=opt(Str(), ""),
                        error=_ERROR,
                        message=_MESSAGE,
                    )
                ),
            )
        )
    ),
)


VERDICTS = frozenset(
    {
        "delete_start_offset",
        "delete_size",
        "delete_time",
        "keep_active",
        "keep_within_retention",
        "keep_high_watermark",
        "keep_blocked",
        "keep_compact",
        "keep_future_timestamp",
        "keep_not_uploaded",
    }
)
# Where a segment of a tiered topic lives (docs/retention.md, "Tiered topics").
TIERS = frozenset({"local", "remote", "both"})


SEGMENT_VERDICT = Struct(
    base_offset=INT64,
    next_offset=INT64,
    size_bytes=INT64,
    largest_timestamp_ms=INT64,
    timestamp_ms=INT64,
    timestamp_from_mtime=Bool(),
    age_ms=INT64,
    is_active=Bool(),
    verdict=Str(VERDICTS),
    deletable=Bool(),
    reason=Str(),
    # Tiered topics: `verdict`/`reason` judge the local copy (local.retention.*) of a
    # local or both-tier segment, and the remote one of a remote-only segment;
    # `remote_verdict`/`remote_reason` judge the store's copy (retention.*).
    tier=opt(Str(TIERS), "local"),
    remote_verdict=opt(Nullable(Str()), None),  # one of VERDICTS
    remote_reason=opt(Nullable(Str()), None),
)

PARTITION_EXPLANATION = Struct(
    partition=INT32,
    error=opt(Nullable(Str()), None),
    message=opt(Nullable(Str()), None),
    now_ms=_NULLABLE_INT64,
    log_start_offset=_NULLABLE_INT64,
    high_watermark=_NULLABLE_INT64,
    log_end_offset=_NULLABLE_INT64,
    size_bytes=_NULLABLE_INT64,
    retention_ms=_NULLABLE_INT64,
    retention_bytes=_NULLABLE_INT64,
    cleanup_policy=opt(ListOf(Str()), []),
    segment_ms=_NULLABLE_INT64,
    segment_bytes=_NULLABLE_INT64,
    roll_first=opt(Bool(), False),
    deletable_segments=opt(INT64, 0),
    deletable_bytes=opt(INT64, 0),
    remote_storage_enable=opt(Bool(), False),
    local_log_start_offset=_NULLABLE_INT64,
    local_retention_ms=_NULLABLE_INT64,
    local_retention_bytes=_NULLABLE_INT64,
    segments=opt(ListOf(SEGMENT_VERDICT), []),
)

EXPLAIN_RETENTION_SCHEMA = ApiSchema(
    EXPLAIN_RETENTION,
    Struct(topic=Str(), partitions=opt(Nullable(ListOf(INT32)), None)),
    Struct(topic=Str(), partitions=ListOf(PARTITION_EXPLANATION)),
)


# init_producer_id (docs/idempotence.md, docs/protocol.md): an id and epoch for an
# idempotent producer; -1/-1 asks for a fresh id, a previous id and epoch for the next
# epoch. Epochs are int16 on the wire of Kafka, so here too.
INIT_PRODUCER_ID = "init_producer_id"
INT16 = Int(-(2**15), 2**15 - 1, name="int16")

INIT_PRODUCER_ID_SCHEMA = ApiSchema(
    INIT_PRODUCER_ID,
    Struct(
        transactional_id=opt(Nullable(Str()), None),
        producer_id=opt(INT64, -1),
        producer_epoch=opt(INT16, -1),
    ),
    Struct(producer_id=INT64, producer_epoch=INT16),
)


# SASL over msgpack (docs/protocol.md §9 "authenticate", docs/security.md): one
# exchange step per request; PLAIN takes one step, SCRAM two. Call: protocol/auth_schema.py.
AUTHENTICATE = "authenticate"
AUTHENTICATE_SCHEMA = ApiSchema(
    AUTHENTICATE,
    Struct(mechanism=Str(), auth_bytes=Bin()),
    Struct(auth_bytes=Bin(), complete=Bool(), principal=opt(Nullable(Str()), None)),
)


# ACLs (docs/security.md; Kafka's CreateAcls/DescribeAcls/DeleteAcls run on these).
# Enumerations travel as Kafka's names (`Topic`, `Prefixed`, `Read`, `Allow`); in a
# filter nil means any.
CREATE_ACLS, DESCRIBE_ACLS, DELETE_ACLS = "create_acls", "describe_acls", "delete_acls"
_ACL_FIELDS = (
    "principal",
    "host",
    "resource_type",
    "resource_name",
    "pattern_type",
    "operation",
    "permission",
)
ACL_BINDING = Struct(**dict.fromkeys(_ACL_FIELDS, Str()))
ACL_FILTER = Struct(**{name: opt(Nullable(Str()), None) for name in _ACL_FIELDS})
_ACL_RESULT = Struct(error=_ERROR, message=_MESSAGE)
CREATE_ACLS_SCHEMA = ApiSchema(
    CREATE_ACLS,
    Struct(acls=ListOf(ACL_BINDING)),
    Struct(results=ListOf(_ACL_RESULT)),
)
DESCRIBE_ACLS_SCHEMA = ApiSchema(DESCRIBE_ACLS, ACL_FILTER, Struct(acls=ListOf(ACL_BINDING)))
DELETE_ACLS_SCHEMA = ApiSchema(
    DELETE_ACLS,
    Struct(filters=ListOf(ACL_FILTER)),
    Struct(
        results=ListOf(Struct(error=_ERROR, message=_MESSAGE, deleted=opt(ListOf(ACL_BINDING), [])))
    ),
)


# remote_segments (docs/tiered-storage.md, docs/protocol.md §9): which objects of the
# remote tier hold a partition's offsets, so a reader outside the broker (the Spark
# connector's tasks) can GET them from the bucket itself. Call: protocol/remote_schema.py;
# handler: broker/handlers/remote_segments.py.
REMOTE_SEGMENTS = "remote_segments"

REMOTE_SEGMENT = Struct(
    log_key=Str(),
    index_key=opt(Nullable(Str()), None),
    base_offset=INT64,
    end_offset=INT64,  # last offset, inclusive (the manifest's)
    size_bytes=INT64,
    base_timestamp_ms=opt(INT64, -1),
    max_timestamp_ms=opt(INT64, -1),
)

REMOTE_STORE = Struct(
    bucket=Str(),
    prefix=opt(Str(), ""),
    endpoint=opt(Nullable(Str()), None),
    region=opt(Nullable(Str()), None),
    path_style=opt(Bool(), False),
)

REMOTE_SEGMENTS_SCHEMA = ApiSchema(
    REMOTE_SEGMENTS,
    Struct(
        topic=Str(),
        partitions=ListOf(
            Struct(partition=INT32, start_offset=opt(INT64, 0), end_offset=opt(INT64, -1))
        ),
    ),
    Struct(
        topic=Str(),
        store=opt(Nullable(REMOTE_STORE), None),
        partitions=ListOf(
            Struct(
                partition=INT32,
                error=_ERROR,
                message=_MESSAGE,
                log_start_offset=_NULLABLE_INT64,
                local_log_start_offset=_NULLABLE_INT64,
                high_watermark=_NULLABLE_INT64,
                segments=opt(ListOf(REMOTE_SEGMENT), []),
                # The aborted transactions meeting the listed range (Kafka's
                # collectAbortedTransactions): a read_committed reader of the objects
                # leaves their batches out, as it does for a fetch answer's list.
                aborted_transactions=opt(ListOf(Struct(producer_id=INT64, first_offset=INT64)), []),
            )
        ),
    ),
)


# Every API, registered here and only here: the core table of docs/protocol.md §4, then
# the extensions. The broker's dispatch table (broker/dispatch.py) has the same names.
_EXTENSIONS = (
    COMMIT_OFFSETS_SCHEMA,
    FETCH_OFFSETS_SCHEMA,
    EXPLAIN_RETENTION_SCHEMA,
    INIT_PRODUCER_ID_SCHEMA,
    *GROUP_SCHEMAS,
    *TRANSACTION_SCHEMAS,
    AUTHENTICATE_SCHEMA,
    CREATE_ACLS_SCHEMA,
    DESCRIBE_ACLS_SCHEMA,
    DELETE_ACLS_SCHEMA,
    REMOTE_SEGMENTS_SCHEMA,
)

APIS: dict[str, ApiSchema] = {schema.name: schema for schema in (*_SCHEMAS, *_EXTENSIONS)}

# What `api_versions` reports: {name: (min_v, max_v)}.
API_VERSIONS: dict[str, tuple[int, int]] = {
    schema.name: (schema.min_version, schema.max_version) for schema in APIS.values()
}


def _validate(schema: Struct, value: Any, root: str) -> dict[str, Any]:
    try:
        return schema.check(value)
    except SchemaError as exc:
        path = root + "".join(reversed(exc.path))
        raise InvalidRequest(f"{path}: {exc.problem}") from None


def api_schema(api: str, v: int = 1) -> ApiSchema:
    """The schema of `api` at version `v`: InvalidRequest if unknown, UnsupportedVersion."""
    schema = APIS.get(api)
    if schema is None:
        raise InvalidRequest(f"api: unknown api {api!r}")
    if not schema.min_version <= v <= schema.max_version:
        raise UnsupportedVersion(
            f"v: {api} supports versions {schema.min_version}..{schema.max_version}, got {v}"
        )
    return schema


def validate_request_body(api: str, body: Any, v: int = 1) -> dict[str, Any]:
    """A request body checked against its schema, with defaults filled in."""
    return _validate(api_schema(api, v).request, body, "body")


def validate_request(request: Request) -> dict[str, Any]:
    """The broker's entry point: check api, version and body of a parsed envelope."""
    return validate_request_body(request.api, request.body, request.v)


def validate_response_body(api: str, body: Any, v: int = 1) -> dict[str, Any]:
    """A response body checked against its schema (clients use it on every answer)."""
    return _validate(api_schema(api, v).response, body, "body")


def check_topic_name(name: str) -> None:
    """Raise InvalidTopic unless `name` is legal (and so safe as a directory name)."""
    if not 1 <= len(name) <= MAX_TOPIC_NAME_CHARS:
        raise InvalidTopic(
            f"topic name must be 1-{MAX_TOPIC_NAME_CHARS} characters, got {len(name)}"
        )
    if name in (".", "..") or _TOPIC_NAME.fullmatch(name) is None:
        raise InvalidTopic(
            f"illegal topic name {name!r}: use only ASCII letters, digits, '.', '_' and '-',"
            " and not '.' or '..'"
        )


def build_request(
    api: str, body: Mapping[str, Any], request_id: int, *, client: str | None = None
) -> Request:
    """A request envelope with a validated body (clients catch mistakes before sending)."""
    return Request(
        api=api, id=request_id, body=validate_request_body(api, dict(body)), client=client
    )
