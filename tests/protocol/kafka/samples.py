"""Sample messages for every schema: deterministic values that exercise each field.

`sample(fields, version)` builds a message holding every field present at
`version` with a non-default value (nulls where `nulls=True` and the field is
nullable then); `project(fields, version, value)` keeps only those fields, so a
decoded message (which also holds the absent fields, as defaults) can be compared.
"""

from __future__ import annotations

import zlib
from typing import Any

from protocol.kafka.schema import Field, version_range

_INT_BITS = {"int8": 8, "int16": 16, "uint16": 16, "int32": 32, "uint32": 32, "int64": 64}


def _number(name: str, bits: int, signed: bool) -> int:
    """A value that depends on the field name, fits the type and is rarely a default."""
    raw = zlib.crc32(name.encode()) % ((1 << (bits - 1)) - 1) + 1  # 1 .. the type's max
    return -raw if signed and raw % 3 == 0 else raw


def _present(field: Field, version: int) -> bool:
    return version in version_range(field.versions)


def _scalar(field: Field, kind: str, depth: int) -> Any:
    name = f"{field.name}{depth}"
    if kind in _INT_BITS:
        return _number(name, _INT_BITS[kind], not kind.startswith("u"))
    if kind == "bool":
        return True
    if kind == "float64":
        return 0.5
    if kind == "uuid":
        return bytes(range(16))
    if kind == "string":
        return f"{field.name}-é{depth}"
    return f"{field.name}:{depth}".encode() + bytes([0, 255])  # bytes, records


def sample(fields: tuple[Field, ...], version: int, *, nulls: bool = False, depth: int = 0) -> dict:
    out: dict = {}
    for field in fields:
        if not _present(field, version):
            continue
        if nulls and version in version_range(field.nullable):
            out[field.name] = None
        elif field.type == "[]":
            out[field.name] = [
                sample(field.fields, version, nulls=nulls, depth=depth + i + 1) for i in range(2)
            ]
        elif field.type == "struct":
            out[field.name] = sample(field.fields, version, nulls=nulls, depth=depth + 1)
        elif field.type.startswith("[]"):
            out[field.name] = [_scalar(field, field.type[2:], depth + i) for i in range(3)]
        else:
            out[field.name] = _scalar(field, field.type, depth)
    return out


def project(fields: tuple[Field, ...], version: int, value: dict) -> dict:
    out: dict = {}
    for field in fields:
        if not _present(field, version):
            continue
        item = value[field.name]
        if field.type == "[]" and item is not None:
            item = [project(field.fields, version, element) for element in item]
        elif field.type == "struct" and item is not None:
            item = project(field.fields, version, item)
        out[field.name] = item
    return out


def values(fields: tuple[Field, ...], version: int, value: dict) -> list:
    """Our message as nested lists of field values in schema order (see kafka_python.values),
    tagged fields left out as kafka_python.values leaves them (their bytes are compared)."""
    out: list = []
    for field in fields:
        if not _present(field, version) or field.tag is not None:
            continue
        item = value[field.name]
        if field.type == "[]" and item is not None:
            item = [values(field.fields, version, element) for element in item]
        elif field.type == "struct" and item is not None:
            item = values(field.fields, version, item)
        out.append(item)
    return out
