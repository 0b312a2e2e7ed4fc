"""The trio client: one connection, many concurrent callers, answers in order.

    async with open_client("127.0.0.1:9092") as client:
        await client.create_topic("events")

Any number of tasks may call the same `AsyncClient` at once: requests are
written whole, one at a time, and a reader task hands each answer to the
caller waiting for it (docs/protocol.md §1 keeps answers in request order), so
concurrent calls pipeline on one socket. The same sans-I/O `ClientConnection`
as the blocking `Client` does the protocol work.
"""

from __future__ import annotations

from collections import deque
from collections.abc import AsyncIterator, Iterable, Mapping
from contextlib import asynccontextmanager
from typing import Any, TypeVar, cast

import trio

from protocol import calls
from protocol.auth_schema import authenticate
from protocol.calls import Call, FetchResult, OffsetAndTimestamp, ProduceResult
from protocol.connection import (
    DEFAULT_CLIENT_ID,
    DEFAULT_MAX_RESPONSE_BYTES,
    ClientConnection,
    Reply,
    parse_address,
)
from protocol.errors import RequestTimedOut
from tidelog.client import (
    DEFAULT_BOOTSTRAP_SERVER,
    DEFAULT_CONNECT_TIMEOUT_MS,
    DEFAULT_REQUEST_TIMEOUT_MS,
)
from tidelog.security import PLAINTEXT, Security

# What a typed call's answer is read into.
T = TypeVar("T")

# Read in chunks of this size: large enough for a fetch answer in a few calls.
_RECEIVE_BYTES = 256 * 1024


class _Slot:
    """Where the reader task leaves one answer for its caller."""

    __slots__ = ("done", "error", "reply")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.reply: Reply | None = None
        self.error: BaseException | None = None


class AsyncClient:
    """A trio connection to one broker; build it with `open_client`."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        *,
        client_id: str | None = DEFAULT_CLIENT_ID,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ) -> None:
        self.stream = stream
        self.request_timeout_ms = request_timeout_ms
        self._conn = ClientConnection(client_id=client_id, max_response_bytes=max_response_bytes)
        self._send_lock = trio.Lock()
        self._slots: deque[_Slot] = deque()
        self._broken: BaseException | None = None

    async def run_reader(self) -> None:
        """Hand answers to waiting callers until the stream ends (run it in a nursery)."""
        try:
            while True:
                data = await self.stream.receive_some(_RECEIVE_BYTES)
                if not data:
                    raise ConnectionResetError("broker closed the connection")
                self._conn.receive_data(data)
                while (reply := self._conn.next_reply()) is not None:
                    slot = self._slots.popleft()
                    slot.reply = reply
                    slot.done.set()
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            self._fail(ConnectionResetError(f"connection lost: {exc}"))
        except Exception as exc:  # a protocol violation: fail every caller with it
            self._fail(exc)

    def _fail(self, exc: BaseException) -> None:
        self._broken = exc
        while self._slots:
            slot = self._slots.popleft()
            slot.error = exc
            slot.done.set()

    async def aclose(self) -> None:
        """Close the stream; callers still waiting get ConnectionResetError."""
        self._fail(ConnectionResetError("client closed"))
        await self.stream.aclose()

    async def send(
        self, api: str, body: Mapping[str, Any], *, expect_response: bool = True
    ) -> _Slot | None:
        """Write one request whole (never cut off by cancellation)."""
        if self._broken is not None:
            raise ConnectionResetError(f"connection unusable: {self._broken}")
        async with self._send_lock:
            _, frame = self._conn.send_request(api, body, expect_response=expect_response)
            slot = None
            if expect_response:
                slot = _Slot()
                self._slots.append(slot)
            # A frame cut short would desynchronise the stream for everyone.
            with trio.CancelScope(shield=True):
                try:
                    await self.stream.send_all(frame)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    self._fail(ConnectionResetError(f"connection lost: {exc}"))
                    raise ConnectionResetError(f"connection lost: {exc}") from exc
            return slot

    async def request(
        self, api: str, body: Mapping[str, Any], *, wait_ms: int = 0
    ) -> dict[str, Any]:
        """Send one request and return its body (raising a request-level error)."""
        slot = await self.send(api, body)
        assert slot is not None
        timeout_s = (self.request_timeout_ms + wait_ms) / 1000
        with trio.move_on_after(timeout_s):
            await slot.done.wait()
        if not slot.done.is_set():
            # The answer may still come; the reader will discard it into this slot.
            raise RequestTimedOut(f"no answer to {api} within {timeout_s * 1000:.0f} ms")
        if slot.error is not None:
            raise slot.error
        assert slot.reply is not None
        return slot.reply.result()

    async def call(self, call: Call[T]) -> T:
        """Run one typed call from `protocol.calls`."""
        if not call.expect_response:
            await self.send(call.api, call.body, expect_response=False)
            return cast(T, None)  # only a call typed with None in its T expects no answer
        return call.extract(await self.request(call.api, call.body, wait_ms=call.wait_ms))

    # -- typed API (docs/protocol.md §4), as on the blocking Client ------------------

    async def api_versions(self) -> dict[str, Any]:
        return await self.call(calls.api_versions())

    async def create_topic(
        self, topic: str, partitions: int = 1, configs: Mapping[str, Any] | None = None
    ) -> None:
        await self.call(calls.create_topic(topic, partitions, configs))

    async def delete_topic(self, topic: str) -> None:
        await self.call(calls.delete_topic(topic))

    async def metadata(self, topics: Iterable[str] | None = None) -> list[dict[str, Any]]:
        return await self.call(calls.metadata(topics))

    async def describe_configs(self, topic: str) -> dict[str, dict[str, Any]]:
        return await self.call(calls.describe_configs(topic))

    async def alter_configs(
        self, topic: str, set: Mapping[str, Any] | None = None, delete: Iterable[str] = ()
    ) -> None:
        await self.call(calls.alter_configs(topic, set, delete))

    async def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        acks: int = -1,
        timeout_ms: int = calls.DEFAULT_PRODUCE_TIMEOUT_MS,
    ) -> ProduceResult | None:
        return await self.call(
            calls.produce(topic, partition, records, acks=acks, timeout_ms=timeout_ms)
        )

    async def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        *,
        max_bytes: int = calls.DEFAULT_FETCH_MAX_BYTES,
        max_wait_ms: int = 0,
        min_bytes: int = 1,
    ) -> FetchResult:
        return await self.call(
            calls.fetch(
                topic,
                partition,
                offset,
                max_bytes=max_bytes,
                max_wait_ms=max_wait_ms,
                min_bytes=min_bytes,
            )
        )

    async def list_offsets(
        self, topic: str, partition: int, spec: str
    ) -> OffsetAndTimestamp | None:
        return await self.call(calls.list_offsets(topic, partition, spec))

    async def offset_for_time(
        self, topic: str, partition: int, timestamp_ms: int
    ) -> OffsetAndTimestamp | None:
        return await self.call(calls.offset_for_time(topic, partition, timestamp_ms))

    async def delete_records(self, topic: str, partition: int, offset: int) -> int:
        return await self.call(calls.delete_records(topic, partition, offset))


@asynccontextmanager
async def open_client(
    bootstrap_servers: str = DEFAULT_BOOTSTRAP_SERVER,
    *,
    client_id: str | None = DEFAULT_CLIENT_ID,
    request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
    connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    security: Security = PLAINTEXT,
) -> AsyncIterator[AsyncClient]:
    """Connect (TLS and SASL as `security` says), run the reader task, close on exit."""
    host, port = parse_address(bootstrap_servers)
    context = security.ssl_context()
    stream: trio.abc.Stream
    tls: trio.SSLStream[trio.SocketStream] | None = None
    with trio.fail_after(connect_timeout_ms / 1000):
        stream = await trio.open_tcp_stream(host, port)
    if context is not None:
        stream = tls = trio.SSLStream(stream, context, server_hostname=host)
    try:
        if tls is not None:
            with trio.fail_after(connect_timeout_ms / 1000):
                await tls.do_handshake()
        with trio.fail_after(request_timeout_ms / 1000):
            await _authenticate(stream, security)
    except BaseException:
        await trio.aclose_forcefully(stream)
        raise
    async with stream_client(
        stream,
        client_id=client_id,
        request_timeout_ms=request_timeout_ms,
        max_response_bytes=max_response_bytes,
    ) as client:
        yield client


async def _authenticate(stream: trio.abc.Stream, security: Security) -> None:
    """The SASL exchange, before the reader task starts (so a failure raises plainly)."""
    exchange = security.sasl_client()
    if exchange is None:
        return
    conn = ClientConnection(client_id=None)
    token: bytes | None = exchange.start()
    while token is not None:
        call = authenticate(exchange.mechanism, token)
        _, frame = conn.send_request(call.api, call.body)
        await stream.send_all(frame)
        reply = conn.next_reply()
        while reply is None:
            data = await stream.receive_some(_RECEIVE_BYTES)
            if not data:
                raise ConnectionResetError("the broker closed the connection during SASL")
            conn.receive_data(data)
            reply = conn.next_reply()
        answer, complete, _ = call.extract(reply.result())
        token = exchange.respond(answer, complete)


@asynccontextmanager
async def stream_client(stream: trio.abc.Stream, **options: Any) -> AsyncIterator[AsyncClient]:
    """An AsyncClient over any trio stream (tests use an in-memory pair)."""
    client = AsyncClient(stream, **options)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(client.run_reader)
        try:
            yield client
        finally:
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await client.aclose()
