"""A run-time check that a body has the shape of a TypedDict of protocol/api_types.py.

mypy checks what the handlers build; this checks what really travels: a validated
request or a handler's answer against its generated type (required keys present, no
unknown key, and recursively the same for nested maps, lists and leaf types).
"""

from __future__ import annotations

import types
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints, is_typeddict


def problems(value: Any, tp: Any, path: str = "body") -> list[str]:
    """Where `value` departs from the type `tp` (empty: it conforms)."""
    if is_typeddict(tp):
        return _map_problems(value, tp, path)
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        found = [problems(value, option, path) for option in get_args(tp)]
        return [] if [] in found else min(found, key=len)
    if origin is Literal:
        return [] if value in get_args(tp) else [f"{path}: {value!r} not in {get_args(tp)}"]
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: expected a list, got {type(value).__name__}"]
        (item,) = get_args(tp)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: expected a map, got {type(value).__name__}"]
        _, item = get_args(tp)
        return [p for k, v in value.items() for p in problems(v, item, f"{path}[{k!r}]")]
    if tp is type(None):
        return [] if value is None else [f"{path}: expected nil, got {type(value).__name__}"]
    if getattr(tp, "_is_protocol", False):  # protocol.framing.External: anything sized
        return [] if hasattr(value, "__len__") else [f"{path}: {type(value).__name__} unsized"]
    if isinstance(value, tp):
        return []
    return [f"{path}: expected {tp.__name__}, got {type(value).__name__}"]


def _map_problems(value: Any, tp: Any, path: str) -> list[str]:
    if not isinstance(value, dict):
        return [f"{path}: expected a map ({tp.__name__}), got {type(value).__name__}"]
    hints = get_type_hints(tp)
    out = [f"{path}.{key}: missing" for key in sorted(tp.__required_keys__ - value.keys())]
    out += [f"{path}.{key}: not a key of {tp.__name__}" for key in sorted(value.keys() - hints)]
    for key in hints.keys() & value.keys():
        out += problems(value[key], hints[key], f"{path}.{key}")
    return out
