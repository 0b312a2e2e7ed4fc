"""What a wire protocol plugs into the connection (broker/connection.py): one port, two codecs.

The connection owns everything protocol-independent: the socket, idle and slowloris
timeouts, the in-flight cap, the broker-wide memory budget, in-order responses and
`ConnectionState` bookkeeping. A codec owns the bytes: how frames are cut
(`FrameReader`), how a frame becomes a handler call and its answer becomes a response
frame (`WireCodec.handle`), and what an unreadable frame gets (`WireCodec.refuse`).
The msgpack codec is `broker.native.codec.MSGPACK`; Kafka's is `broker.kafka.connection.KAFKA`;
broker/codecs.py is the registry the connection chooses from.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from broker.context import BrokerContext, ConnectionState
from broker.fetch_send import FrameParts
from protocol.errors import TidelogError

# A response frame as the writer sends it: whole (length header included), or in
# parts whose records go from a segment file.
Frame = bytes | FrameParts


class FrameReader(Protocol):
    """Cuts a byte stream into frames (protocol.framing.FrameDecoder's interface).

    Every method raises `protocol.framing.FrameError` once the stream is unreadable
    (a bad length header); the connection then answers `WireCodec.refuse` and closes.
    """

    @property
    def buffered_bytes(self) -> int: ...

    def feed(self, data: bytes | bytearray | memoryview) -> None: ...

    def announced_bytes(self) -> int | None: ...

    def next_frame_bytes(self) -> int | None: ...

    def next_message(self) -> tuple[bool, Any]: ...


class PendingFrame(Protocol):
    """A response finished beside later requests (a `Deferred`); `resolve` never raises."""

    async def resolve(self) -> Frame: ...


@dataclass(frozen=True, slots=True)
class Close:
    """Answer `frame` (None: nothing) after every earlier response, then close."""

    reason: str  # ConnectionState.close_reason, the connections_closed label
    message: str  # why, logged as client_protocol_error
    error: str  # the error name counted for api "invalid_frame"
    frame: Frame | None


# What handling one frame gives the connection: a response, one still being
# finished, a Close, or None (nothing to send: produce with acks 0).
Outcome = Frame | PendingFrame | Close | None


class WireCodec(Protocol):
    """One protocol's side of a connection."""

    name: str  # "tidelog" or "kafka": the metrics' protocol label and logs

    def frame_reader(self, max_frame_bytes: int) -> FrameReader: ...

    def frame_cost_ns(self, size: int) -> int:
        """What decoding (and validating) a request frame of `size` bytes is priced at:
        over `broker.offload`'s event-loop budget, it is decoded in a worker thread."""
        ...

    def answer_room(self, message: Any) -> int:
        """The most bytes handling `message` may allocate for its answer (a fetch's
        `max_bytes`), 0 for a small answer: a grant of up to that much is reserved from
        the memory budget before it runs (`broker.membudget.MemoryBudget.grant`)."""
        ...

    async def handle(
        self,
        ctx: BrokerContext,
        state: ConnectionState,
        message: Any,
        arrived: float,
        *,
        large: bool,
    ) -> Outcome: ...

    def refuse(self, error: TidelogError) -> Frame | None:
        """The answer to a frame the reader could not cut (None: close silently)."""
        ...
