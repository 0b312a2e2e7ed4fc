"""The one-port sniff and Kafka frame splitting."""

from __future__ import annotations

import pytest

from harness.kafka_python import kp_class
from protocol.framing import encode_frame
from protocol.kafka import (
    KafkaCodecError,
    KafkaFrameDecoder,
    RequestHeader,
    WireProtocol,
    encode_request,
    sniff_protocol,
)
from protocol.kafka.framing import SNIFF_BYTES


def _kafka_first_request() -> bytes:
    message = kp_class(18, True)[0]()
    message.with_header(correlation_id=1, client_id="kafka-python")
    return bytes(message.encode(header=True, framed=True))


def _tidelog_first_request() -> bytes:
    return bytes(encode_frame({"api": "api_versions", "v": 1, "id": 1, "body": {}}))


@pytest.mark.parametrize(
    ("first", "expected"),
    [
        pytest.param(_kafka_first_request(), WireProtocol.KAFKA, id="kafka-python"),
        pytest.param(
            encode_request(RequestHeader(3, 8, 1, None), {"topics": None}),
            WireProtocol.KAFKA,
            id="metadata",
        ),
        pytest.param(_tidelog_first_request(), WireProtocol.TIDELOG, id="tidelog"),
        pytest.param(b"\x00\x00\x00\x03\xde\x00\x00", WireProtocol.TIDELOG, id="map16"),
        pytest.param(b"GET / HTTP/1.1\r\n", WireProtocol.UNKNOWN, id="http"),
        pytest.param(b"\x00\x00\x00\x02\x00\x12", WireProtocol.UNKNOWN, id="kafka-too-short"),
        pytest.param(b"\x16\x03\x01\x02\x00\x01", WireProtocol.UNKNOWN, id="tls"),
    ],
)
def test_sniff(first, expected):
    assert sniff_protocol(first) is expected
    assert sniff_protocol(first[: SNIFF_BYTES - 1]) is None


def test_frames_split_across_feeds():
    frames = [_kafka_first_request(), encode_request(RequestHeader(3, 1, 2, "c"), {})]
    stream = b"".join(frames)
    decoder = KafkaFrameDecoder()
    got = []
    for i in range(len(stream)):
        decoder.feed(stream[i : i + 1])
        got.extend(decoder)
    assert got == [f[4:] for f in frames]
    assert decoder.buffered_bytes == 0


@pytest.mark.parametrize("size", [-1, 2**31 - 1, 1025])
def test_bad_sizes_are_refused_before_buffering(size):
    decoder = KafkaFrameDecoder(max_frame_bytes=1024)
    decoder.feed(size.to_bytes(4, "big", signed=True))
    with pytest.raises(KafkaCodecError, match="frame size") as info:
        decoder.next_frame()
    assert info.value.code == 42
    with pytest.raises(KafkaCodecError):  # the stream stays failed
        decoder.feed(b"\x00")
