"""Tidelog's wire and record contract, sans-I/O: framing, envelopes, request and
response schemas, the record-batch codec and the error registry, plus the clients
built on them.

The codec never touches a socket (like h11). This package imports nothing from the
rest of Tidelog: the broker, the storage engine and the Spark connector all build on it.
"""

from protocol.calls import FetchResult, OffsetAndTimestamp, ProduceResult
from protocol.client import Client
from protocol.connection import BrokerProtocolError, ClientConnection, Reply
from protocol.consumer import Consumer, ConsumerRecord, TopicPartition
from protocol.envelope import Request, Response
from protocol.errors import TidelogError
from protocol.framing import FrameDecoder, encode_frame
from protocol.producer import BatchMetadata, BufferFullError, Producer, RecordMetadata

__all__ = [
    "BatchMetadata",
    "BrokerProtocolError",
    "BufferFullError",
    "Client",
    "ClientConnection",
    "Consumer",
    "ConsumerRecord",
    "FetchResult",
    "FrameDecoder",
    "OffsetAndTimestamp",
    "ProduceResult",
    "Producer",
    "RecordMetadata",
    "Reply",
    "Request",
    "Response",
    "TidelogError",
    "TopicPartition",
    "encode_frame",
]
