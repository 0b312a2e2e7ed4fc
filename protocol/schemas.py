"""Request and response schemas of every API in PROTOCOL.md §4, with validation.

Each API has a request and a response schema built from a handful of field
types. Validation is structural: types (a bool is never an int), int32/int64
ranges, enumerations (`acks`, `spec`), list and map sizes. Semantic checks
that have their own error code (a legal topic name, a positive partition
count, an offset in range) are left to the broker, which answers them with
that code; `check_topic_name` is here so both sides share the rule.

A failure raises `InvalidRequest` whose message names the offending key by its
full path, e.g. `body.topics[0].partitions[2].offset: expected int64, got bool`.
Validation returns a fresh dict holding the known keys only (unknown keys are
ignored, PROTOCOL.md §2) with defaults filled in; arrays come back as lists.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from protocol.envelope import Request, msgpack_type_name
from protocol.errors import InvalidRequest, InvalidTopic, UnsupportedVersion

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1

# One request may name at most this many topics, partitions or config keys:
# bounds the work (and response size) a single frame can ask for.
MAX_LIST_ITEMS = 100_000

# Config maps are small in practice; a huge one is a mistake or an attack.
MAX_CONFIG_ENTRIES = 1_000

# Partitions one request may name, over all its topics: the broker's work per
# request is per partition, and this bounds it (a Tidelog limit; Kafka has none).
MAX_PARTITIONS_PER_REQUEST = 10_000

# PROTOCOL.md §4: legal topic names are 1-249 chars of [a-zA-Z0-9._-], not "." or "..".
MAX_TOPIC_NAME_CHARS = 249
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]+")

_MISSING: Any = object()


class _Invalid(Exception):
    """A validation failure on its way up; containers prepend their key to `path`."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def _type_name(value: object) -> str:
    return msgpack_type_name(value)


class Schema:
    """A field type: `check` returns the (normalised) value or raises _Invalid."""

    def check(self, value: Any) -> Any:
        raise NotImplementedError


class Int(Schema):
    """An integer in [lo, hi] (an int64 unless narrower); bools are refused."""

    def __init__(
        self,
        lo: int = INT64_MIN,
        hi: int = INT64_MAX,
        *,
        name: str = "int64",
        choices: frozenset[int] | None = None,
    ) -> None:
        self.lo, self.hi, self.name, self.choices = lo, hi, name, choices

    def check(self, value: Any) -> Any:
        if type(value) is not int:
            raise _Invalid(f"expected {self.name}, got {_type_name(value)}")
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(str(c) for c in sorted(self.choices))
            raise _Invalid(f"must be one of {allowed}, got {value}")
        if not self.lo <= value <= self.hi:
            raise _Invalid(f"{value} is out of range {self.lo}..{self.hi}")
        return value


INT32 = Int(INT32_MIN, INT32_MAX, name="int32")
UINT64 = Int(0, 2**64 - 1, name="uint64")
INT64 = Int()
NON_NEGATIVE_INT32 = Int(0, INT32_MAX, name="int32")


class Str(Schema):
    """A str, optionally one of `choices`."""

    def __init__(self, choices: frozenset[str] | None = None) -> None:
        self.choices = choices

    def check(self, value: Any) -> Any:
        if not isinstance(value, str):
            raise _Invalid(f"expected str, got {_type_name(value)}")
        if self.choices is not None and value not in self.choices:
            raise _Invalid(f"must be one of {', '.join(sorted(self.choices))}, got {value!r}")
        return value


class Bin(Schema):
    """Binary data (msgpack bin); memoryviews pass so clients can avoid copies."""

    def check(self, value: Any) -> Any:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise _Invalid(f"expected bin, got {_type_name(value)}")
        return value


class Bool(Schema):
    """A msgpack bool (an int is refused: 1 is not true)."""

    def check(self, value: Any) -> Any:
        if type(value) is not bool:
            raise _Invalid(f"expected bool, got {_type_name(value)}")
        return value


class Scalar(Schema):
    """A config value: str, int, float or bool (the config layer parses it)."""

    def check(self, value: Any) -> Any:
        if not isinstance(value, str | int | float):  # bool is an int subclass
            raise _Invalid(f"expected str, int, float or bool, got {_type_name(value)}")
        return value


class Nullable(Schema):
    """`inner` or nil."""

    def __init__(self, inner: Schema) -> None:
        self.inner = inner

    def check(self, value: Any) -> Any:
        return None if value is None else self.inner.check(value)


class ListOf(Schema):
    """An array of `item`, at most `max_items` long (exactly `length` if given)."""

    def __init__(
        self, item: Schema, *, max_items: int = MAX_LIST_ITEMS, length: int | None = None
    ) -> None:
        self.item, self.max_items, self.length = item, max_items, length

    def check(self, value: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise _Invalid(f"expected array, got {_type_name(value)}")
        if self.length is not None and len(value) != self.length:
            raise _Invalid(f"expected {self.length} items, got {len(value)}")
        if len(value) > self.max_items:
            raise _Invalid(f"more than {self.max_items} items")
        check = self.item.check
        out = []
        for index, item in enumerate(value):
            try:
                out.append(check(item))
            except _Invalid as exc:
                exc.path.append(f"[{index}]")
                raise
        return out


class MapOf(Schema):
    """A map from str to `value`, at most `max_items` entries."""

    def __init__(self, value: Schema, *, max_items: int = MAX_CONFIG_ENTRIES) -> None:
        self.value, self.max_items = value, max_items

    def check(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid(f"expected map, got {_type_name(value)}")
        if len(value) > self.max_items:
            raise _Invalid(f"more than {self.max_items} entries")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise _Invalid(f"map keys must be str, got {_type_name(key)}")
            try:
                out[key] = self.value.check(item)
            except _Invalid as exc:
                exc.path.append(f"[{key!r}]")
                raise
        return out


@dataclass(frozen=True, slots=True)
class Field:
    """A key of a Struct: its schema and default (`_MISSING` = required)."""

    schema: Schema
    default: Any = _MISSING


def opt(schema: Schema, default: Any) -> Field:
    """An optional key; mutable defaults are copied per use."""
    return Field(schema, default)


class Struct(Schema):
    """A map with named keys; unknown keys are dropped, defaults filled in."""

    def __init__(self, **fields: Schema | Field) -> None:
        self.fields = {
            name: spec if isinstance(spec, Field) else Field(spec) for name, spec in fields.items()
        }

    def check(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise _Invalid(f"expected map, got {_type_name(value)}")
        out = {}
        for name, spec in self.fields.items():
            item = value.get(name, _MISSING)
            if item is _MISSING:
                if spec.default is _MISSING:
                    exc = _Invalid("missing required key")
                    exc.path.append(f".{name}")
                    raise exc
                default = spec.default
                out[name] = default.copy() if isinstance(default, dict | list) else default
                continue
            try:
                out[name] = spec.schema.check(item)
            except _Invalid as exc:
                exc.path.append(f".{name}")
                raise
        return out


class TopicPartitions(Schema):
    """`[{topic, partitions: [...]}]`: each (topic, partition) at most once (Kafka answers
    a duplicate with INVALID_REQUEST), and at most MAX_PARTITIONS_PER_REQUEST partitions
    in all, counted before any entry is checked so an oversized list costs nothing.

    `partitions` items are partition numbers or maps with a `partition` key; nil means
    "all" (fetch_offsets).
    """

    def __init__(self, topic: Struct) -> None:
        self.topics = ListOf(topic)

    def check(self, value: Any) -> Any:
        if isinstance(value, list | tuple):
            total = sum(
                len(parts)
                for t in value
                if isinstance(t, dict) and isinstance(parts := t.get("partitions"), list | tuple)
            )
            if total > MAX_PARTITIONS_PER_REQUEST:
                raise _Invalid(
                    f"{total} partitions in one request, more than {MAX_PARTITIONS_PER_REQUEST}"
                )
        topics = self.topics.check(value)
        seen: set[tuple[str, int]] = set()
        for t in topics:
            for part in t["partitions"] or ():
                key = (t["topic"], part if type(part) is int else part["partition"])
                if key in seen:
                    raise _Invalid(f"partition {key[0]}-{key[1]} listed twice")
                seen.add(key)
        return topics


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

_OFFSET_RESULT = Struct(
    partition=INT32,
    error=_ERROR,
    message=_MESSAGE,
    offset=_NULLABLE_INT64,
    timestamp=_NULLABLE_INT64,
)

LIST_OFFSET_SPECS = frozenset({"earliest", "latest", "max_timestamp"})
ACKS = frozenset({0, 1, -1})


@dataclass(frozen=True, slots=True)
class ApiSchema:
    """One API: its supported versions and the schemas of its bodies."""

    name: str
    request: Struct
    response: Struct
    min_version: int = 1
    max_version: int = 1


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
        Struct(topic=Str(), partitions=opt(INT32, 1), configs=_CONFIGS),
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
        ),
        Struct(
            topics=_topics(
                Struct(
                    partition=INT32,
                    error=_ERROR,
                    message=_MESSAGE,
                    high_watermark=_NULLABLE_INT64,
                    log_start_offset=_NULLABLE_INT64,
                    records=opt(Nullable(Bin()), b""),
                    local=opt(Nullable(LOCAL_RECORDS), None),
                )
            )
        ),
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

APIS: dict[str, ApiSchema] = {schema.name: schema for schema in _SCHEMAS}

# What `api_versions` reports: {name: (min_v, max_v)}.
API_VERSIONS: dict[str, tuple[int, int]] = {
    schema.name: (schema.min_version, schema.max_version) for schema in _SCHEMAS
}


def _validate(schema: Struct, value: Any, root: str) -> dict[str, Any]:
    try:
        return schema.check(value)
    except _Invalid as exc:
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
