"""Tidelog's Python clients: the blocking `Client`, `Producer` and `Consumer`
(kafka-python's names and semantics), and the trio client in `tidelog.aio`.

They own the sockets and threads; everything about bytes on the wire comes from
the sans-I/O codec in `protocol`, the only Tidelog package this one imports. The
broker never loads this package on its request path. The codec's results and
errors that callers meet are re-exported here, so one import serves a program.
`tidelog.aio` is not imported here: trio is loaded only by programs that use it.
"""

from protocol.calls import FetchResult, OffsetAndTimestamp, ProduceResult
from protocol.connection import BrokerProtocolError, Reply
from protocol.errors import RequestTimedOut, TidelogError
from tidelog.client import Client
from tidelog.consumer import Consumer, NoOffsetForPartitionError, TopicPartition
from tidelog.consumer_record import ConsumerRecord
from tidelog.pending import BatchMetadata, RecordFuture, RecordMetadata
from tidelog.producer import BufferFullError, Producer
from tidelog.security import Security

__all__ = [
    "BatchMetadata",
    "BrokerProtocolError",
    "BufferFullError",
    "Client",
    "Consumer",
    "ConsumerRecord",
    "FetchResult",
    "NoOffsetForPartitionError",
    "OffsetAndTimestamp",
    "ProduceResult",
    "Producer",
    "RecordFuture",
    "RecordMetadata",
    "Reply",
    "RequestTimedOut",
    "Security",
    "TidelogError",
    "TopicPartition",
]
