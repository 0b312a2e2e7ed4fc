"""One client connection: frames in, requests handled in order, responses out in order.

One port, several protocols: a connection's first bytes say which, and the codec
registry (broker/codecs.py) hands out the codec that speaks it (Kafka's, or the
msgpack one, which also answers what is neither). This module names no protocol:
everything here is the same for every codec (`broker.wirecodec`).

Three tasks joined by bounded channels:

- the reader turns bytes into decoded frames (`protocol.framing.FrameDecoder`
  checks the length header before buffering a body) and stops reading while
  `MAX_INFLIGHT_REQUESTS` are unanswered, so a client that pipelines without
  reading is slowed by TCP, not by our memory;
- the handler runs requests one at a time, in arrival order (appends happen in
  the order they were sent);
- the writer sends responses in that same order (docs/protocol.md §1). A large fetch
  answer is framed around its records, which go from the segment file to the socket
  with `sendfile` (`broker.fetch_send`).

Memory is bounded broker-wide as well (`broker.membudget`, `queued.max.request.bytes`):
the reader reserves a large request's bytes when its length header arrives and stops
reading while the budget is full (before a SASL login, a frame announced over
`sasl.server.max.receive.size` closes the connection instead); a fetch runs within a
grant reserved for its answer, bounded by the connection's share less what it holds;
answers are charged until sent, and whatever a connection still holds is released
when it closes. Frames priced
over the event-loop budget (the codec's `frame_cost_ns`, broker/offload.py) are
decoded and validated in a worker thread, and a long poll ends when the client is
seen gone (`broker.longpoll.peer_gone`).

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
from typing import Any, NamedTuple, cast

import structlog
import trio

from broker import offload
from broker.codecs import codec_for, sniffed
from broker.context import BrokerContext, ConnectionState
from broker.fetch_send import memory_bytes, send_parts
from broker.logging import get_logger
from broker.longpoll import peer_gone
from broker.security.session import current_session
from broker.wirecodec import Close, Frame, FrameReader, PendingFrame, WireCodec
from protocol.framing import FrameError, FrameTooLarge

log = get_logger(component="connection")

# Requests read but not yet answered, per connection: bounds its memory at about
# this many frames (Kafka mutes a channel after one; a few keep pipelining fast).
MAX_INFLIGHT_REQUESTS = 16
# Bytes asked of the socket per read: a 1,000-record batch arrives in one or two.
RECV_BYTES = 256 * 1024
# Encoded responses a connection may hold for a client that reads slowly; past it
# the handler pauses (16 queued 55 MiB fetch answers would otherwise be ~1 GiB).
MAX_QUEUED_RESPONSE_BYTES = 64 * 1024 * 1024
# A peer that does not read its responses for this long is dropped (BI-06).
SEND_TIMEOUT_S = 60.0
# No frame is larger than a length header can say.
FRAME_BYTES_UNCAPPED = 2**32

_conn_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class _Frame:
    obj: Any
    arrived: float
    large: bool  # priced over the event-loop budget: validated off the loop too
    reserved: int  # bytes it holds in the broker-wide memory budget until handled


class _Slot:
    """A response being completed beside later requests; the writer waits for it in order."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.body: Frame | None = None

    async def fill(self, pending: PendingFrame) -> None:
        try:
            self.body = await pending.resolve()
        finally:
            self.done.set()


# What the writer sends: an encoded response frame (or in parts, when records go
# straight from a segment file), a slot still being filled, a Close, or None
# (acks 0: nothing to send).
_Outgoing = Frame | _Slot | Close | None


# --- the connection ---------------------------------------------------------------


def _socket_of(stream: trio.abc.Stream) -> socket.socket | None:
    """The TCP socket under `stream`, through TLS and other wrapping layers."""
    while getattr(stream, "socket", None) is None and hasattr(stream, "transport_stream"):
        stream = stream.transport_stream
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


def _local_address(stream: trio.abc.Stream) -> tuple[str, int] | None:
    """The address the client connected to (what Kafka's Metadata advertises by default)."""
    sock = _socket_of(stream)
    if sock is None:
        return None
    try:
        host, port = sock.getsockname()[:2]
    except OSError:
        return None
    return host, port


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


async def _sniff(stream: trio.abc.Stream, ctx: BrokerContext, state: ConnectionState) -> bytes:
    """A connection's first bytes, at least SNIFF_BYTES unless it ends or stalls first
    (the first byte within connections.max.idle.ms, the rest within the frame timeout)."""
    first = b""
    with trio.move_on_after(ctx.config.connections_max_idle_ms / 1000) as scope:
        while not sniffed(first, ctx.config.socket_request_max_bytes):
            data = await stream.receive_some(RECV_BYTES)
            if not data:
                break
            if not first:
                timeout_s = ctx.config.socket_request_read_timeout_ms / 1000
                scope.deadline = trio.current_time() + timeout_s
            first += data
    if scope.cancelled_caught:
        if first:
            state.close_reason = "slow_frame"
            log.warning("client_protocol_error", reason="first request too slow to identify")
        else:
            state.close_reason = "idle"
            log.info("connection_idle_closed", idle_ms=ctx.config.connections_max_idle_ms)
        return b""
    state.last_activity = trio.current_time()
    return first


async def serve_connection(
    stream: trio.abc.Stream, ctx: BrokerContext, *, codec: WireCodec | None = None
) -> None:
    """Serve one client until it disconnects, misbehaves, idles out or the broker drains.

    `codec` None sniffs the protocol from the first bytes (the shared port); a
    dedicated listener (`--kafka-listen`) passes its codec.
    """
    state = ConnectionState(
        conn_id=next(_conn_ids), peer=_peer_name(stream), local=_local_address(stream)
    )
    structlog.contextvars.bind_contextvars(conn_id=state.conn_id, peer=state.peer)
    peer_gone.set(_peer_gone_check(stream))  # long polls end when the client leaves
    ctx.connection_opened(state)
    try:
        async with stream:
            first = b""
            if codec is None:
                first = await _sniff(stream, ctx, state)
                if not first:
                    return
                codec = codec_for(first, ctx.config.socket_request_max_bytes)
            state.protocol = codec.name
            structlog.contextvars.bind_contextvars(protocol=codec.name)
            # Capacities add up to MAX_INFLIGHT_REQUESTS with the one being handled.
            req_send, req_recv = trio.open_memory_channel[_Frame | Close](
                MAX_INFLIGHT_REQUESTS // 2
            )
            out_send, out_recv = trio.open_memory_channel[_Outgoing](MAX_INFLIGHT_REQUESTS // 2)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_read_frames, stream, ctx, state, codec, first, req_send)
                nursery.start_soon(_handle_frames, ctx, state, codec, req_recv, out_send, nursery)
                await _write_responses(stream, ctx, state, codec, out_recv)
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
        ctx.memory.abandon(state.held_bytes)  # what its queues still held
        state.held_bytes = 0
        ctx.connection_closed(state)


def _refusal(codec: WireCodec, exc: FrameError) -> Close:
    return Close("bad_frame", exc.message, exc.code, codec.refuse(exc))


class FrameBeforeLogin(FrameTooLarge):
    """A frame announced over `sasl.server.max.receive.size` before the login."""

    def __init__(self, frame_bytes: int, max_frame_bytes: int) -> None:
        super().__init__(frame_bytes, max_frame_bytes)
        self.message += " before authentication (sasl.server.max.receive.size)"


def _pre_login_cap(ctx: BrokerContext) -> int:
    """The largest frame this connection may announce now: `sasl.server.max.receive.size`
    until a SASL listener's login (Kafka's cap, so nothing bigger is reserved from the
    shared budget on the word of a peer that has proven nothing), else no cap."""
    session = current_session()
    if session is None or session.authenticated:
        return FRAME_BYTES_UNCAPPED
    return ctx.config.sasl_server_max_receive_size


@dataclass
class _Reading:
    """The reader's progress through the frame at the head of its decoder."""

    decoder: FrameReader
    frame_started: float | None = None  # when the first byte of a partial frame came
    reserved: int = 0  # budget bytes taken for that frame


async def _receive(
    stream: trio.abc.Stream, ctx: BrokerContext, state: ConnectionState, reading: _Reading
) -> bytes | bytearray | None:
    """The next bytes from the client (b"" at EOF), None when the connection must end
    (idle, or a frame too slow); reserves a frame's budget before buffering its body.
    Raises FrameError for a bad length header."""
    idle_s = ctx.config.connections_max_idle_ms / 1000
    # socket.request.read.timeout.ms: a request must arrive whole this soon after its
    # first byte (slowloris); the 30 s default lets a 100 MiB frame through at ~3.5 MB/s.
    frame_timeout_s = ctx.config.socket_request_read_timeout_ms / 1000
    while True:
        announced = reading.decoder.announced_bytes()
        if announced is not None and not reading.reserved:
            if announced > _pre_login_cap(ctx):
                raise FrameBeforeLogin(announced, ctx.config.sasl_server_max_receive_size)
            # The body is not buffered until the budget has room: meanwhile this
            # connection is not read (muted), and TCP pushes back on the client.
            await ctx.memory.acquire(announced)
            state.held_bytes += announced
            reading.reserved = announced
            if reading.frame_started is not None:
                reading.frame_started = trio.current_time()  # the wait was ours
        # Idle = nothing in flight and no traffic either way for idle_s.
        deadline = state.last_activity + idle_s
        if reading.frame_started is not None:
            deadline = min(deadline, reading.frame_started + frame_timeout_s)
        with trio.move_on_at(deadline) as idle:
            data = await stream.receive_some(RECV_BYTES)
        now = trio.current_time()
        if reading.frame_started is not None and now >= reading.frame_started + frame_timeout_s:
            state.close_reason = "slow_frame"
            log.warning(
                "client_protocol_error",
                reason=f"request not complete {frame_timeout_s:g}s after its first byte",
                buffered_bytes=reading.decoder.buffered_bytes,
            )
            return None
        if not idle.cancelled_caught:
            return data
        if state.inflight:
            state.last_activity = now
        elif now >= state.last_activity + idle_s:
            state.close_reason = "idle"
            log.info("connection_idle_closed", idle_ms=ctx.config.connections_max_idle_ms)
            return None


async def _read_frames(
    stream: trio.abc.Stream,
    ctx: BrokerContext,
    state: ConnectionState,
    codec: WireCodec,
    first: bytes,
    req_send: trio.MemorySendChannel[_Frame | Close],
) -> None:
    reading = _Reading(codec.frame_reader(ctx.config.socket_request_max_bytes))
    decoder = reading.decoder
    received = first  # read but not yet fed (the sniffed bytes, at first)
    data: bytes | bytearray | None
    async with req_send:
        with state.reader_scope:
            try:
                while True:
                    if received:
                        data, received = received, b""
                    else:
                        data = await _receive(stream, ctx, state, reading)
                        if data is None:
                            return
                    now = state.last_activity = trio.current_time()
                    if not data:
                        if decoder.buffered_bytes:
                            state.close_reason = "truncated_frame"
                            log.warning("client_protocol_error", reason="truncated frame at EOF")
                        return
                    ctx.metrics.received(codec.name, len(data))
                    if reading.frame_started is None:
                        reading.frame_started = now
                    decoder.feed(data)
                    completed = 0
                    while (size := decoder.next_frame_bytes()) is not None:
                        if not reading.reserved:  # arrived whole in one read: in memory
                            if size > _pre_login_cap(ctx):
                                cap = ctx.config.sasl_server_max_receive_size
                                raise FrameBeforeLogin(size, cap)
                            ctx.memory.charge(size)
                            state.held_bytes += size
                            reading.reserved = size
                        large = not offload.inline(codec.frame_cost_ns(size))
                        if large:
                            _, obj = await offload.to_worker(decoder.next_message)
                        else:  # no coroutine for the common case: every frame comes here
                            _, obj = decoder.next_message()
                        completed += 1
                        ctx.inflight_changed(state, +1)
                        frame = _Frame(obj, time.perf_counter(), large, reading.reserved)
                        reading.reserved = 0
                        await req_send.send(frame)
                    if not decoder.buffered_bytes:
                        reading.frame_started = None
                    elif completed:
                        reading.frame_started = now  # the leftover bytes start the next frame
            except FrameError as exc:
                ctx.inflight_changed(state, +1)
                state.close_reason = (
                    "frame_before_login" if isinstance(exc, FrameBeforeLogin) else "bad_frame"
                )
                await req_send.send(_refusal(codec, exc))
                return
        if state.reader_scope.cancelled_caught:
            state.close_reason = "shutdown"  # draining: queued requests are still answered


async def _handle_frames(
    ctx: BrokerContext,
    state: ConnectionState,
    codec: WireCodec,
    req_recv: trio.MemoryReceiveChannel[_Frame | Close],
    out_send: trio.MemorySendChannel[_Outgoing],
    nursery: trio.Nursery,
) -> None:
    async with req_recv, out_send:
        async for item in req_recv:
            if isinstance(item, Close):
                await out_send.send(item)
                return
            grant = 0
            wanted = codec.answer_room(item.obj)
            if wanted:  # its answer may be large: room reserved for it first
                # What it holds is its unsent answers: reservations of the requests
                # queued behind this one are released only after it, so never wait on them.
                grant = await ctx.memory.grant(state.queued_bytes, wanted)
            try:
                with ctx.memory.granted(grant):
                    result = await codec.handle(
                        ctx, state, item.obj, item.arrived, large=item.large
                    )
            finally:
                ctx.memory.release(item.reserved)
                state.held_bytes -= item.reserved
                ctx.memory.release(grant, freed=False)  # the answer is charged instead
            if isinstance(result, Close):
                state.close_reason = result.reason
                await out_send.send(result)
                return
            if result is not None and not isinstance(result, bytes | list):
                slot = _Slot()
                nursery.start_soon(slot.fill, result)
                await out_send.send(slot)
                continue
            if result is not None:
                size = _memory_bytes(result)
                state.queued_bytes += size
                ctx.memory.charge(size)
                state.held_bytes += size
            await out_send.send(result)
            while state.queued_bytes > min(MAX_QUEUED_RESPONSE_BYTES, ctx.memory.share_bytes):
                state.room = trio.Event()
                await state.room.wait()


# Answers already complete when the writer gets to them go out in one send of at most
# this many bytes: a pipelining client (Java's producer keeps 5 requests in flight)
# then costs one syscall for several small answers, not one each.
COALESCE_MAX_BYTES = 256 * 1024


class _Ready(NamedTuple):
    """An answer the writer may send now: its frame (None: nothing to send) and the
    bytes of the memory budget it holds until sent."""

    body: Frame | None
    queued: int


def _ready_now(item: _Outgoing) -> _Ready | None:
    """`item` as an answer to send at once, or None if it must wait (a slot still
    being filled) or is no answer (a Close)."""
    if isinstance(item, Close):
        return None
    if isinstance(item, _Slot):
        # a slot's answer was never counted in the budget
        return _Ready(item.body, 0) if item.done.is_set() else None
    return _Ready(item, 0 if item is None else _memory_bytes(item))


async def _write_responses(
    stream: trio.abc.Stream,
    ctx: BrokerContext,
    state: ConnectionState,
    codec: WireCodec,
    out_recv: trio.MemoryReceiveChannel[_Outgoing],
) -> None:
    async with out_recv:
        carried: list[_Outgoing] = []  # taken from the channel, not yet written
        while True:
            if carried:
                item = carried.pop()
            else:
                try:
                    item = await out_recv.receive()
                except trio.EndOfChannel:
                    return
            if isinstance(item, Close):
                log.warning("client_protocol_error", reason=item.message, protocol=codec.name)
                ctx.request_finished("invalid_frame", item.error, 0.0, protocol=codec.name)
                if item.frame is not None:
                    await _send(stream, ctx, codec, item.frame)
                ctx.inflight_changed(state, -1)
                return
            if isinstance(item, _Slot):
                await item.done.wait()
            first = _ready_now(item)
            assert first is not None  # a Close returned above; a slot is done
            batch = [first]
            if isinstance(first.body, bytes):
                batch += _more_ready(out_recv, len(first.body), carried)
            await _send_batch(stream, ctx, codec, batch)
            for answer in batch:
                _sent(ctx, state, answer)


def _more_ready(
    out_recv: trio.MemoryReceiveChannel[_Outgoing], size: int, carried: list[_Outgoing]
) -> list[_Ready]:
    """The answers queued behind one of `size` bytes that are complete and plain bytes,
    up to COALESCE_MAX_BYTES in all; the first one that is not goes to `carried`."""
    more: list[_Ready] = []
    while size < COALESCE_MAX_BYTES:
        try:
            item = out_recv.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel):
            break
        ready = _ready_now(item)
        if ready is None or not isinstance(ready.body, bytes | None):
            carried.append(item)
            break
        more.append(ready)
        size += 0 if ready.body is None else len(ready.body)
    return more


async def _send_batch(
    stream: trio.abc.Stream, ctx: BrokerContext, codec: WireCodec, batch: list[_Ready]
) -> None:
    """Send the answers of `batch` in order: one frame as it is, several joined."""
    if len(batch) == 1:
        if batch[0].body is not None:
            await _send(stream, ctx, codec, batch[0].body)
        return
    joined = b"".join(cast(bytes, a.body) for a in batch if a.body is not None)
    if joined:
        await _send(stream, ctx, codec, joined)


def _sent(ctx: BrokerContext, state: ConnectionState, answer: _Ready) -> None:
    """One answer written: its budget released, the reader told there is room."""
    if answer.body is not None:
        state.queued_bytes -= answer.queued  # queued until sent: a grant counts it
        if answer.queued:
            ctx.memory.release(answer.queued)
            state.held_bytes -= answer.queued
        state.room.set()
    state.last_activity = trio.current_time()
    ctx.inflight_changed(state, -1)


def _memory_bytes(body: Frame) -> int:
    return memory_bytes(body) if isinstance(body, list) else len(body)


async def _send(
    stream: trio.abc.Stream, ctx: BrokerContext, codec: WireCodec, frame: Frame
) -> None:
    if isinstance(frame, list):
        ctx.metrics.sent(codec.name, sum(len(part) for part in frame))
        await send_parts(stream, frame, SEND_TIMEOUT_S)
        return
    ctx.metrics.sent(codec.name, len(frame))
    with trio.fail_after(SEND_TIMEOUT_S):
        await stream.send_all(frame)
