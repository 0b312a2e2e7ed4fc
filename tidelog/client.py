"""The blocking client: one TCP connection to a broker, no trio needed.

Scripts, the CLI, the `Producer`/`Consumer` and Spark executors use it. Every
typed method sends one request and waits for its answer; `send`/`receive`
pipeline many requests on the connection (answers come back in order).
Not thread-safe: use one Client per thread.

After any I/O error or timeout the connection is closed (an answer may still
be on its way, so the stream can no longer be trusted) and the next call
reconnects. A timed-out produce may still have been appended: retrying it
can duplicate records (protocol v1 has no idempotent producer).
"""

from __future__ import annotations

import contextlib
import socket
import ssl
from collections.abc import Iterable, Mapping, Sequence
from types import TracebackType
from typing import Any, TypeVar, cast

from protocol import calls
from protocol.auth_schema import authenticate
from protocol.calls import Call, FetchResult, OffsetAndTimestamp, ProduceResult
from protocol.connection import (
    DEFAULT_CLIENT_ID,
    DEFAULT_MAX_RESPONSE_BYTES,
    BrokerProtocolError,
    ClientConnection,
    Reply,
    parse_address,
)
from protocol.errors import RequestTimedOut
from protocol.framing import LENGTH_SIZE, FrameError, decode_body, frame_length
from tidelog.security import PLAINTEXT, Security

# What a typed call's answer is read into.
T = TypeVar("T")

DEFAULT_BOOTSTRAP_SERVER = "127.0.0.1:9092"

# Kafka's request.timeout.ms default: how long to wait for any one answer.
DEFAULT_REQUEST_TIMEOUT_MS = 30_000

# Connecting to a local broker is instant; a remote one should answer within this.
DEFAULT_CONNECT_TIMEOUT_MS = 10_000

# The receive buffer is reused across responses up to this size; a larger
# response gets a one-off buffer so one big fetch does not pin its memory.
_REUSABLE_BUFFER_BYTES = 16 * 1024 * 1024
_INITIAL_BUFFER_BYTES = 64 * 1024
# Requests are framed into one buffer kept up to this size (a 1 MiB produce and then
# some): memory written on every request stays touched instead of faulting in anew.
_REUSABLE_SEND_BYTES = 4 * 1024 * 1024


def _sendmsg_all(sock: socket.socket, buffers: list[bytes | bytearray | memoryview]) -> None:
    """Send every byte of `buffers`, in order, with as few system calls as the kernel allows."""
    views = [memoryview(buffer) for buffer in buffers]
    while views:
        sent = sock.sendmsg(views)
        done = 0
        while done < len(views) and sent >= len(views[done]):
            sent -= len(views[done])
            done += 1
        del views[:done]
        if views and sent:
            views[0] = views[0][sent:]


class Client:
    """A blocking connection to one broker (`host:port`), opened on first use."""

    def __init__(
        self,
        bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVER,
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        security: Security = PLAINTEXT,
    ) -> None:
        self.address = parse_address(bootstrap_servers)
        self.security = security
        self._ssl_context = security.ssl_context()
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.connect_timeout_ms = connect_timeout_ms
        self.max_response_bytes = max_response_bytes
        self._sock: socket.socket | None = None
        self._conn = ClientConnection(client_id=client_id, max_response_bytes=max_response_bytes)
        self._header = bytearray(LENGTH_SIZE)
        self._buffer = bytearray(_INITIAL_BUFFER_BYTES)
        self._send_buffer = bytearray()

    # -- connection lifecycle -------------------------------------------------

    def connect(self) -> None:
        """Open the connection now (otherwise the first request does)."""
        if self._sock is not None:
            return
        sock = socket.create_connection(self.address, timeout=self.connect_timeout_ms / 1000)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._ssl_context is not None:
            try:
                sock = self._ssl_context.wrap_socket(sock, server_hostname=self.address[0])
            except BaseException:
                sock.close()
                raise
        sock.settimeout(self.request_timeout_ms / 1000)
        self._sock = sock
        exchange = self.security.sasl_client()
        if exchange is not None:
            try:
                token: bytes | None = exchange.start()
                while token is not None:
                    answer, complete, _ = self.call(authenticate(exchange.mechanism, token))
                    token = exchange.respond(answer, complete)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Close the connection; pending answers are lost. Safe to call twice."""
        sock, self._sock = self._sock, None
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes a thread blocked in recv
            sock.close()
        self._conn = ClientConnection(
            client_id=self.client_id, max_response_bytes=self.max_response_bytes
        )

    @property
    def connected(self) -> bool:
        return self._sock is not None

    @property
    def in_flight(self) -> int:
        """Requests sent with `send` whose answer has not been received."""
        return self._conn.in_flight

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- raw requests -----------------------------------------------------------

    def send(self, api: str, body: Mapping[str, Any], *, expect_response: bool = True) -> int:
        """Send one request without waiting; returns its correlation id."""
        self.connect()
        assert self._sock is not None
        request_id, frame = self._conn.send_request(
            api, body, expect_response=expect_response, into=self._send_buffer
        )
        try:
            self._sock.sendall(frame)
        except OSError:
            self.close()
            raise
        finally:
            if len(frame) > _REUSABLE_SEND_BYTES:
                self._send_buffer = bytearray()
        return request_id

    def send_with_tail(
        self,
        api: str,
        body: Mapping[str, Any],
        tail: Sequence[bytes | bytearray | memoryview],
        *,
        expect_response: bool = True,
    ) -> int:
        """`send` for a body whose last value is `TAIL_PLACEHOLDER`, sent as `tail`'s chunks.

        The chunks go to the kernel as they are (`sendmsg`): a producer's batches are
        not copied into a frame first.
        """
        self.connect()
        assert self._sock is not None
        request_id, parts = self._conn.send_request_with_tail(
            api, body, tail, expect_response=expect_response
        )
        try:
            if isinstance(self._sock, ssl.SSLSocket):  # no sendmsg through TLS
                self._sock.sendall(b"".join(parts))
            else:
                _sendmsg_all(self._sock, parts)
        except OSError:
            self.close()
            raise
        return request_id

    def receive(self, *, timeout_ms: int | None = None) -> Reply:
        """The next answer, in request order (a Reply: `.result()` raises its error)."""
        sock = self._sock
        if sock is None:
            raise ConnectionResetError("not connected: nothing to receive")
        wait_ms = self.request_timeout_ms if timeout_ms is None else timeout_ms
        sock.settimeout(wait_ms / 1000)
        try:
            self._recv_exactly(sock, memoryview(self._header))
            length = frame_length(self._header, self.max_response_bytes)
            if length > len(self._buffer):
                buffer = bytearray(max(length, 2 * len(self._buffer)))
                if len(buffer) <= _REUSABLE_BUFFER_BYTES:
                    self._buffer = buffer
            else:
                buffer = self._buffer
            body = memoryview(buffer)[:length]
            self._recv_exactly(sock, body)
            return self._conn.handle_message(self._decode_answer(body))
        except FrameError as exc:
            self.close()
            raise BrokerProtocolError(f"bad response frame: {exc.message}") from exc
        except TimeoutError as exc:
            self.close()
            raise RequestTimedOut(
                f"no answer from {self._address_text()} within {wait_ms} ms"
            ) from exc
        except BaseException:
            self.close()
            raise

    def _decode_answer(self, body: memoryview) -> Any:
        """One response frame's object. It must not keep views of `body`, whose buffer
        the next answer reuses, unless the subclass documents that (Spark tasks do)."""
        return decode_body(body)

    def request(self, api: str, body: Mapping[str, Any], *, wait_ms: int = 0) -> dict[str, Any]:
        """Send one request and return its body (raising a request-level error)."""
        if self.in_flight:
            raise RuntimeError("receive() the pipelined answers before a blocking request")
        self.send(api, body)
        return self.receive(timeout_ms=self.request_timeout_ms + wait_ms).result()

    def call(self, call: Call[T]) -> T:
        """Run one typed call from `protocol.calls`."""
        if not call.expect_response:
            self.send(call.api, call.body, expect_response=False)
            return cast(T, None)  # only a call typed with None in its T expects no answer
        return call.extract(self.request(call.api, call.body, wait_ms=call.wait_ms))

    def _recv_exactly(self, sock: socket.socket, view: memoryview) -> None:
        while view:
            received = sock.recv_into(view)
            if received == 0:
                raise ConnectionResetError(f"broker {self._address_text()} closed the connection")
            view = view[received:]

    def _address_text(self) -> str:
        return f"{self.address[0]}:{self.address[1]}"

    # -- typed API (docs/protocol.md §4) ---------------------------------------------

    def api_versions(self) -> dict[str, Any]:
        return self.call(calls.api_versions())

    def create_topic(
        self, topic: str, partitions: int = 1, configs: Mapping[str, Any] | None = None
    ) -> None:
        self.call(calls.create_topic(topic, partitions, configs))

    def delete_topic(self, topic: str) -> None:
        self.call(calls.delete_topic(topic))

    def metadata(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        """Per-topic entries (a topic's `error` is left in its entry)."""
        return self.call(calls.metadata(topics))

    def describe_configs(self, topic: str) -> dict[str, dict[str, Any]]:
        return self.call(calls.describe_configs(topic))

    def alter_configs(
        self, topic: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] = ()
    ) -> None:
        self.call(calls.alter_configs(topic, set, delete))

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        acks: int = -1,
        timeout_ms: int = calls.DEFAULT_PRODUCE_TIMEOUT_MS,
    ) -> ProduceResult | None:
        """Append encoded batches (`protocol.batch.encode_batch`); None with acks=0."""
        return self.call(calls.produce(topic, partition, records, acks=acks, timeout_ms=timeout_ms))

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = calls.DEFAULT_FETCH_MAX_BYTES,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> FetchResult:
        return self.call(
            calls.fetch(
                topic,
                partition,
                offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
            )
        )

    def list_offsets(self, topic: str, partition: int, spec: str) -> OffsetAndTimestamp | None:
        return self.call(calls.list_offsets(topic, partition, spec))

    def offset_for_time(
        self, topic: str, partition: int, timestamp_ms: int
    ) -> OffsetAndTimestamp | None:
        return self.call(calls.offset_for_time(topic, partition, timestamp_ms))

    def delete_records(self, topic: str, partition: int, offset: int) -> int:
        """Returns the new low watermark (log start offset)."""
        return self.call(calls.delete_records(topic, partition, offset))
