"""The client side of one broker connection, sans-I/O (like h11's Connection).

It numbers requests, frames them, remembers which are waiting for an answer
(answers come back in request order, docs/protocol.md §1) and turns response frames
into `Reply` objects. The blocking `Client` and the trio `AsyncClient` own the
socket and feed this class; neither repeats any protocol logic.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from protocol.envelope import ID_MAX, parse_response
from protocol.errors import InvalidRequest, TidelogError, UnknownServerError, error_from_wire
from protocol.framing import (
    FrameDecoder,
    FrameError,
    encode_frame,
    encode_frame_with_tail,
)
from protocol.schemas import build_request, validate_response_body

# Responses can be larger than requests (a fetch returns at least one whole batch
# even past max_bytes); cap what we accept well above the broker's 100 MiB frames.
DEFAULT_MAX_RESPONSE_BYTES = 256 * 1024 * 1024

DEFAULT_CLIENT_ID = "tidelog-python"


class BrokerProtocolError(UnknownServerError):
    """The broker broke the contract (bad frame, wrong id, malformed body).

    The connection cannot be trusted after this and must be closed.
    """


@dataclass(frozen=True, slots=True)
class Reply:
    """The answer to one request: its validated body, or the request-level error."""

    id: int
    api: str
    body: dict[str, Any] | None
    error: TidelogError | None

    def result(self) -> dict[str, Any]:
        """The body, or raise the request-level error."""
        if self.error is not None:
            raise self.error
        assert self.body is not None
        return self.body


class ClientConnection:
    """Request numbering, framing and in-order matching of replies. Not thread-safe."""

    def __init__(
        self,
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.client_id = client_id
        self.max_response_bytes = max_response_bytes
        self._decoder = FrameDecoder(max_response_bytes)
        self._next_id = 0
        self._pending: deque[tuple[int, str]] = deque()

    @property
    def in_flight(self) -> int:
        """Requests sent that still wait for a reply."""
        return len(self._pending)

    @property
    def next_api(self) -> str | None:
        """The api of the request the next reply answers (None if nothing is pending)."""
        return self._pending[0][1] if self._pending else None

    def send_request(
        self,
        api: str,
        body: Mapping[str, Any],
        *,
        expect_response: bool = True,
        into: bytearray | None = None,
    ) -> tuple[int, bytearray]:
        """Validate and frame one request; returns `(id, bytes to send)`.

        `expect_response=False` is for `produce` with `acks: 0`, which gets no answer.
        `into` is a buffer to frame into (see `encode_frame`). Raises InvalidRequest
        (naming the key) before anything is sent.
        """
        request_id = self._next_id
        self._next_id = 0 if request_id == ID_MAX else request_id + 1
        request = build_request(api, body, request_id, client=self.client_id)
        frame = encode_frame(request.to_wire(), into)
        if expect_response:
            self._pending.append((request_id, api))
        return request_id, frame

    def send_request_with_tail(
        self,
        api: str,
        body: Mapping[str, Any],
        tail: Sequence[bytes | bytearray | memoryview],
        *,
        expect_response: bool = True,
    ) -> tuple[int, list[bytes | bytearray | memoryview]]:
        """`send_request` for a body whose last value (in schema order) is one big `bin`.

        `body` holds `TAIL_PLACEHOLDER` there, and `tail` the chunks that make the
        bin; returns the buffers to send in order (see `encode_frame_with_tail`).
        """
        request_id = self._next_id
        request = build_request(api, body, request_id, client=self.client_id)
        wire = request.to_wire()
        wire["body"] = wire.pop("body")  # the body last, so its last value ends the frame
        if any(not isinstance(chunk, bytes | bytearray | memoryview) for chunk in tail):
            raise InvalidRequest("tail: every chunk must be bytes-like")
        parts = encode_frame_with_tail(wire, tail)
        self._next_id = 0 if request_id == ID_MAX else request_id + 1
        if expect_response:
            self._pending.append((request_id, api))
        return request_id, parts

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Feed bytes read from the socket (`b""` is not needed: the caller sees EOF)."""
        self._decoder.feed(data)

    def next_reply(self) -> Reply | None:
        """The next complete reply from fed data, or None if more bytes are needed."""
        try:
            ready, obj = self._decoder.next_message()
        except FrameError as exc:
            raise BrokerProtocolError(f"bad response frame: {exc.message}") from exc
        return self.handle_message(obj) if ready else None

    def handle_message(self, obj: Any) -> Reply:
        """Match one decoded response frame to the oldest pending request."""
        if not self._pending:
            raise BrokerProtocolError("response received with no request pending")
        expected_id, api = self._pending.popleft()
        try:
            response = parse_response(obj)
        except InvalidRequest as exc:
            raise BrokerProtocolError(f"malformed response: {exc.message}") from exc
        if response.id != expected_id:
            raise BrokerProtocolError(
                f"response id {response.id} does not match request id {expected_id} ({api})"
            )
        if response.error is not None:
            error = error_from_wire(response.error, response.message)
            return Reply(expected_id, api, None, error)
        try:
            body = validate_response_body(api, response.body)
        except InvalidRequest as exc:
            raise BrokerProtocolError(f"malformed {api} response: {exc.message}") from exc
        return Reply(expected_id, api, body, None)


DEFAULT_PORT = 9092


def parse_address(address: str, default_port: int = DEFAULT_PORT) -> tuple[str, int]:
    """`host:port`, `host`, `[v6]:port` -> (host, port); ValueError names the input."""
    text = address.strip()
    host, port_text = text, ""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"bad address {address!r}: missing ']'")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"bad address {address!r}: expected ':' after ']'")
        port_text = rest[1:]
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    if not host:
        raise ValueError(f"bad address {address!r}: empty host (use HOST:PORT)")
    if not port_text:
        if text.endswith(":"):
            raise ValueError(f"bad address {address!r}: empty port")
        return host, default_port
    if not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"bad address {address!r}: port must be 0-65535")
    return host, int(port_text)


def find_partition(body: Mapping[str, Any], topic: str, partition: int) -> dict[str, Any]:
    """One partition's entry of a `topics: [{topic, partitions}]` response.

    Raises its per-partition error as the matching `TidelogError`.
    """
    topic_entry: dict[str, Any]
    entry: dict[str, Any]
    for topic_entry in body["topics"]:
        if topic_entry["topic"] != topic:
            continue
        for entry in topic_entry["partitions"]:
            if entry["partition"] == partition:
                if entry.get("error") is not None:
                    raise error_from_wire(entry["error"], entry.get("message"))
                return entry
    raise BrokerProtocolError(f"response has no entry for {topic}-{partition}")


def one_partition(topic: str, partition: int, **fields: Any) -> list[dict[str, Any]]:
    """The `topics` list of a request about one partition."""
    return [{"topic": topic, "partitions": [{"partition": partition, **fields}]}]
