"""Request and response envelopes (docs/protocol.md §2).

Every frame carries one envelope: a request names its API, version and
correlation id and holds the API's fields in `body`; a response echoes the id
and carries either a request-level `error` or a `body`. This module checks the
envelope's shape only; `protocol.schemas` checks bodies.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from protocol.errors import InvalidRequest, TidelogError, error_from_wire

# Correlation ids are int64 on the wire (clients count up from 0 and wrap).
ID_MIN = -(2**63)
ID_MAX = 2**63 - 1

# The id a response carries when the request's own id could not be read.
UNKNOWN_ID = -1

# Keep client ids to a sane length: they end up in logs and metric labels.
MAX_CLIENT_ID_CHARS = 255


def _is_int(value: object) -> TypeGuard[int]:
    return type(value) is int


_MSGPACK_TYPES = {
    tuple: "array",
    list: "array",
    dict: "map",
    bytes: "bin",
    bytearray: "bin",
    type(None): "nil",
    str: "str",
    int: "int",
    float: "float",
    bool: "bool",
}


def msgpack_type_name(value: object) -> str:
    """The msgpack name of a decoded value's type, for messages to the peer (who sent
    msgpack, not Python: an array, not a tuple)."""
    return _MSGPACK_TYPES.get(type(value), type(value).__name__)


@dataclass(frozen=True, slots=True)
class Request:
    """One request envelope; `body` is the API's fields, not yet validated."""

    api: str
    id: int
    body: dict[str, Any] = field(default_factory=dict)
    v: int = 1
    client: str | None = None

    def to_wire(self) -> dict[str, Any]:
        """The msgpack map to frame."""
        wire: dict[str, Any] = {"api": self.api, "v": self.v, "id": self.id, "body": self.body}
        if self.client is not None:
            wire["client"] = self.client
        return wire


@dataclass(frozen=True, slots=True)
class Response:
    """One response envelope: `error` (a wire code) xor `body`."""

    id: int
    error: str | None = None
    message: str | None = None
    body: Mapping[str, Any] | None = None

    def to_wire(self) -> dict[str, Any]:
        """The msgpack map to frame."""
        return {"id": self.id, "error": self.error, "message": self.message, "body": self.body}

    def raise_for_error(self) -> Mapping[str, Any]:
        """The body, or the request-level error as its `TidelogError` class."""
        if self.error is not None:
            raise error_from_wire(self.error, self.message)
        assert self.body is not None  # parse_response guarantees it
        return self.body


def ok_response(request_id: int, body: dict[str, Any]) -> Response:
    """A successful response."""
    return Response(id=request_id, body=body)


def error_response(request_id: int, exc: TidelogError) -> Response:
    """A request-level error response for `exc` (its code and message)."""
    return Response(id=request_id, error=exc.code, message=exc.message or None)


def request_id_of(obj: object) -> int:
    """The correlation id to answer `obj` with, or UNKNOWN_ID if it has none usable.

    Lets the broker answer a malformed request with the id the client expects.
    """
    if isinstance(obj, dict):
        value = obj.get("id")
        if _is_int(value) and ID_MIN <= value <= ID_MAX:
            return value
    return UNKNOWN_ID


def _require(obj: dict[str, Any], key: str, kind: type, kind_name: str) -> Any:
    if key not in obj:
        raise InvalidRequest(f"missing required key {key!r}")
    value = obj[key]
    if kind is int:
        if not _is_int(value):
            raise InvalidRequest(f"key {key!r} must be an int, got {msgpack_type_name(value)}")
        if not ID_MIN <= value <= ID_MAX:
            raise InvalidRequest(f"key {key!r} is out of int64 range")
    elif not isinstance(value, kind):
        raise InvalidRequest(f"key {key!r} must be {kind_name}, got {msgpack_type_name(value)}")
    return value


def parse_request(obj: object) -> Request:
    """Check a decoded frame is a request envelope; raise InvalidRequest naming the key.

    Unknown keys are ignored. Whether `api` and `v` are supported is the
    schemas' business (`protocol.schemas.validate_request`).
    """
    if not isinstance(obj, dict):
        raise InvalidRequest(f"request must be a map, got {msgpack_type_name(obj)}")
    api = _require(obj, "api", str, "a str")
    v = _require(obj, "v", int, "an int")
    request_id = _require(obj, "id", int, "an int")
    client = obj.get("client")
    if client is not None:
        if not isinstance(client, str):
            raise InvalidRequest(f"key 'client' must be a str, got {msgpack_type_name(client)}")
        if len(client) > MAX_CLIENT_ID_CHARS:
            raise InvalidRequest(f"key 'client' is longer than {MAX_CLIENT_ID_CHARS} chars")
    body = _require(obj, "body", dict, "a map")
    return Request(api=api, id=request_id, body=body, v=v, client=client)


def parse_response(obj: object) -> Response:
    """Check a decoded frame is a response envelope; raise InvalidRequest naming the key.

    (The client reports a malformed response with the same class the broker
    uses for a malformed request: the peer broke the contract.)
    """
    if not isinstance(obj, dict):
        raise InvalidRequest(f"response must be a map, got {msgpack_type_name(obj)}")
    request_id = _require(obj, "id", int, "an int")
    error = obj.get("error")
    message = obj.get("message")
    body = obj.get("body")
    if error is not None and not isinstance(error, str):
        raise InvalidRequest(f"key 'error' must be a str or nil, got {msgpack_type_name(error)}")
    if message is not None and not isinstance(message, str):
        raise InvalidRequest(
            f"key 'message' must be a str or nil, got {msgpack_type_name(message)}"
        )
    if error is None:
        if not isinstance(body, dict):
            raise InvalidRequest(f"key 'body' must be a map, got {msgpack_type_name(body)}")
    else:
        body = None
    return Response(id=request_id, error=error, message=message, body=body)
