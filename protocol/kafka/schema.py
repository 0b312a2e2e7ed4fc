"""A declarative Kafka message schema and the one codec that walks it.

Kafka describes every message in JSON (`clients/src/main/resources/common/message/`):
fields with a type, the versions they exist in, the versions they may be null in
and a default. `messages.py` declares the same tables in Python (generated from
those files by `gen_messages.py`), with the same version-range strings ("3+",
"0-4", "none"), so a reader can put the two side by side.

`MessageCodec` compiles one message at one version into a list of steps, once:

- consecutive fixed-width fields become one `struct.Struct` (one C call reads a
  partition's `partition_index, error_code, high_watermark, ...`);
- strings, bytes, records and arrays get a small reader/writer closure each;
- in flexible versions (KIP-482) lengths are compact unsigned varints and every
  struct ends with a tagged-field section: the fields a table declares with a
  `tag` are read from it (unknown tags are skipped) and written when their value
  is not the default, as Kafka writes them (ApiVersions' features); the rest of
  the section is empty.

Messages are plain dicts keyed by the snake_case field names. A decoded message
holds every field the message has in any version: fields the version lacks read
as their default, so a handler need not know which version it was sent. Encoding
takes the fields of its version and ignores the rest.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from protocol.kafka.varint import read_uvarint, uvarint

__all__ = ["Api", "Field", "MessageCodec", "VersionRange", "version_range"]

# Versions run to 32767 (an int16); "N+" means up to that.
MAX_VERSION = 0x7FFF

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
    "uuid": "16s",
}
_ZERO_DEFAULTS: dict[str, Any] = {
    "bool": False,
    "int8": 0,
    "int16": 0,
    "uint16": 0,
    "int32": 0,
    "uint32": 0,
    "int64": 0,
    "float64": 0.0,
    "uuid": bytes(16),
    "string": "",
    "bytes": b"",
    "records": None,
}

# Marks a field declared without a default (None is Kafka's "null" default).
_UNSET: Any = object()

Reader = Callable[[memoryview, int], tuple[Any, int]]
Writer = Callable[[bytearray, Any], None]
# A struct step reads into / writes from the message dict.
ReadStep = Callable[[memoryview, int, dict[str, Any]], int]
WriteStep = Callable[[bytearray, Mapping[str, Any]], None]


@dataclass(frozen=True, slots=True)
class VersionRange:
    """An inclusive range of versions; `empty` for Kafka's "none"."""

    low: int
    high: int

    def __contains__(self, version: object) -> bool:
        return isinstance(version, int) and self.low <= version <= self.high

    @property
    def empty(self) -> bool:
        return self.low > self.high


_RANGE = re.compile(r"^(\d+)(\+|-(\d+))?$")


def version_range(spec: str) -> VersionRange:
    """Parse Kafka's version-range strings: "none", "3", "3+", "0-4"."""
    if spec == "none":
        return VersionRange(1, 0)
    match = _RANGE.match(spec)
    if match is None:
        raise ValueError(f"bad version range {spec!r}")
    low = int(match.group(1))
    if match.group(2) is None:
        return VersionRange(low, low)
    if match.group(2) == "+":
        return VersionRange(low, MAX_VERSION)
    return VersionRange(low, int(match.group(3)))


@dataclass(frozen=True, slots=True)
class Field:
    """One field of a message, as in Kafka's JSON schema.

    `type` is a Kafka type name ("int32", "string", "records", ...), "[]int32"-style
    for an array of a primitive, "[]" for an array of the struct `fields`, "struct"
    for one struct. Without a `default` the field defaults to its type's zero value
    (as in Kafka); `default=None` is Kafka's "null" default.
    """

    name: str
    type: str
    versions: str = "0+"
    fields: tuple[Field, ...] = ()
    nullable: str = "none"
    default: Any = _UNSET
    # A tagged field (KIP-482): its tag in the struct's tagged-field section.
    tag: int | None = None

    def default_value(self) -> Any:
        if self.default is not _UNSET:
            return self.default
        if self.type.startswith("[") or self.type == "struct":
            return [] if self.type.startswith("[") else {}
        return _ZERO_DEFAULTS[self.type]


def F(name: str, type: str, versions: str = "0+", *fields: Field, **kw: Any) -> Field:
    """Terse constructor for the generated tables: nested fields are positional."""
    return Field(name, type, versions, tuple(fields), **kw)


@dataclass(frozen=True, slots=True)
class Api:
    """One Kafka API: its key, the versions we serve, and both message schemas."""

    key: int
    name: str
    versions: str
    flexible: str
    request: tuple[Field, ...]
    response: tuple[Field, ...]
    _codecs: dict[tuple[int, bool], MessageCodec] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def min_version(self) -> int:
        return version_range(self.versions).low

    @property
    def max_version(self) -> int:
        return version_range(self.versions).high

    def __repr__(self) -> str:
        return f"Api({self.name}, key={self.key}, versions={self.versions})"

    def is_flexible(self, version: int) -> bool:
        return version in version_range(self.flexible)

    def codec(self, version: int, response: bool) -> MessageCodec:
        """The compiled codec of one direction at one version (compiled once, then cached)."""
        key = (version, response)
        codec = self._codecs.get(key)
        if codec is None:
            fields = self.response if response else self.request
            codec = MessageCodec(fields, version, self.is_flexible(version))
            self._codecs[key] = codec
        return codec


class MessageCodec:
    """One message at one version: `decode(buf, pos) -> (dict, pos)` and `encode(dict, out)`.

    Truncated input surfaces as struct.error, IndexError or ValueError from the
    steps; the request/response layer turns every one into KafkaCodecError.
    """

    def __init__(self, fields: tuple[Field, ...], version: int, flexible: bool) -> None:
        self.version = version
        self.flexible = flexible
        self._read_steps, self._write_steps, self._absent = _compile(fields, version, flexible)

    def decode(self, buf: memoryview, pos: int = 0) -> tuple[dict[str, Any], int]:
        out: dict[str, Any] = {}
        for step in self._read_steps:
            pos = step(buf, pos, out)
        for name, make in self._absent:
            if name not in out:
                out[name] = make()
        return out, pos

    def encode(self, value: Mapping[str, Any], out: bytearray) -> None:
        for step in self._write_steps:
            step(out, value)


def _compile(
    fields: tuple[Field, ...], version: int, flexible: bool
) -> tuple[list[ReadStep], list[WriteStep], list[tuple[str, Callable[[], Any]]]]:
    """Steps for the fields present at `version`; a factory for each absent one."""
    reads: list[ReadStep] = []
    writes: list[WriteStep] = []
    absent: list[tuple[str, Callable[[], Any]]] = []
    tagged: list[tuple[Field, Reader, Writer]] = []
    run: list[Field] = []
    for f in fields:
        if version not in version_range(f.versions) or (f.tag is not None and not flexible):
            absent.append((f.name, _factory(f)))
            continue
        nullable = version in version_range(f.nullable)
        if f.tag is not None:
            reader, writer = (
                _fixed_codec(f.type)
                if f.type in _FIXED_FORMATS
                else _field_codec(f, version, flexible, nullable)
            )
            tagged.append((f, reader, writer))
            absent.append((f.name, _factory(f)))  # until its tag is read
            continue
        if f.type in _FIXED_FORMATS:
            run.append(f)
            continue
        if run:
            _add_fixed_run(run, reads, writes)
            run = []
        reader, writer = _field_codec(f, version, flexible, nullable)
        reads.append(_read_into(f.name, reader))
        writes.append(_write_from(f.name, f.default_value(), writer))
    if run:
        _add_fixed_run(run, reads, writes)
    if flexible and tagged:
        reads.append(_tagged_reader(tagged))
        writes.append(_tagged_writer(tagged))
    elif flexible:
        reads.append(_skip_tagged_fields)
        writes.append(_write_no_tagged_fields)
    return reads, writes, absent


def _factory(f: Field) -> Callable[[], Any]:
    """A fresh default per decoded message: a shared list or dict could be mutated."""
    value = f.default_value()
    if isinstance(value, (list, dict)):
        return type(value)
    return lambda: value


def _add_fixed_run(run: list[Field], reads: list[ReadStep], writes: list[WriteStep]) -> None:
    fmt = struct.Struct(">" + "".join(_FIXED_FORMATS[f.type] for f in run))
    names = tuple(f.name for f in run)
    defaults = tuple((f.name, f.default_value()) for f in run)
    size = fmt.size
    unpack_from = fmt.unpack_from
    pack = fmt.pack

    def read(buf: memoryview, pos: int, out: dict[str, Any]) -> int:
        out.update(zip(names, unpack_from(buf, pos), strict=True))
        return pos + size

    def write(out: bytearray, value: Mapping[str, Any]) -> None:
        get = value.get
        out += pack(*[get(name, default) for name, default in defaults])

    reads.append(read)
    writes.append(write)


def _read_into(name: str, reader: Reader) -> ReadStep:
    def step(buf: memoryview, pos: int, out: dict[str, Any]) -> int:
        out[name], pos = reader(buf, pos)
        return pos

    return step


def _write_from(name: str, default: Any, writer: Writer) -> WriteStep:
    def step(out: bytearray, value: Mapping[str, Any]) -> None:
        writer(out, value.get(name, default))

    return step


def _field_codec(f: Field, version: int, flexible: bool, nullable: bool) -> tuple[Reader, Writer]:
    what = f"field {f.name!r}"
    if f.type in ("string", "bytes", "records"):
        return _blob_codec(what, f.type == "string", flexible, nullable)
    if not f.type.startswith("["):
        if f.type != "struct":
            raise ValueError(f"unknown Kafka type {f.type!r} of {what}")
        child = MessageCodec(f.fields, version, flexible)
        return child.decode, lambda out, value: child.encode(value, out)
    element = f.type[2:]
    if element:
        elem_field = Field(f.name, element)
        elem_reader, elem_writer = (
            _fixed_codec(element)
            if element in _FIXED_FORMATS
            else _field_codec(elem_field, version, flexible, nullable=False)
        )
    else:
        child = MessageCodec(f.fields, version, flexible)
        elem_reader = child.decode

        def elem_writer(out: bytearray, value: Any) -> None:
            child.encode(value, out)

    return _array_codec(what, elem_reader, elem_writer, flexible, nullable)


def _fixed_codec(type_name: str) -> tuple[Reader, Writer]:
    fmt = struct.Struct(">" + _FIXED_FORMATS[type_name])
    size = fmt.size

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        return fmt.unpack_from(buf, pos)[0], pos + size

    def write(out: bytearray, value: Any) -> None:
        out += fmt.pack(value)

    return read, write


def _length_reader(flexible: bool, wide: bool) -> Callable[[memoryview, int], tuple[int, int]]:
    """A length prefix's reader: compact uvarint (minus one) when flexible, else int16/int32.

    Chosen once per field, so reading a length is one call with no branching.
    """
    if flexible:

        def read_compact(buf: memoryview, pos: int) -> tuple[int, int]:
            raw, pos = read_uvarint(buf, pos)
            return raw - 1, pos

        return read_compact
    fixed = _INT32 if wide else _INT16
    unpack_from = fixed.unpack_from
    size = fixed.size

    def read_fixed(buf: memoryview, pos: int) -> tuple[int, int]:
        return unpack_from(buf, pos)[0], pos + size

    return read_fixed


def _write_length(out: bytearray, length: int, flexible: bool, wide: bool) -> None:
    if flexible:
        out += uvarint(length + 1)
    elif wide:
        out += _INT32.pack(length)
    else:
        out += _INT16.pack(length)


def _blob_codec(what: str, text: bool, flexible: bool, nullable: bool) -> tuple[Reader, Writer]:
    """string (int16 length, UTF-8), bytes and records (int32 length): compact when flexible."""
    wide = not text
    read_length = _length_reader(flexible, wide)

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        length, pos = read_length(buf, pos)
        if length < 0:
            if length == -1 and nullable:
                return None, pos
            raise ValueError(f"{what} has length {length}")
        end = pos + length
        if end > len(buf):
            raise ValueError(f"{what} needs {length} bytes, {len(buf) - pos} left")
        if text:
            return str(buf[pos:end], "utf-8"), end
        return bytes(buf[pos:end]), end

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{what} is not nullable in this version")
            _write_length(out, -1, flexible, wide)
            return
        data = value.encode() if text else value
        _write_length(out, len(data), flexible, wide)
        if text or isinstance(data, (bytes, bytearray, memoryview)):
            out += data
        else:  # sized, not bytes: sent from elsewhere (codec.encode_response_parts)
            out.external(data)  # type: ignore[attr-defined]  # a plain bytearray: unencodable

    return read, write


def _array_codec(
    what: str, elem_reader: Reader, elem_writer: Writer, flexible: bool, nullable: bool
) -> tuple[Reader, Writer]:
    read_length = _length_reader(flexible, wide=True)

    def read(buf: memoryview, pos: int) -> tuple[Any, int]:
        count, pos = read_length(buf, pos)
        if count < 0:
            if count == -1 and nullable:
                return None, pos
            raise ValueError(f"{what} has {count} elements")
        # Every element takes at least one byte: a count beyond the bytes left is a lie,
        # refused before allocating anything for it.
        if count > len(buf) - pos:
            raise ValueError(f"{what} claims {count} elements, {len(buf) - pos} bytes left")
        items: list[Any] = []
        append = items.append
        for _ in range(count):
            item, pos = elem_reader(buf, pos)
            append(item)
        return items, pos

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError(f"{what} is not nullable in this version")
            _write_length(out, -1, flexible, wide=True)
            return
        _write_length(out, len(value), flexible, wide=True)
        for item in value:
            elem_writer(out, item)

    return read, write


def _skip_tagged_fields(buf: memoryview, pos: int, out: dict[str, Any]) -> int:
    """Skip a KIP-482 tagged-field section: count, then (tag, size, bytes) each."""
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
        if pos > len(buf):
            raise ValueError("tagged field runs past the end of the message")
    return pos


def _write_no_tagged_fields(out: bytearray, value: Mapping[str, Any]) -> None:
    out.append(0)


def _tagged_reader(tagged: list[tuple[Field, Reader, Writer]]) -> ReadStep:
    """A tagged-field section: the declared tags read into the message, others skipped."""
    by_tag = {f.tag: (f.name, reader) for f, reader, _ in tagged}

    def read(buf: memoryview, pos: int, out: dict[str, Any]) -> int:
        count, pos = read_uvarint(buf, pos)
        for _ in range(count):
            tag, pos = read_uvarint(buf, pos)
            size, pos = read_uvarint(buf, pos)
            end = pos + size
            if end > len(buf):
                raise ValueError("tagged field runs past the end of the message")
            known = by_tag.get(tag)
            if known is not None:
                name, reader = known
                out[name], used = reader(buf[:end], pos)
                if used != end:
                    raise ValueError(f"tagged field {name!r} has {end - used} bytes left over")
            pos = end
        return pos

    return read


def _tagged_writer(tagged: list[tuple[Field, Reader, Writer]]) -> WriteStep:
    """The section with each declared tag whose value is not its default, by tag."""
    ordered = sorted(((f.tag or 0, f.name, f.default_value(), w) for f, _, w in tagged), key=_first)

    def write(out: bytearray, value: Mapping[str, Any]) -> None:
        present = []
        for tag, name, default, writer in ordered:
            item = value.get(name, default)
            if item != default:
                data = bytearray()
                writer(data, item)
                present.append((tag, data))
        out += uvarint(len(present))
        for tag, data in present:
            out += uvarint(tag)
            out += uvarint(len(data))
            out += data

    return write


def _first(entry: tuple[int, str, Any, Writer]) -> int:
    return entry[0]
