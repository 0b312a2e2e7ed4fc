"""Tidelog's wire and record contract, sans-I/O: framing, envelopes, request and
response schemas, the record-batch codec, the error registry, and the client side
of a connection (request numbering and reply matching) with its typed calls.

The codec never touches a socket (like h11). This package imports nothing from the
rest of Tidelog: the broker, the storage engine, the Spark connector and the clients
in `tidelog` all build on it. The clients themselves live in `tidelog`, so loading
the codec (as the broker and storage do) loads no client.
"""

from protocol.calls import FetchResult, OffsetAndTimestamp, ProduceResult
from protocol.connection import BrokerProtocolError, ClientConnection, Reply
from protocol.envelope import Request, Response
from protocol.errors import TidelogError
from protocol.framing import FrameDecoder, encode_frame

__all__ = [
    "BrokerProtocolError",
    "ClientConnection",
    "FetchResult",
    "FrameDecoder",
    "OffsetAndTimestamp",
    "ProduceResult",
    "Reply",
    "Request",
    "Response",
    "TidelogError",
    "encode_frame",
]
