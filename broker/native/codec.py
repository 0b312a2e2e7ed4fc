"""Tidelog's own protocol on a connection (docs/protocol.md): msgpack envelopes.

The wire side of the msgpack codec: frames cut by `protocol.framing.FrameDecoder`,
requests handed to `broker.native.requests.handle_request`, responses framed (a fetch
answer's records in parts, from their segment files). The connection
(broker/connection.py) reaches it only through the codec registry (broker/codecs.py).
"""

from __future__ import annotations

from typing import Any

from broker.context import BrokerContext, ConnectionState
from broker.fetch_send import spans_of_fetch
from broker.handlers.fetch import FETCH_RESPONSE_MAX_BYTES
from broker.logging import get_logger
from broker.native.requests import PendingResponse, handle_request
from broker.wirecodec import Close, Frame, FrameReader, Outcome
from protocol.envelope import UNKNOWN_ID, Response, error_response, msgpack_type_name
from protocol.errors import InvalidRequest, TidelogError, UnknownServerError
from protocol.framing import FrameDecoder, encode_frame_parts, encode_frame_to_send

log = get_logger(component="connection")

# Decoding a frame (and validating its body) costs per object: a producer's request
# far less than this price (its records are one bin: ~0.1 ms for 1 MiB), the densest
# msgpack up to ~40 ns a byte. At this price a 1 MiB producer request (~15 ms) is
# decoded on the event loop and skips a thread hop, and no frame inline takes more
# than ~45 ms; dearer ones are decoded and validated in a worker (broker/offload.py).
FRAME_DECODE_NS_PER_BYTE = 14


class _MsgpackPending:
    """A msgpack response finished beside later requests (`acks: -1`)."""

    def __init__(self, pending: PendingResponse, *, fetch: bool) -> None:
        self._pending = pending
        self._fetch = fetch

    async def resolve(self) -> Frame:
        return _encode(await self._pending.resolve(), fetch=self._fetch)


class MsgpackCodec:
    """Tidelog's own protocol (docs/protocol.md): msgpack envelopes, `broker.native.requests`."""

    name = "tidelog"

    def frame_reader(self, max_frame_bytes: int) -> FrameReader:
        return FrameDecoder(max_frame_bytes)

    def frame_cost_ns(self, size: int) -> int:
        """What decoding (and validating) a request frame of `size` bytes is priced at."""
        return size * FRAME_DECODE_NS_PER_BYTE

    def answer_room(self, message: Any) -> int:
        if not isinstance(message, dict) or message.get("api") != "fetch":
            return 0
        body = message.get("body")
        wanted = body.get("max_bytes") if isinstance(body, dict) else None
        if not isinstance(wanted, int) or wanted < 1:
            return FETCH_RESPONSE_MAX_BYTES  # refused by validation, or the largest
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
        if not isinstance(message, dict):
            # docs/protocol.md §1: a frame that is not a map is answered, then closed.
            error = InvalidRequest(f"request must be a map, got {msgpack_type_name(message)}")
            return Close("bad_frame", error.message, error.code, self.refuse(error))
        result = await handle_request(ctx, message, arrived, large=large)
        fetch = message.get("api") == "fetch"
        if isinstance(result, PendingResponse):
            return _MsgpackPending(result, fetch=fetch)
        return None if result is None else _encode(result, fetch=fetch)

    def refuse(self, error: TidelogError) -> Frame | None:
        return _encode(error_response(UNKNOWN_ID, error), fetch=False)


MSGPACK = MsgpackCodec()


def _encode(response: Response, *, fetch: bool) -> Frame:
    """A response's frame, in parts when a fetch answer's records are sent from their
    segment file (never raises: a bug becomes an error reply)."""
    try:
        spans = spans_of_fetch(response.body) if fetch and response.body else []
        if spans:
            return encode_frame_parts(response.to_wire(), spans)
        return encode_frame_to_send(response.to_wire())
    except Exception as exc:  # a handler built an unencodable body: a bug, not the peer's
        log.exception("response_encode_failed")
        failure = UnknownServerError(f"unencodable response: {exc}")
        return encode_frame_to_send(error_response(response.id, failure).to_wire())
