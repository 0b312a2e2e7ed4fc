"""The wire codecs the broker speaks, and how a connection's first bytes choose one.

The connection (broker/connection.py) names no protocol: it asks `codec_for` which
codec serves a connection on the shared port, and a dedicated listener asks
`codec_named`. Adding a protocol means a codec (broker/wirecodec.py's `WireCodec`)
and a row here.
"""

from __future__ import annotations

from broker.kafka.connection import KAFKA
from broker.native.codec import MSGPACK
from broker.wirecodec import WireCodec
from protocol.framing import LENGTH_SIZE
from protocol.kafka.framing import SNIFF_BYTES, WireProtocol, sniff_protocol

CODECS: dict[str, WireCodec] = {codec.name: codec for codec in (MSGPACK, KAFKA)}
# The smallest Kafka request (a v0 header: api key, version, correlation id).
KAFKA_MIN_FRAME_BYTES = 8


def codec_named(name: str) -> WireCodec:
    """The codec a listener dedicated to one protocol serves (`--kafka-listen`: "kafka")."""
    return CODECS[name]


def codec_for(first: bytes, max_frame_bytes: int) -> WireCodec:
    """Kafka's codec for a Kafka first request, else the msgpack one (which answers
    anything it cannot read with INVALID_REQUEST, as before there were two)."""
    if sniff_protocol(first, max_frame_bytes) is WireProtocol.KAFKA:
        return KAFKA
    return MSGPACK


def sniffed(first: bytes, max_frame_bytes: int) -> bool:
    """Whether `first` decides the protocol: five bytes, or a length header no Kafka
    request has (the msgpack codec then refuses an oversize one before its body)."""
    if len(first) >= SNIFF_BYTES:
        return True
    if len(first) < LENGTH_SIZE:
        return False
    return not KAFKA_MIN_FRAME_BYTES <= int.from_bytes(first[:LENGTH_SIZE]) <= max_frame_bytes
