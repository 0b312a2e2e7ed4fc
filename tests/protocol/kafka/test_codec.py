"""Requests and responses: round trips for every API x version, and kafka-python's view.

Each API's schema at each served version is exercised with a sample message that
sets every field (and one with every nullable field null). kafka-python's own
codec then reads our bytes and writes them back identically, in both directions.
"""

from __future__ import annotations

import pytest

from harness import kafka_python
from harness.kafka_python import kp_class
from protocol.kafka import (
    APIS_BY_KEY,
    KafkaCodecError,
    KafkaFrameDecoder,
    RequestHeader,
    UnsupportedRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    unsupported_version_response,
)
from protocol.kafka.codec import decode_request_header, request_header_version
from protocol.kafka.errors import KafkaError
from protocol.kafka.messages import ALL_APIS, API_VERSIONS, PRODUCE
from tests.protocol.kafka.samples import project, sample, values

CASES = [
    pytest.param(api, version, id=f"{api.name}-v{version}")
    for api in ALL_APIS
    for version in range(api.min_version, api.max_version + 1)
]
DIRECTIONS = [pytest.param(False, id="request"), pytest.param(True, id="response")]
# The versions kafka-python's classes have (ApiVersions v5 is newer than its schemas).
KP_CASES = [
    case for case in CASES if case.values[1] <= kp_class(case.values[0].key, True).max_version
]


def _fields(api, response):
    return api.response if response else api.request


@pytest.mark.parametrize("response", DIRECTIONS)
@pytest.mark.parametrize(("api", "version"), CASES)
@pytest.mark.parametrize("nulls", [False, True], ids=["values", "nulls"])
def test_body_round_trip(api, version, response, nulls):
    fields = _fields(api, response)
    body = sample(fields, version, nulls=nulls)
    out = bytearray()
    codec = api.codec(version, response)
    codec.encode(body, out)
    decoded, end = codec.decode(memoryview(bytes(out)))
    assert end == len(out)
    assert project(fields, version, decoded) == body
    # A field the version lacks reads as its default, so handlers see one shape.
    for field in fields:
        if field.name not in body:
            assert decoded[field.name] == field.default_value()


@pytest.mark.parametrize(("api", "version"), CASES)
def test_request_frame_round_trip(api, version):
    body = sample(api.request, version)
    for client_id in ("tidelog-test", None):
        header = RequestHeader(api.key, version, 1234567, client_id)
        frame = encode_request(header, body)
        decoder = KafkaFrameDecoder()
        decoder.feed(frame[:7])
        assert list(decoder) == []
        decoder.feed(frame[7:])
        (got,) = list(decoder)
        request = decode_request(got)
        assert request.header == header
        assert request.api is api
        assert project(api.request, version, request.body) == body


@pytest.mark.parametrize(("api", "version"), CASES)
def test_response_frame_round_trip(api, version):
    body = sample(api.response, version)
    frame = encode_response(api, version, 99, body)
    assert int.from_bytes(frame[:4], "big") == len(frame) - 4
    response = decode_response(frame[4:], api, version)
    assert response.correlation_id == 99
    assert project(api.response, version, response.body) == body


@pytest.mark.parametrize("response", DIRECTIONS)
@pytest.mark.parametrize(("api", "version"), KP_CASES)
def test_kafka_python_reads_and_writes_the_same_bytes(api, version, response):
    """kafka-python decodes our bytes to the same values and re-encodes them byte for byte."""
    fields = _fields(api, response)
    body = sample(fields, version)
    if api is API_VERSIONS and response:
        # Clients read an ApiVersions answer with an error in the v0 layout (KIP-511).
        body["error_code"] = 0
    out = bytearray()
    api.codec(version, response).encode(body, out)
    theirs = kp_class(api.key, not response)
    decoded = theirs[version].decode(bytes(out))
    assert kafka_python.values(decoded, version) == values(fields, version, body)
    decoded.with_header(correlation_id=0)
    assert bytes(decoded.encode()) == bytes(out)


@pytest.mark.parametrize(("api", "version"), KP_CASES)
def test_request_written_by_kafka_python_with_its_header(api, version):
    body = sample(api.request, version)
    out = bytearray()
    api.codec(version, False).encode(body, out)
    message = kp_class(api.key, True)[version].decode(bytes(out))
    message.with_header(correlation_id=31337, client_id="kafka-python")
    frame = bytes(message.encode(header=True, framed=True))
    decoder = KafkaFrameDecoder()
    decoder.feed(frame)
    request = decode_request(next(iter(decoder)))
    assert request.header == RequestHeader(api.key, version, 31337, "kafka-python")
    assert project(api.request, version, request.body) == body


@pytest.mark.parametrize("version", [3, 4, 7])
def test_api_versions_newer_than_ours_gets_the_v0_fallback(version):
    """KIP-511: a flexible ApiVersions we do not serve is answered in the v0 layout."""
    theirs = kp_class(API_VERSIONS.key, True)
    message = theirs[min(version, theirs.max_version)](
        client_software_name="kafka-python", client_software_version="3.0"
    )
    message.with_header(correlation_id=8, client_id="kp")
    frame = bytearray(message.encode(header=True, framed=True))
    frame[6:8] = version.to_bytes(2, "big")  # as a client from the future would send
    if version <= API_VERSIONS.max_version:
        assert decode_request(bytes(frame[4:])).body["client_software_name"] == "kafka-python"
        return
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(bytes(frame[4:]))
    assert info.value.code == KafkaError.UNSUPPORTED_VERSION.code == 35
    answer = unsupported_version_response(info.value.header)
    parsed = kp_class(API_VERSIONS.key, False)[0].decode(answer[4:], header=True)
    assert parsed.header.correlation_id == 8
    assert parsed.error_code == 35
    ranges = {k.api_key: (k.min_version, k.max_version) for k in parsed.api_keys}
    assert ranges == {a.key: (a.min_version, a.max_version) for a in ALL_APIS}


def test_produce_is_advertised_from_v0_and_v0_requests_decode():
    """Kafka 4 advertises Produce from 0 (old librdkafka needs it); refusing 0-2 is the broker's."""
    assert PRODUCE.min_version == 0
    body = sample(PRODUCE.request, 0)
    request = decode_request(encode_request(RequestHeader(0, 0, 1, "kcat"), body)[4:])
    assert request.version == 0
    assert request.body["transactional_id"] is None


def test_other_unsupported_versions_have_no_answer():
    """Produce v14 (flexible, beyond our table): refused with the header kept, no answer body."""
    frame = b"\x00\x00\x00\x0e\x00\x00\x00\x01\x00\x01x\x00" + b"\x00" * 12
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame)
    assert info.value.header == RequestHeader(PRODUCE.key, 14, 1, "x")
    assert unsupported_version_response(info.value.header) is None


def test_unknown_api_key_is_unsupported_not_a_crash():
    frame = b"\x00\x63\x00\x00\x00\x00\x00\x07\xff\xff"  # api key 99, v0, correlation 7
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame)
    assert info.value.header.api_key == 99
    assert info.value.header.correlation_id == 7
    assert info.value.error is KafkaError.UNSUPPORTED_VERSION


def _produce_frame() -> bytes:
    return encode_request(RequestHeader(0, 7, 5, "c"), sample(PRODUCE.request, 7))[4:]


@pytest.mark.parametrize("cut", [1, 5, 9, 11, 20, 40, -3, -1])
def test_truncated_requests_are_invalid_request(cut):
    frame = _produce_frame()
    with pytest.raises(KafkaCodecError) as info:
        decode_request(frame[:cut])
    assert info.value.error is KafkaError.INVALID_REQUEST


def test_trailing_bytes_are_invalid_request():
    with pytest.raises(KafkaCodecError, match="left over") as info:
        decode_request(_produce_frame() + b"\x00")
    assert info.value.code == 42


def test_a_flexible_request_may_end_with_empty_tag_sections_only():
    """librdkafka 2.x ends AlterUserScramCredentials v0 with a second empty tagged-field
    section; Kafka ignores it, so do we. Anything else left over is still refused."""
    body = {"deletions": [{"name": "carol", "mechanism": 1}], "upsertions": []}
    frame = encode_request(RequestHeader(51, 0, 5, "c"), body)[4:]
    assert decode_request(frame + b"\x00").body["deletions"] == [{"name": "carol", "mechanism": 1}]
    with pytest.raises(KafkaCodecError, match="1 bytes left over"):
        decode_request(frame + b"\x01")


def test_absurd_array_count_is_refused_before_allocating():
    head = encode_request(RequestHeader(0, 7, 5, "c"), {"topic_data": []})[4:]
    frame = head[:-4] + (2**31 - 1).to_bytes(4, "big") + b"\x00" * 8
    with pytest.raises(KafkaCodecError, match="claims 2147483647 elements") as info:
        decode_request(frame)
    assert info.value.code == 42


@pytest.mark.parametrize("length", [-2, 30000])
def test_bad_string_lengths_are_invalid_request(length):
    frame = b"\x00\x12\x00\x00\x00\x00\x00\x01" + length.to_bytes(2, "big", signed=True) + b"ab"
    with pytest.raises(KafkaCodecError) as info:
        decode_request(frame)
    assert info.value.code == 42


def test_non_nullable_null_is_invalid_request():
    # Metadata v0: topics is a non-nullable array, -1 is malformed there.
    frame = encode_request(RequestHeader(3, 0, 1, None), {"topics": []})[4:-4] + b"\xff\xff\xff\xff"
    with pytest.raises(KafkaCodecError, match="-1 elements"):
        decode_request(frame)


def test_encoding_a_wrong_type_names_the_api():
    with pytest.raises(KafkaCodecError, match="Produce v7 request") as info:
        encode_request(RequestHeader(0, 7, 1, None), {"acks": "all"})
    assert info.value.error.name == "UNKNOWN_SERVER_ERROR"


def test_every_api_is_registered_once_by_key():
    assert len(APIS_BY_KEY) == len(ALL_APIS) == 47


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [(7, 0, 0), (7, 1, 1), (0, 8, 1), (18, 3, 2), (18, 4, 2), (60, 0, 2), (3, 8, 1)],
)
def test_request_header_versions(api_key, version, expected):
    assert request_header_version(api_key, version) == expected


def test_header_v0_request_is_read_and_refused():
    """ControlledShutdown v0 has no client_id: its header is read as v0, then refused."""
    frame = b"\x00\x07\x00\x00\x00\x00\x00\x2a" + b"\x00\x00\x00\x01"  # body: broker id 1
    header, pos = decode_request_header(frame)
    assert (header, pos) == (RequestHeader(7, 0, 42, None), 8)
    with pytest.raises(UnsupportedRequest) as info:
        decode_request(frame)
    assert info.value.header.correlation_id == 42
