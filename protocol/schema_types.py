"""The field types API schemas are built from, and `ApiSchema` (one API's bodies).

Validation is structural: types (a bool is never an int), int32/int64 ranges,
enumerations, list and map sizes. A failure raises `SchemaError` carrying the
path of the offending key; `protocol.schemas` turns it into `InvalidRequest`.
Checking returns a fresh value holding the known keys only (unknown keys are
ignored, docs/protocol.md §2) with defaults filled in; arrays come back as lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import msgspec

from protocol.envelope import msgpack_type_name

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

_MISSING: Any = object()


class SchemaError(Exception):
    """A validation failure on its way up; containers prepend their key to `path`."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.path: list[str] = []


def type_name(value: object) -> str:
    return msgpack_type_name(value)


class Schema:
    """A field type: `check` returns the (normalised) value or raises SchemaError."""

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
            raise SchemaError(f"expected {self.name}, got {type_name(value)}")
        if self.choices is not None and value not in self.choices:
            allowed = ", ".join(str(c) for c in sorted(self.choices))
            raise SchemaError(f"must be one of {allowed}, got {value}")
        if not self.lo <= value <= self.hi:
            raise SchemaError(f"{value} is out of range {self.lo}..{self.hi}")
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
            raise SchemaError(f"expected str, got {type_name(value)}")
        if self.choices is not None and value not in self.choices:
            raise SchemaError(f"must be one of {', '.join(sorted(self.choices))}, got {value!r}")
        return value


class Bin(Schema):
    """Binary data (msgpack bin); memoryviews pass so clients can avoid copies.

    `external`: in an answer, the broker may send these bytes from a segment file
    (a sized `protocol.framing.External`), which the answer's static type says.
    """

    def __init__(self, *, external: bool = False) -> None:
        self.external = external

    def check(self, value: Any) -> Any:
        if not isinstance(value, bytes | bytearray | memoryview):
            raise SchemaError(f"expected bin, got {type_name(value)}")
        return value


class Bool(Schema):
    """A msgpack bool (an int is refused: 1 is not true)."""

    def check(self, value: Any) -> Any:
        if type(value) is not bool:
            raise SchemaError(f"expected bool, got {type_name(value)}")
        return value


class Scalar(Schema):
    """A config value: str, int, float or bool (the config layer parses it)."""

    def check(self, value: Any) -> Any:
        if not isinstance(value, str | int | float):  # bool is an int subclass
            raise SchemaError(f"expected str, int, float or bool, got {type_name(value)}")
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
            raise SchemaError(f"expected array, got {type_name(value)}")
        if self.length is not None and len(value) != self.length:
            raise SchemaError(f"expected {self.length} items, got {len(value)}")
        if len(value) > self.max_items:
            raise SchemaError(f"more than {self.max_items} items")
        check = self.item.check
        out = []
        for index, item in enumerate(value):
            try:
                out.append(check(item))
            except SchemaError as exc:
                exc.path.append(f"[{index}]")
                raise
        return out


class MapOf(Schema):
    """A map from str to `value`, at most `max_items` entries."""

    def __init__(self, value: Schema, *, max_items: int = MAX_CONFIG_ENTRIES) -> None:
        self.value, self.max_items = value, max_items

    def check(self, value: Any) -> Any:
        if not isinstance(value, dict):
            raise SchemaError(f"expected map, got {type_name(value)}")
        if len(value) > self.max_items:
            raise SchemaError(f"more than {self.max_items} entries")
        out = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise SchemaError(f"map keys must be str, got {type_name(key)}")
            try:
                out[key] = self.value.check(item)
            except SchemaError as exc:
                exc.path.append(f"[{key!r}]")
                raise
        return out


@dataclass(frozen=True, slots=True)
class Field:
    """A key of a Struct: its schema and default (`_MISSING` = required)."""

    schema: Schema
    default: Any = _MISSING

    @property
    def required(self) -> bool:
        """Whether a body must carry this key (it has no default)."""
        return self.default is _MISSING


def opt(schema: Schema, default: Any) -> Field:
    """An optional key; mutable defaults are copied per use."""
    return Field(schema, default)


class Struct(Schema):
    """A map with named keys; unknown keys are dropped, defaults filled in."""

    def __init__(self, **fields: Schema | Field) -> None:
        self.fields = {
            name: spec if isinstance(spec, Field) else Field(spec) for name, spec in fields.items()
        }

    def check(self, value: Any) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise SchemaError(f"expected map, got {type_name(value)}")
        out: dict[str, Any] = {}
        for name, spec in self.fields.items():
            item = value.get(name, _MISSING)
            if item is _MISSING:
                if spec.default is _MISSING:
                    exc = SchemaError("missing required key")
                    exc.path.append(f".{name}")
                    raise exc
                default = spec.default
                out[name] = default.copy() if isinstance(default, dict | list) else default
                continue
            try:
                out[name] = spec.schema.check(item)
            except SchemaError as exc:
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
                raise SchemaError(
                    f"{total} partitions in one request, more than {MAX_PARTITIONS_PER_REQUEST}"
                )
        topics = self.topics.check(value)
        seen: set[tuple[str, int]] = set()
        for t in topics:
            for part in t["partitions"] or ():
                key = (t["topic"], part if type(part) is int else part["partition"])
                if key in seen:
                    raise SchemaError(f"partition {key[0]}-{key[1]} listed twice")
                seen.add(key)
        return topics


@dataclass(frozen=True, slots=True)
class ApiSchema:
    """One API: its supported versions and the schemas of its bodies."""

    name: str
    request: Struct
    response: Struct
    min_version: int = 1
    max_version: int = 1


def _python_type(schema: Schema, overrides: dict[str, Any], name: str) -> Any:
    """The Python type msgspec decodes `schema`'s values as (nested maps: plain dicts)."""
    if name in overrides:
        return overrides[name]
    if isinstance(schema, Nullable):
        return _python_type(schema.inner, {}, "") | None
    if isinstance(schema, ListOf):
        return list[_python_type(schema.item, {}, "")]  # type: ignore[misc]
    if isinstance(schema, MapOf):
        return dict[str, _python_type(schema.value, {}, "")]  # type: ignore[misc]
    simple = {Int: int, Str: str, Bin: bytes, Bool: bool, Scalar: str | int | float}
    return simple.get(type(schema), dict[str, Any])


def decoder_struct(
    name: str, struct: Struct, overrides: dict[str, Any] | None = None
) -> type[msgspec.Struct]:
    """A msgspec Struct with `struct`'s keys, for a typed decoder of this schema's values.

    Required keys stay required; an optional key is `msgspec.UNSET` when absent (the
    caller fills the schema's default, or leaves the key out). `overrides` gives a
    key another type (e.g. `memoryview` for a bin the caller keeps as a view). The
    field types follow the schema's shapes; ranges and choices are not re-checked.
    """
    overrides = overrides or {}
    fields: list[tuple[str, Any] | tuple[str, Any, Any]] = []
    for key, spec in struct.fields.items():
        kind = _python_type(spec.schema, overrides, key)
        if spec.default is _MISSING:
            fields.append((key, kind))
        else:
            fields.append((key, kind | msgspec.UnsetType, msgspec.UNSET))
    return msgspec.defstruct(name, fields, kw_only=True)
