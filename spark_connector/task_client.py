"""One Spark task's blocking connection: fetch answers received without copying records.

`protocol.client.Client` decodes every answer with msgpack, which copies a fetch
answer's records (8 MiB by default) into a fresh `bytes`. A task reads hundreds of
megabytes that way, so this connection receives each frame into one buffer it keeps,
and decodes fetch answers with a typed msgspec decoder whose `records` are views of
that buffer. A view is valid until the next `receive`: the reader converts an answer
(Arrow copies the keys and values out) before it receives the next one.

Request numbering, in-order matching and response validation stay
`protocol.connection.ClientConnection`'s; anything the typed decoder does not
recognise is decoded the ordinary way, so errors read exactly as the Client's.
"""

from __future__ import annotations

import contextlib
import socket
from collections import deque
from collections.abc import Mapping
from types import TracebackType
from typing import Any

import msgspec

from protocol import calls
from protocol.calls import Call, OffsetAndTimestamp
from protocol.connection import (
    DEFAULT_MAX_RESPONSE_BYTES,
    BrokerProtocolError,
    ClientConnection,
    Reply,
    parse_address,
)
from protocol.errors import RequestTimedOut
from protocol.framing import LENGTH_SIZE, FrameError, decode_body, frame_length

# The receive buffer's first size; it grows to the largest answer seen (a fetch answer
# is at most fetch.max.bytes and one batch), and stays for the task's next answers.
INITIAL_BUFFER_BYTES = 1024 * 1024
CONNECT_TIMEOUT_MS = 10_000  # as the Client's default

_UNSET = msgspec.UNSET


class _Partition(msgspec.Struct):
    partition: int
    error: str | msgspec.UnsetType | None = _UNSET
    message: str | msgspec.UnsetType | None = _UNSET
    high_watermark: int | msgspec.UnsetType | None = _UNSET
    log_start_offset: int | msgspec.UnsetType | None = _UNSET
    records: memoryview | msgspec.UnsetType | None = _UNSET


class _Topic(msgspec.Struct):
    topic: str
    partitions: list[_Partition]


class _Body(msgspec.Struct):
    topics: list[_Topic]


class _Envelope(msgspec.Struct):
    id: int
    error: str | None = None
    message: str | None = None
    body: _Body | None = None


_FETCH_DECODER = msgspec.msgpack.Decoder(_Envelope)
_PARTITION_FIELDS = _Partition.__struct_fields__


def _fetch_response(body: memoryview) -> dict[str, Any] | None:
    """A fetch answer as the dict `decode_body` would give, records as views; None if
    it is not shaped as one (then it is decoded generically)."""
    try:
        envelope = _FETCH_DECODER.decode(body)
    except msgspec.DecodeError:
        return None
    wire_body = None
    if envelope.body is not None:
        topics = []
        for topic in envelope.body.topics:
            partitions = []
            for part in topic.partitions:
                fields = {name: getattr(part, name) for name in _PARTITION_FIELDS}
                partitions.append({k: v for k, v in fields.items() if v is not _UNSET})
            topics.append({"topic": topic.topic, "partitions": partitions})
        wire_body = {"topics": topics}
    return {
        "id": envelope.id,
        "error": envelope.error,
        "message": envelope.message,
        "body": wire_body,
    }


class TaskClient:
    """A blocking connection to one broker for one task (not thread-safe).

    The subset of `protocol.client.Client` the readers use: `send`, `receive`,
    `call`, `list_offsets`, `close`. After any I/O error or timeout the connection
    is closed (the next `send` reconnects).
    """

    def __init__(
        self,
        bootstrap_server: str,
        *,
        client_id: str | None,
        request_timeout_ms: int,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.address = parse_address(bootstrap_server)
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.max_response_bytes = max_response_bytes
        self._sock: socket.socket | None = None
        self._conn = ClientConnection(client_id=client_id, max_response_bytes=max_response_bytes)
        self._apis: deque[str] = deque()
        self._header = bytearray(LENGTH_SIZE)
        self._buffer = bytearray(INITIAL_BUFFER_BYTES)

    def __enter__(self) -> TaskClient:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _connect(self) -> socket.socket:
        if self._sock is None:
            sock = socket.create_connection(self.address, timeout=CONNECT_TIMEOUT_MS / 1000)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sock = sock
        return self._sock

    def close(self) -> None:
        """Close the connection; pending answers are lost. Safe to call twice."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
        self._conn = ClientConnection(
            client_id=self.client_id, max_response_bytes=self.max_response_bytes
        )
        self._apis.clear()

    @property
    def in_flight(self) -> int:
        return self._conn.in_flight

    def send(self, api: str, body: Mapping[str, Any]) -> int:
        """Send one request without waiting; returns its correlation id."""
        sock = self._connect()
        request_id, frame = self._conn.send_request(api, body)
        self._apis.append(api)
        try:
            sock.settimeout(self.request_timeout_ms / 1000)
            sock.sendall(frame)
        except OSError:
            self.close()
            raise
        return request_id

    def receive(self, *, timeout_ms: int | None = None) -> Reply:
        """The next answer, in request order. A fetch answer's records are a view of
        the receive buffer, valid until the next call."""
        sock = self._sock
        if sock is None:
            raise ConnectionResetError("not connected: nothing to receive")
        wait_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        sock.settimeout(wait_ms / 1000)
        try:
            self._recv_exactly(sock, memoryview(self._header))
            length = frame_length(self._header, self.max_response_bytes)
            if length > len(self._buffer):
                # A new buffer, not a resize: views of the old one may still be alive.
                self._buffer = bytearray(max(length, 2 * len(self._buffer)))
            body = memoryview(self._buffer)[:length]
            self._recv_exactly(sock, body)
            api = self._apis.popleft() if self._apis else ""
            obj = _fetch_response(body) if api == "fetch" else None
            if obj is None:
                obj = decode_body(body)
            return self._conn.handle_message(obj)
        except FrameError as exc:
            self.close()
            raise BrokerProtocolError(f"bad response frame: {exc.message}") from exc
        except TimeoutError as exc:
            self.close()
            raise RequestTimedOut(
                f"no answer from {self.address[0]}:{self.address[1]} within {wait_ms} ms"
            ) from exc
        except BaseException:
            self.close()
            raise

    def _recv_exactly(self, sock: socket.socket, view: memoryview) -> None:
        while view:
            received = sock.recv_into(view)
            if received == 0:
                host, port = self.address
                raise ConnectionResetError(f"broker {host}:{port} closed the connection")
            view = view[received:]

    def call(self, call: Call) -> Any:
        """Run one typed call from `protocol.calls` (nothing else may be in flight)."""
        if self.in_flight:
            raise RuntimeError("receive() the pipelined answers before a blocking request")
        self.send(call.api, call.body)
        reply = self.receive(timeout_ms=self.request_timeout_ms + call.wait_ms)
        return call.extract(reply.result())

    def list_offsets(self, topic: str, partition: int, spec: str) -> OffsetAndTimestamp | None:
        return self.call(calls.list_offsets(topic, partition, spec))
