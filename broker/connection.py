"""One client connection: frames in, requests handled in order, responses out in order.

Three tasks joined by bounded channels:

- the reader turns bytes into decoded frames (`protocol.framing.FrameDecoder`
  checks the length header before buffering a body) and stops reading while
  `MAX_INFLIGHT_REQUESTS` are unanswered, so a client that pipelines without
  reading is slowed by TCP, not by our memory;
- the handler runs requests one at a time, in arrival order (appends happen in
  the order they were sent);
- the writer sends responses in that same order (PROTOCOL.md §1). A large fetch
  answer is framed around its records, which go from the segment file to the socket
  with `sendfile` (`broker.fetch_send`).

Memory is bounded broker-wide as well (`broker.membudget`, `queued.max.request.bytes`):
the reader reserves a large request's bytes when its length header arrives and stops
reading while the budget is full; a fetch waits for room; answers are charged until
sent, and whatever a connection still holds is released when it closes. Frames over
`INLINE_DECODE_MAX_BYTES` are decoded and validated in a worker thread, and a long
poll ends when the client is seen gone (`broker.longpoll.peer_gone`).

The only overlap: an `acks: -1` produce is appended in order, then its wait for
the fsync runs beside the following requests (`PendingResponse`), so pipelined
durable produces on one connection share group-commit rounds. Its response is
still written in its place. `produce` with `acks: 0` writes nothing back.

A frame that cannot be read (oversize, not msgpack, not a map) is answered with
`INVALID_REQUEST` after every earlier request has been answered, then the
connection closes. A well-formed map with a bad envelope or body gets a
request-level error and the connection stays open. Nothing a peer sends can
raise out of this module.
"""

from __future__ import annotations

import itertools
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
import trio

from broker.context import BrokerContext, ConnectionState
from broker.fetch_send import FrameParts, memory_bytes, send_parts, spans_of_fetch
from broker.logging import get_logger
from broker.longpoll import peer_gone
from broker.native_codec import PendingResponse, handle_request
from protocol.envelope import UNKNOWN_ID, Response, error_response, msgpack_type_name
from protocol.errors import InvalidRequest, TidelogError, UnknownServerError
from protocol.framing import FrameDecoder, FrameError, encode_frame_parts, encode_frame_to_send

log = get_logger(component="connection")

# Requests read but not yet answered, per connection: bounds its memory at about
# this many frames (Kafka mutes a channel after one; a few keep pipelining fast).
MAX_INFLIGHT_REQUESTS = 16
# Bytes asked of the socket per read: a 1,000-record batch arrives in one or two.
RECV_BYTES = 256 * 1024
# Frames longer than this are decoded (and validated) in a worker thread: decoding
# costs per object, up to ~40 ns per byte of the densest msgpack, so this bounds the
# event-loop time one frame can take to ~45 ms, while a producer's default 1 MiB
# request (records are one bin: ~0.1 ms to decode) stays inline and skips a thread hop.
INLINE_DECODE_MAX_BYTES = 1024 * 1024 + 64 * 1024
# Encoded responses a connection may hold for a client that reads slowly; past it
# the handler pauses (16 queued 55 MiB fetch answers would otherwise be ~1 GiB).
MAX_QUEUED_RESPONSE_BYTES = 64 * 1024 * 1024
# A peer that does not read its responses for this long is dropped (BI-06).
SEND_TIMEOUT_S = 60.0

_conn_ids = itertools.count(1)

# A response frame as the writer sends it: whole (length header included), or in
# parts whose records go from a segment file.
Frame = bytes | FrameParts


@dataclass(frozen=True, slots=True)
class _Frame:
    obj: Any
    arrived: float
    large: bool  # longer than INLINE_DECODE_MAX_BYTES: validated off the loop too
    reserved: int  # bytes it holds in the broker-wide memory budget until handled


@dataclass(frozen=True, slots=True)
class _Fatal:
    """An unreadable frame: answered after everything before it, then the connection closes."""

    error: TidelogError


class _Slot:
    """A response being completed beside later requests; the writer waits for it in order."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.body: Frame | None = None

    async def fill(self, pending: PendingResponse) -> None:
        try:
            self.body = _encode(await pending.resolve())
        finally:
            self.done.set()


# What the writer sends: an encoded response frame (or in parts, when records go
# straight from a segment file), a slot still being filled, a fatal error, or None
# (acks 0: nothing to send).
_Outgoing = Frame | _Slot | _Fatal | None


def _socket_of(stream: trio.abc.Stream) -> socket.socket | None:
    """The TCP socket under `stream`, through TLS and other wrapping layers."""
    while getattr(stream, "socket", None) is None and hasattr(stream, "transport_stream"):
        stream = stream.transport_stream  # type: ignore[attr-defined]
    return getattr(stream, "socket", None)


def _peer_name(stream: trio.abc.Stream) -> str:
    sock = _socket_of(stream)
    if sock is None:
        return "memory"
    try:
        host, port = sock.getpeername()[:2]
    except OSError:
        return "unknown"
    return f"{host}:{port}"


# Linux TCP states (tcp_states.h) in which the peer has sent FIN or the socket is gone.
_TCP_PEER_CLOSED_STATES = frozenset({7, 8, 9})  # CLOSE, CLOSE_WAIT, LAST_ACK


def _peer_gone_check(stream: trio.abc.Stream) -> Callable[[], bool]:
    """Whether the client has closed its side, without reading: the data it pipelined
    may still be queued ahead of its FIN (TCP_INFO's state is CLOSE_WAIT then)."""
    sock = _socket_of(stream)
    tcp_info = getattr(socket, "TCP_INFO", None)
    if sock is None or tcp_info is None:
        return lambda: False

    def gone() -> bool:
        try:
            state = sock.getsockopt(socket.IPPROTO_TCP, tcp_info, 1)[0]
        except OSError:
            return True
        return state in _TCP_PEER_CLOSED_STATES

    return gone


def _hold(ctx: BrokerContext, state: ConnectionState, size: int) -> None:
    ctx.memory.charge(size)
    state.held_bytes += size


def _let_go(ctx: BrokerContext, state: ConnectionState, size: int) -> None:
    ctx.memory.release(size)
    state.held_bytes -= size


def _is_fetch(obj: object) -> bool:
    return isinstance(obj, dict) and obj.get("api") == "fetch"


async def serve_connection(stream: trio.abc.Stream, ctx: BrokerContext) -> None:
    """Serve one client until it disconnects, misbehaves, idles out or the broker drains."""
    state = ConnectionState(conn_id=next(_conn_ids), peer=_peer_name(stream))
    structlog.contextvars.bind_contextvars(conn_id=state.conn_id, peer=state.peer)
    peer_gone.set(_peer_gone_check(stream))  # long polls end when the client leaves
    ctx.connection_opened(state)
    try:
        async with stream:
            # Capacities add up to MAX_INFLIGHT_REQUESTS with the one being handled.
            req_send, req_recv = trio.open_memory_channel[_Frame | _Fatal](
                MAX_INFLIGHT_REQUESTS // 2
            )
            out_send, out_recv = trio.open_memory_channel[_Outgoing](MAX_INFLIGHT_REQUESTS // 2)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_frames, stream, ctx, state, req_send)
                nursery.start_soon(_handle_frames, ctx, state, req_recv, out_send, nursery)
                await _write_responses(stream, ctx, state, out_recv)
                nursery.cancel_scope.cancel()
    # trio wraps whatever a nursery's tasks raise in an exception group.
    except* (trio.BrokenResourceError, trio.ClosedResourceError):
        state.close_reason = "peer_reset"
    except* trio.TooSlowError:
        state.close_reason = "send_timeout"
        log.warning("client_send_timeout", timeout_s=SEND_TIMEOUT_S)
    except* Exception:
        # A bug in this module: this connection ends, the broker and the others go on.
        state.close_reason = "internal_error"
        log.exception("connection_crashed")
    finally:
        ctx.connection_closed(state)


async def _read_frames(
    stream: trio.abc.Stream,
    ctx: BrokerContext,
    state: ConnectionState,
    req_send: trio.MemorySendChannel[_Frame | _Fatal],
) -> None:
    decoder = FrameDecoder(ctx.config.socket_request_max_bytes)
    idle_s = ctx.config.connections_max_idle_ms / 1000
    # socket.request.read.timeout.ms: a request must arrive whole this soon after its
    # first byte (slowloris); the 30 s default lets a 100 MiB frame through at ~3.5 MB/s.
    frame_timeout_s = ctx.config.socket_request_read_timeout_ms / 1000
    frame_started: float | None = None  # when the first byte of a partial frame came
    reserved = 0  # budget bytes taken for the partial frame at the head of the decoder
    async with req_send:
        with state.reader_scope:
            while True:
                try:
                    announced = decoder.announced_bytes()
                except FrameError as exc:
                    ctx.inflight_changed(state, +1)
                    state.close_reason = "bad_frame"
                    await req_send.send(_Fatal(exc))
                    return
                if announced is not None and not reserved:
                    # The body is not buffered until the budget has room: meanwhile this
                    # connection is not read (muted), and TCP pushes back on the client.
                    await ctx.memory.acquire(announced)
                    state.held_bytes += announced
                    reserved = announced
                    if frame_started is not None:
                        frame_started = trio.current_time()  # the wait was ours
                # Idle = nothing in flight and no traffic either way for idle_s.
                deadline = state.last_activity + idle_s
                if frame_started is not None:
                    deadline = min(deadline, frame_started + frame_timeout_s)
                with trio.move_on_at(deadline) as idle:
                    data = await stream.receive_some(RECV_BYTES)
                now = trio.current_time()
                if frame_started is not None and now >= frame_started + frame_timeout_s:
                    state.close_reason = "slow_frame"
                    log.warning(
                        "client_protocol_error",
                        reason=f"request not complete {frame_timeout_s:g}s after its first byte",
                        buffered_bytes=decoder.buffered_bytes,
                    )
                    return
                if idle.cancelled_caught:
                    if state.inflight:
                        state.last_activity = now
                    elif now >= state.last_activity + idle_s:
                        state.close_reason = "idle"
                        log.info(
                            "connection_idle_closed", idle_ms=ctx.config.connections_max_idle_ms
                        )
                        return
                    continue
                state.last_activity = now
                if not data:
                    if decoder.buffered_bytes:
                        state.close_reason = "truncated_frame"
                        log.warning("client_protocol_error", reason="truncated frame at EOF")
                    return
                if frame_started is None:
                    frame_started = now
                completed = 0
                try:
                    decoder.feed(data)
                    while (size := decoder.next_frame_bytes()) is not None:
                        if not reserved:  # arrived whole in one read: already in memory
                            _hold(ctx, state, size)
                            reserved = size
                        large = size > INLINE_DECODE_MAX_BYTES
                        if large:
                            _, obj = await trio.to_thread.run_sync(decoder.next_message)
                        else:
                            _, obj = decoder.next_message()
                        completed += 1
                        ctx.inflight_changed(state, +1)
                        frame, reserved = _Frame(obj, time.perf_counter(), large, reserved), 0
                        await req_send.send(frame)
                    if not decoder.buffered_bytes:
                        frame_started = None
                    elif completed:
                        frame_started = now  # the leftover bytes start the next frame
                except FrameError as exc:
                    ctx.inflight_changed(state, +1)
                    state.close_reason = "bad_frame"
                    await req_send.send(_Fatal(exc))
                    return
        if state.reader_scope.cancelled_caught:
            state.close_reason = "shutdown"  # draining: queued requests are still answered


async def _handle_frames(
    ctx: BrokerContext,
    state: ConnectionState,
    req_recv: trio.MemoryReceiveChannel[_Frame | _Fatal],
    out_send: trio.MemorySendChannel[_Outgoing],
    nursery: trio.Nursery,
) -> None:
    async with req_recv, out_send:
        async for item in req_recv:
            if isinstance(item, _Fatal):
                await out_send.send(item)
                return
            if not isinstance(item.obj, dict):
                # PROTOCOL.md §1: a frame that is not a map is answered, then closed.
                error = InvalidRequest(f"request must be a map, got {msgpack_type_name(item.obj)}")
                state.close_reason = "bad_frame"
                await out_send.send(_Fatal(error))
                return
            if _is_fetch(item.obj):
                await ctx.memory.wait_for_room()  # its answer may be large
            try:
                result = await handle_request(ctx, item.obj, item.arrived, large=item.large)
            finally:
                _let_go(ctx, state, item.reserved)
            if isinstance(result, PendingResponse):
                slot = _Slot()
                nursery.start_soon(slot.fill, result)
                await out_send.send(slot)
                continue
            body = None if result is None else _encode(result)
            if body is not None:
                state.queued_bytes += _memory_bytes(body)
                _hold(ctx, state, _memory_bytes(body))
            await out_send.send(body)
            while state.queued_bytes > MAX_QUEUED_RESPONSE_BYTES:
                state.room = trio.Event()
                await state.room.wait()


async def _write_responses(
    stream: trio.abc.Stream,
    ctx: BrokerContext,
    state: ConnectionState,
    out_recv: trio.MemoryReceiveChannel[_Outgoing],
) -> None:
    async with out_recv:
        async for item in out_recv:
            if isinstance(item, _Fatal):
                log.warning("client_protocol_error", reason=item.error.message)
                ctx.request_finished("invalid_frame", item.error.code, 0.0)
                await _send(stream, _encode(error_response(UNKNOWN_ID, item.error)))
                ctx.inflight_changed(state, -1)
                return
            if isinstance(item, _Slot):
                await item.done.wait()
                body = item.body
            else:
                body = item
                if body is not None:
                    state.queued_bytes -= _memory_bytes(body)
            if body is not None:
                await _send(stream, body)
                if not isinstance(item, _Slot):
                    _let_go(ctx, state, _memory_bytes(body))
                state.room.set()
            state.last_activity = trio.current_time()
            ctx.inflight_changed(state, -1)


def _memory_bytes(body: Frame) -> int:
    return memory_bytes(body) if isinstance(body, list) else len(body)


def _encode(response: Response) -> Frame:
    """A response's frame, in parts when records are sent from their segment file
    (never raises: a bug becomes an error reply)."""
    try:
        spans = spans_of_fetch(response.body) if response.body else []
        if spans:
            return encode_frame_parts(response.to_wire(), spans)
        return encode_frame_to_send(response.to_wire())
    except Exception as exc:  # a handler built an unencodable body: a bug, not the peer's
        log.exception("response_encode_failed")
        failure = UnknownServerError(f"unencodable response: {exc}")
        return encode_frame_to_send(error_response(response.id, failure).to_wire())


async def _send(stream: trio.abc.Stream, frame: Frame) -> None:
    if isinstance(frame, list):
        await send_parts(stream, frame, SEND_TIMEOUT_S)
        return
    with trio.fail_after(SEND_TIMEOUT_S):
        await stream.send_all(frame)
