"""Kafka's side of a connection: frames to `KafkaCall`s, adapters' answers to response frames.

broker/connection.py runs the connection (reading, the memory budget, in-order
responses, timeouts) for both protocols; this is the `WireCodec` it uses once a
connection's first bytes look like Kafka (or on the `--kafka-listen` port):

- frames are cut by `protocol.kafka.KafkaFrameDecoder` (a bad size is refused before
  the body is buffered, and the connection closes, as Kafka's `InvalidReceiveException`);
- each frame is decoded (`protocol.kafka.decode_request`) and handed to the adapter the
  registry (broker.kafka.registry) has for its API key; a `Deferred` answer finishes
  beside later requests and is written in its place, as on the msgpack path;
- ApiVersions is answered here, at the version the client sends (up to v5, what
  Kafka 4.4's Java clients send first): it advertises exactly the registry's keys
  (and its own) with the codec's version ranges and, from v3, the features a
  single-node Kafka 4.4 reports; it refuses what Kafka's broker refuses
  (`api_versions_error`); a version newer than ours gets KIP-511's v0 answer with
  UNSUPPORTED_VERSION so the client retries lower;
- a request we cannot serve (unknown API, unadvertised API, version out of range,
  bytes that do not parse) is answered with its error code where the response has a
  top-level `error_code` at that version, and otherwise closes the connection, as
  Kafka's broker does: there is no layout to answer in. Nothing a peer sends reaches
  another connection.
"""

from __future__ import annotations

import re
import struct
import time
from typing import Any, cast

from broker import offload
from broker.context import BrokerContext, ConnectionState, Deferred
from broker.dispatch import failure
from broker.fetch_send import FrameParts
from broker.handlers.fetch import FETCH_RESPONSE_MAX_BYTES
from broker.kafka.call import KafkaAnswer, KafkaCall
from broker.kafka.core import CLUSTER_ID
from broker.kafka.registry import KAFKA_HANDLERS, SERVED_VERSIONS
from broker.kafka.throttle import cap_fetch, measured, throttled, wait_unmuted
from broker.logging import get_logger, request_fields
from broker.wirecodec import Close, Frame, Outcome
from protocol.errors import TidelogError
from protocol.framing import FrameError
from protocol.kafka.codec import (
    APIS_BY_KEY,
    KafkaRequest,
    RequestHeader,
    UnsupportedRequest,
    decode_request,
    decode_request_header,
    encode_response,
    encode_response_parts,
)
from protocol.kafka.errors import (
    KafkaCodecError,
    KafkaError,
    error_for_code,
    for_tidelog_code,
)
from protocol.kafka.framing import KafkaFrameDecoder
from protocol.kafka.messages import API_VERSIONS, FETCH
from protocol.kafka.schema import Api, version_range
from protocol.kafka.varint import read_uvarint

log = get_logger(component="kafka")

# A request frame starts with its int16 API key: a fetch's first two bytes.
_FETCH_KEY_BYTES = FETCH.key.to_bytes(2, "big")
# Where a request header's client id starts (after api key, version, correlation id),
# and where a Fetch's max_bytes is after it (replica id, max wait, min bytes), in the
# versions with a fixed layout there (flexible ones, v12+, put the header's tagged
# fields before the body; v15+ have no replica id).
_CLIENT_ID_AT = 8
_FETCH_MAX_BYTES_AFTER = 12
_FETCH_FIXED_LAYOUT_MAX_VERSION = 11
# v15+ drop the replica id (KIP-903 moved it to a tagged replica state).
_FETCH_REPLICA_ID_MAX_VERSION = 14
_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
# A Kafka frame's decode price, per byte: the msgpack codec's figure (its densest
# input), which bounds the schema walker too (strings and arrays cost per object,
# a produce's records are one blob until the edge prices them on their own).
FRAME_DECODE_NS_PER_BYTE = 14


def advertised_apis() -> list[Api]:
    """What ApiVersions lists: every API the registry serves, and ApiVersions itself."""
    return [APIS_BY_KEY[key] for key in sorted(SERVED_VERSIONS)]


def advertised_ranges() -> list[dict[str, int]]:
    """ApiVersions' `api_keys`: each served API at the versions its row serves (a table
    may cover more, schemas landing before their handlers: those stay unadvertised)."""
    return [
        {"api_key": key, "min_version": served.low, "max_version": served.high}
        for key, served in sorted(SERVED_VERSIONS.items())
    ]


def served(header: RequestHeader) -> bool:
    """Whether the registry serves this request's API at its version."""
    versions = SERVED_VERSIONS.get(header.api_key)
    return versions is not None and header.api_version in versions


# The registry is fixed at import, so the ranges are too.
_ADVERTISED_RANGES = advertised_ranges()


# The features a single-node Kafka 4.4 broker reports (its ApiVersions v3+ tagged
# fields, what `kafka-features describe` prints): metadata.version from 3.3-IV3 (7)
# to 4.4-IV2 (33), finalized at 4.4-IV2. Tidelog has none of Kafka's other features
# (group, transaction, share, streams versions): they stay at level 0, unlisted, so
# clients keep to the protocols without them.
METADATA_VERSION = "metadata.version"
METADATA_VERSION_RANGE = (7, 33)
METADATA_VERSION_LEVEL = 33
# The finalized features never change: their epoch is fixed.
FINALIZED_FEATURES_EPOCH = 0
# Kafka's rule for v3+'s client_software_name and _version (ApiVersionsRequest.isValid).
SOFTWARE_NAME = re.compile(r"[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?")
# v5+: a client names the cluster and node it believes it reached, or neither.
NO_NODE = -1


def api_versions_answer() -> KafkaAnswer:
    low, high = METADATA_VERSION_RANGE
    level = METADATA_VERSION_LEVEL
    return {
        "error_code": 0,
        "api_keys": _ADVERTISED_RANGES,
        "throttle_time_ms": 0,
        "supported_features": [{"name": METADATA_VERSION, "min_version": low, "max_version": high}],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [
            {"name": METADATA_VERSION, "max_version_level": level, "min_version_level": level}
        ],
    }


def api_versions_error(node_id: int, version: int, body: dict[str, Any]) -> KafkaError | None:
    """What Kafka 4.4's KafkaApis refuses in an ApiVersions request, in its order:
    INVALID_REQUEST for v5's cluster id without a node id (or the reverse) or v3+'s
    software name or version outside Kafka's pattern; REBOOTSTRAP_REQUIRED when v5
    names another cluster or node (the client's metadata is stale)."""
    cluster, node = body["cluster_id"], body["node_id"]
    if version >= 5 and (cluster is None) != (node == NO_NODE):
        return KafkaError.INVALID_REQUEST
    if version >= 3 and not (
        SOFTWARE_NAME.fullmatch(body["client_software_name"])
        and SOFTWARE_NAME.fullmatch(body["client_software_version"])
    ):
        return KafkaError.INVALID_REQUEST
    if version >= 5 and cluster is not None and (cluster != CLUSTER_ID or node != node_id):
        return KafkaError.REBOOTSTRAP_REQUIRED
    return None


def _api_versions(ctx: BrokerContext, request: KafkaRequest) -> KafkaAnswer:
    """The answer at the request's version, or its refusal (no ranges, as Kafka's)."""
    error = api_versions_error(ctx.config.node_id, request.version, request.body)
    if error is not None:
        return {"error_code": error.code, "api_keys": [], "throttle_time_ms": 0}
    return api_versions_answer()


class _KafkaFrames:
    """`KafkaFrameDecoder` behind the connection's `FrameReader` interface: frame bodies
    as bytes, and a bad size as `FrameError` (the connection then closes)."""

    def __init__(self, max_frame_bytes: int) -> None:
        self._decoder = KafkaFrameDecoder(min(max_frame_bytes, 2**31 - 1))

    @property
    def buffered_bytes(self) -> int:
        return self._decoder.buffered_bytes

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        self._decoder.feed(data)

    def announced_bytes(self) -> int | None:
        try:
            return self._decoder.announced_bytes()
        except KafkaCodecError as exc:
            raise FrameError(exc.message) from exc

    def next_frame_bytes(self) -> int | None:
        try:
            return self._decoder.next_frame_bytes()
        except KafkaCodecError as exc:
            raise FrameError(exc.message) from exc

    def next_message(self) -> tuple[bool, Any]:
        frame = self._decoder.next_frame()
        return frame is not None, frame


def _has_error_code(api: Api, version: int) -> bool:
    """Whether `api`'s response has a top-level error_code at `version`."""
    return any(
        f.name == "error_code" and version in version_range(f.versions) for f in api.response
    )


def error_frame(header: RequestHeader, error: KafkaError) -> bytes | None:
    """A response carrying only `error` for a request we cannot serve, or None when
    the API has no top-level error code at that version (or is unknown to the codec)."""
    if header.api_key == API_VERSIONS.key:
        # KIP-511: v0's layout, which a client of any version reads, with our ranges.
        body = {"error_code": error.code, "api_keys": _ADVERTISED_RANGES}
        return encode_response(API_VERSIONS, 0, header.correlation_id, body)
    api = APIS_BY_KEY.get(header.api_key)
    if api is None or not served(header):
        return None
    if not _has_error_code(api, header.api_version):
        return None
    return encode_response(
        api, header.api_version, header.correlation_id, {"error_code": error.code}
    )


def first_error_code_name(body: KafkaAnswer) -> str | None:
    """The first non-zero error code anywhere in a Kafka answer, by name (metrics): depth
    first through its lists of dicts, in field order. A loop, not a call per level and
    an isinstance per field: it runs for every answer (2.4 to 1.1 us for a Produce)."""
    pending = [body]
    while pending:
        node = pending.pop()
        code = node.get("error_code")
        if code:
            return error_for_code(code).name
        for value in reversed(node.values()):
            if value.__class__ is list:
                for item in reversed(value):
                    if item.__class__ is dict:
                        pending.append(item)
    return None


def _finished(ctx: BrokerContext, api: str, error: str | None, arrived: float) -> None:
    ctx.request_finished(api, error, time.perf_counter() - arrived, protocol="kafka")


def _encode(
    ctx: BrokerContext, request: KafkaRequest, answer: KafkaAnswer, arrived: float
) -> Frame:
    header = request.header
    try:
        frame: Frame
        if request.api is FETCH:  # records stored as Kafka batches go out by sendfile
            parts = encode_response_parts(
                request.api, header.api_version, header.correlation_id, answer
            )
            frame = parts if isinstance(parts, bytes) else cast("FrameParts", parts)
        else:
            frame = encode_response(request.api, header.api_version, header.correlation_id, answer)
        error = first_error_code_name(answer)
    except KafkaCodecError as exc:  # an adapter built an unencodable answer: a bug
        log.exception("kafka_response_encode_failed", api=request.api.name)
        fallback = error_frame(header, for_tidelog_code("UNKNOWN_SERVER_ERROR"))
        if fallback is None:
            raise
        frame, error = fallback, exc.error.name
    _finished(ctx, request.api.name, error, arrived)
    return frame


class _KafkaPending:
    """A Kafka answer finished beside later requests (Produce acks=all's fsync wait)."""

    def __init__(
        self,
        ctx: BrokerContext,
        request: KafkaRequest,
        deferred: Deferred[KafkaAnswer],
        arrived: float,
    ) -> None:
        self._ctx, self._request, self._deferred, self._arrived = ctx, request, deferred, arrived

    async def resolve(self) -> Frame:
        try:
            answer = await self._deferred.finish()
        except Exception as exc:
            frame = _failure_frame(self._ctx, self._request, exc, self._arrived)
            if frame is None:
                raise  # the connection ends (logged there)
            return frame
        return _encode(self._ctx, self._request, answer, self._arrived)


def _failure_frame(
    ctx: BrokerContext, request: KafkaRequest, exc: Exception, arrived: float
) -> bytes | None:
    """The answer to an adapter that raised: its code where the API has a place for it."""
    error = for_tidelog_code(failure(request.api.name, exc).code)
    _finished(ctx, request.api.name, error.name, arrived)
    return error_frame(request.header, error)


class KafkaCodec:
    """Kafka's wire protocol in front of the registry's adapters (broker.kafka.registry)."""

    name = "kafka"

    def frame_reader(self, max_frame_bytes: int) -> _KafkaFrames:
        return _KafkaFrames(max_frame_bytes)

    def frame_cost_ns(self, size: int) -> int:
        """Priced like a msgpack frame of the same size: Kafka's schema walker is not
        dearer per byte, and a produce's records stay one blob until the edge."""
        return size * FRAME_DECODE_NS_PER_BYTE

    def answer_room(self, message: bytes) -> int:
        """A Fetch's `max_bytes`, read where its layout puts it: after the header's client
        id (and, v12+, its tagged fields), the replica id (up to v14), max wait and min
        bytes; the largest answer when it cannot be read there (the decode then refuses
        or serves it)."""
        if message[:2] != _FETCH_KEY_BYTES:
            return 0
        try:
            version = _INT16.unpack_from(message, 2)[0]
            client_id = _INT16.unpack_from(message, _CLIENT_ID_AT)[0]
            at = _CLIENT_ID_AT + 2 + max(client_id, 0)
            if version > _FETCH_FIXED_LAYOUT_MAX_VERSION:
                at = _skip_tags(message, at)
            after = _FETCH_MAX_BYTES_AFTER
            if version > _FETCH_REPLICA_ID_MAX_VERSION:
                after -= _INT32.size
            wanted: int = _INT32.unpack_from(message, at + after)[0]
        except (struct.error, ValueError, IndexError):
            return FETCH_RESPONSE_MAX_BYTES
        if wanted < 1:
            return FETCH_RESPONSE_MAX_BYTES
        return min(wanted, FETCH_RESPONSE_MAX_BYTES)

    async def handle(
        self,
        ctx: BrokerContext,
        state: ConnectionState,
        message: Any,
        arrived: float,
        *,
        large: bool,
    ) -> Outcome:
        await wait_unmuted(state)  # a throttled client's next request waits (KIP-219)
        try:
            if large:
                request = await offload.to_worker(decode_request, message)
            else:
                request = decode_request(message)
        except UnsupportedRequest as exc:
            return self._refuse_request(ctx, exc.header, exc, arrived)
        except KafkaCodecError as exc:
            return self._refuse_request(ctx, _header_of(message), exc, arrived)
        api = request.api
        if api.key == API_VERSIONS.key:
            return _encode(ctx, request, _api_versions(ctx, request), arrived)
        handler = KAFKA_HANDLERS.get(api.key)
        if handler is None or not served(request.header):
            # the codec knows it, no family module serves it (or this version of it) yet
            return self._refuse_request(
                ctx, request.header, UnsupportedRequest(request.header), arrived
            )
        header = request.header
        with request_fields(api=api.name, request_id=header.correlation_id, protocol="kafka"):
            cap_fetch(ctx.quotas, request)
            measure = measured(ctx, state, request, len(message))
            try:
                result = throttled(measure, await handler(KafkaCall(ctx, state, request)))
            except Exception as exc:
                frame = _failure_frame(ctx, request, exc, arrived)
                if frame is None:
                    return Close(
                        "internal_error", f"{api.name} failed: {exc}", "UNKNOWN_SERVER_ERROR", None
                    )
                return frame
        if isinstance(result, Deferred):
            return _KafkaPending(ctx, request, result, arrived)
        if result is None:  # Produce with acks=0: Kafka sends nothing
            _finished(ctx, api.name, None, arrived)
            return None
        return _encode(ctx, request, result, arrived)

    def _refuse_request(
        self,
        ctx: BrokerContext,
        header: RequestHeader | None,
        exc: KafkaCodecError,
        arrived: float,
    ) -> Outcome:
        api = APIS_BY_KEY.get(header.api_key) if header is not None else None
        name = api.name if api is not None else "unknown"
        log.info("kafka_request_refused", api=name, error=exc.error.name, reason=exc.message)
        frame = error_frame(header, exc.error) if header is not None else None
        if frame is None:
            return Close("bad_request", exc.message, exc.error.name, None)
        _finished(ctx, name, exc.error.name, arrived)
        return frame

    def refuse(self, error: TidelogError) -> Frame | None:
        return None  # a bad frame size: Kafka closes without answering


def _skip_tags(message: bytes, at: int) -> int:
    """Past a tagged-field section starting at `at` (a request header v2's)."""
    count, at = read_uvarint(message, at)
    for _ in range(count):
        _, at = read_uvarint(message, at)
        size, at = read_uvarint(message, at)
        at += size
    return at


def _header_of(message: bytes) -> RequestHeader | None:
    try:
        return decode_request_header(message)[0]
    except KafkaCodecError:
        return None


KAFKA = KafkaCodec()
