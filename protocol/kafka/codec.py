"""Kafka requests and responses, sans-I/O: frame bodies in, typed messages out, and back.

Layouts (big-endian), from Kafka's RequestHeader.json and ResponseHeader.json:

    request frame   int32 size | request header | body (the API's request schema)
    header v0       int16 api_key | int16 api_version | int32 correlation_id
                    (ControlledShutdown v0 only)
    header v1       v0 + nullable string client_id (int16 length, -1 = null)
    header v2       v1 + a tagged-field section (flexible request versions, KIP-482)
    response frame  int32 size | response header | body (the API's response schema)
    response v0     int32 correlation_id
    response v1     v0 + a tagged-field section (flexible versions, except ApiVersions,
                    always v0 so a client can read the answer to any version: KIP-511)

Functions here take a frame body (the bytes after `size`) and return bytes with
the size prefix included. Every malformed input becomes `KafkaCodecError`:
INVALID_REQUEST for bytes that do not parse, UNSUPPORTED_VERSION for an API key or
version we do not serve (with the parsed header attached, so the caller can still
answer: `unsupported_version_response`).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from protocol.kafka.errors import KafkaCodecError, KafkaError
from protocol.kafka.messages import ALL_APIS, API_VERSIONS
from protocol.kafka.schema import Api
from protocol.kafka.varint import read_uvarint

__all__ = [
    "APIS_BY_KEY",
    "KafkaRequest",
    "KafkaResponse",
    "RequestHeader",
    "UnsupportedRequest",
    "api_version_ranges",
    "decode_request",
    "decode_request_header",
    "decode_response",
    "encode_request",
    "encode_response",
    "encode_response_parts",
    "request_header_version",
    "unsupported_version_response",
]

APIS_BY_KEY: dict[int, Api] = {api.key: api for api in ALL_APIS}

SIZE = struct.Struct(">i")
_HEADER_FIXED = struct.Struct(">hhi")  # api_key, api_version, correlation_id
_INT16 = struct.Struct(">h")
_CORRELATION = struct.Struct(">i")

# ControlledShutdown (a broker-to-controller API we do not serve): its v0 is the one
# request with header v0, recognised so its header is read right and it is refused.
CONTROLLED_SHUTDOWN_KEY = 7


@dataclass(frozen=True, slots=True)
class RequestHeader:
    """A request header (v1 or v2; the tagged fields of v2 are skipped)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


@dataclass(frozen=True, slots=True)
class KafkaRequest:
    """One decoded request: its header, its API and its body fields (see schema.py)."""

    header: RequestHeader
    api: Api
    body: dict[str, Any]

    @property
    def version(self) -> int:
        return self.header.api_version


@dataclass(frozen=True, slots=True)
class KafkaResponse:
    """One decoded response (what a client sees)."""

    correlation_id: int
    api: Api
    version: int
    body: dict[str, Any]


def _flexible_request(api_key: int, api_version: int) -> bool:
    api = APIS_BY_KEY.get(api_key)
    return api is not None and api.is_flexible(api_version)


def _flexible_response_header(api: Api, version: int) -> bool:
    return api.key != API_VERSIONS.key and api.is_flexible(version)


def request_header_version(api_key: int, api_version: int) -> int:
    """Which request header a request uses (Kafka's `requestHeaderVersion`).

    v0 (no client_id) only for ControlledShutdown v0, v2 for flexible versions,
    v1 otherwise. A newer ApiVersions than ours is flexible (v3+) whatever our
    table says, so its header is read as v2 (KIP-511).
    """
    if api_key == CONTROLLED_SHUTDOWN_KEY and api_version == 0:
        return 0
    if _flexible_request(api_key, api_version) or (
        api_key == API_VERSIONS.key and api_version > API_VERSIONS.max_version
    ):
        return 2
    return 1


def decode_request_header(frame: bytes | bytearray | memoryview) -> tuple[RequestHeader, int]:
    """The header of a request frame body and the position its body starts at.

    An unknown API's header is read as v1: only its first three fields matter
    (to refuse it), and they are the same in every header version.
    """
    buf = memoryview(frame)
    try:
        api_key, api_version, correlation_id = _HEADER_FIXED.unpack_from(buf, 0)
        pos = _HEADER_FIXED.size
        version = request_header_version(api_key, api_version)
        client_id = None
        if version >= 1:
            (length,) = _INT16.unpack_from(buf, pos)
            pos += 2
            if length >= 0:
                if pos + length > len(buf):
                    raise ValueError(f"client_id needs {length} bytes, {len(buf) - pos} left")
                client_id = str(buf[pos : pos + length], "utf-8")
                pos += length
            elif length != -1:
                raise ValueError(f"client_id has length {length}")
        if version >= 2:
            pos = _skip_tagged(buf, pos)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise KafkaCodecError(
            KafkaError.INVALID_REQUEST, f"malformed request header: {exc}"
        ) from exc
    return RequestHeader(api_key, api_version, correlation_id, client_id), pos


def _skip_tagged(buf: memoryview, pos: int) -> int:
    count, pos = read_uvarint(buf, pos)
    for _ in range(count):
        _, pos = read_uvarint(buf, pos)
        size, pos = read_uvarint(buf, pos)
        pos += size
    if pos > len(buf):
        raise ValueError("tagged fields run past the end of the header")
    return pos


class UnsupportedRequest(KafkaCodecError):
    """An API key or version we do not serve; `header` says what was asked."""

    def __init__(self, header: RequestHeader) -> None:
        super().__init__(
            KafkaError.UNSUPPORTED_VERSION,
            f"API key {header.api_key} version {header.api_version} is not supported",
        )
        self.header = header


def decode_request(frame: bytes | bytearray | memoryview) -> KafkaRequest:
    """Decode one request frame body (without its size prefix).

    Raises `UnsupportedRequest` (UNSUPPORTED_VERSION, header attached) for an API
    or version outside our table, KafkaCodecError(INVALID_REQUEST) for bytes that
    do not parse or leave bytes over.
    """
    header, pos = decode_request_header(frame)
    api = APIS_BY_KEY.get(header.api_key)
    if api is None or not api.min_version <= header.api_version <= api.max_version:
        raise UnsupportedRequest(header)
    buf = memoryview(frame)
    try:
        body, end = api.codec(header.api_version, response=False).decode(buf, pos)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise KafkaCodecError(
            KafkaError.INVALID_REQUEST, f"malformed {api.name} v{header.api_version} request: {exc}"
        ) from exc
    if end != len(buf) and not _empty_tag_sections(api, header.api_version, buf[end:]):
        raise KafkaCodecError(
            KafkaError.INVALID_REQUEST,
            f"{api.name} v{header.api_version} request has {len(buf) - end} bytes left over",
        )
    return KafkaRequest(header, api, body)


def _empty_tag_sections(api: Api, version: int, rest: memoryview) -> bool:
    """Whether what follows a flexible request's body is only whole tagged-field
    sections. librdkafka 2.x ends AlterUserScramCredentials with a second empty one,
    and its Metadata v13 with one holding an empty tag 0 (`01 00 00`); Kafka's broker
    ignores what follows a request, so a client it serves works."""
    if not api.is_flexible(version):
        return False
    pos = 0
    try:
        while pos < len(rest):
            pos = _skip_tagged(rest, pos)
    except (ValueError, IndexError):
        return False
    return pos == len(rest)


def encode_request(header: RequestHeader, body: Mapping[str, Any]) -> bytes:
    """A whole request frame (size prefix included), as a client sends it."""
    api = APIS_BY_KEY[header.api_key]
    out = bytearray(4)
    out += _HEADER_FIXED.pack(header.api_key, header.api_version, header.correlation_id)
    version = request_header_version(header.api_key, header.api_version)
    if version >= 1:
        if header.client_id is None:
            out += _INT16.pack(-1)
        else:
            client_id = header.client_id.encode()
            out += _INT16.pack(len(client_id)) + client_id
    if version >= 2:
        out.append(0)
    _encode_body(api, header.api_version, False, body, out)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


def encode_response(api: Api, version: int, correlation_id: int, body: Mapping[str, Any]) -> bytes:
    """A whole response frame (size prefix included) for `api` at `version`."""
    out = bytearray(4)
    out += _CORRELATION.pack(correlation_id)
    if _flexible_response_header(api, version):
        out.append(0)
    _encode_body(api, version, True, body, out)
    SIZE.pack_into(out, 0, len(out) - 4)
    return bytes(out)


class _PartsOut(bytearray):
    """A response being encoded whose sized, non-bytes values (a fetch answer's file
    spans) stay out of it: each leaves a hole at the position it would be written."""

    def __init__(self, size: int) -> None:
        super().__init__(size)
        self.holes: list[tuple[int, Any]] = []
        self.external_bytes = 0

    def external(self, value: Any) -> None:
        self.holes.append((len(self), value))
        self.external_bytes += len(value)


def encode_response_parts(
    api: Api, version: int, correlation_id: int, body: Mapping[str, Any]
) -> bytes | list[Any]:
    """`encode_response`, for a body whose `bytes`/`records` fields may hold sized
    values that are not bytes (a fetch answer's spans of a segment file): then the
    frame in parts to send in order, bytes and those values where they belong (the
    size prefix counts them). Joined with each value's bytes: `encode_response`'s."""
    out = _PartsOut(4)
    out += _CORRELATION.pack(correlation_id)
    if _flexible_response_header(api, version):
        out.append(0)
    _encode_body(api, version, True, body, out)
    SIZE.pack_into(out, 0, len(out) - 4 + out.external_bytes)
    if not out.holes:
        return bytes(out)
    parts: list[Any] = []
    start = 0
    for at, value in out.holes:
        if at > start:
            parts.append(bytes(out[start:at]))
        parts.append(value)
        start = at
    if start < len(out):
        parts.append(bytes(out[start:]))
    return parts


def _encode_body(
    api: Api, version: int, response: bool, body: Mapping[str, Any], out: bytearray
) -> None:
    try:
        api.codec(version, response).encode(body, out)
    except (struct.error, ValueError, TypeError, AttributeError, KeyError) as exc:
        kind = "response" if response else "request"
        raise KafkaCodecError(
            KafkaError.UNKNOWN_SERVER_ERROR, f"cannot encode {api.name} v{version} {kind}: {exc!r}"
        ) from exc


def decode_response(frame: bytes | bytearray | memoryview, api: Api, version: int) -> KafkaResponse:
    """Decode a response frame body (without its size prefix), as a client does."""
    buf = memoryview(frame)
    try:
        (correlation_id,) = _CORRELATION.unpack_from(buf, 0)
        pos = _CORRELATION.size
        if _flexible_response_header(api, version):
            pos = _skip_tagged(buf, pos)
        body, end = api.codec(version, response=True).decode(buf, pos)
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise KafkaCodecError(
            KafkaError.INVALID_REQUEST, f"malformed {api.name} v{version} response: {exc}"
        ) from exc
    if end != len(buf):
        raise KafkaCodecError(
            KafkaError.INVALID_REQUEST,
            f"{api.name} v{version} response has {len(buf) - end} bytes left over",
        )
    return KafkaResponse(correlation_id, api, version, body)


def api_version_ranges(apis: Iterable[Api] = ALL_APIS) -> list[dict[str, Any]]:
    """The `api_keys` entries of an ApiVersions answer for `apis`, by key."""
    return [
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in sorted(apis, key=lambda a: a.key)
    ]


def unsupported_version_response(
    header: RequestHeader, apis: Iterable[Api] = ALL_APIS
) -> bytes | None:
    """The answer to a request we cannot serve, when Kafka's protocol has one.

    ApiVersions at any version gets the v0 layout with UNSUPPORTED_VERSION and our
    ranges (KIP-511): the client learns them and retries at a version we serve.
    Any other API has no version-independent error layout: None, and the caller
    closes the connection (as Kafka does).
    """
    if header.api_key != API_VERSIONS.key:
        return None
    body = {"error_code": KafkaError.UNSUPPORTED_VERSION.code, "api_keys": api_version_ranges(apis)}
    return encode_response(API_VERSIONS, 0, header.correlation_id, body)
