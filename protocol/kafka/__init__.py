"""Kafka's wire protocol, sans-I/O: the second codec in front of Tidelog's handlers.

Bytes in, typed messages out, and back, with no sockets (like `protocol/`):

- `framing`: frame splitting and the one-port sniff (Kafka or Tidelog first bytes);
- `codec`: request/response headers and bodies for the APIs in `messages`
  (generated from Kafka's JSON schemas, walked by `schema`), the KIP-511 fallback;
- `records`, `columns`, `validate` and `convert`: Kafka's RecordBatch v2, its
  records (per record and column-wise), its produce checks, and its conversion to
  and from Tidelog's batch (protocol/batch.py), every codec;
- `errors`: Kafka's error registry and `KafkaCodecError`, the one error type.
"""

from protocol.kafka.codec import (
    APIS_BY_KEY,
    KafkaRequest,
    KafkaResponse,
    RequestHeader,
    UnsupportedRequest,
    api_version_ranges,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    unsupported_version_response,
)
from protocol.kafka.convert import (
    kafka_to_tidelog,
    kafka_to_tidelog_all,
    tidelog_to_kafka,
    tidelog_to_kafka_all,
)
from protocol.kafka.errors import KafkaCodecError, KafkaError, error_for_code, for_tidelog_code
from protocol.kafka.framing import KafkaFrameDecoder, WireProtocol, sniff_protocol
from protocol.kafka.validate import decode_batch, validate_batch

__all__ = [
    "APIS_BY_KEY",
    "KafkaCodecError",
    "KafkaError",
    "KafkaFrameDecoder",
    "KafkaRequest",
    "KafkaResponse",
    "RequestHeader",
    "UnsupportedRequest",
    "WireProtocol",
    "api_version_ranges",
    "decode_batch",
    "decode_request",
    "decode_response",
    "encode_request",
    "encode_response",
    "error_for_code",
    "for_tidelog_code",
    "kafka_to_tidelog",
    "kafka_to_tidelog_all",
    "sniff_protocol",
    "tidelog_to_kafka",
    "tidelog_to_kafka_all",
    "unsupported_version_response",
    "validate_batch",
]
