"""The sans-I/O client connection against the fake broker's server half, in memory."""

from __future__ import annotations

import pytest

from protocol.batch import encode_batch
from protocol.connection import BrokerProtocolError, ClientConnection, parse_address
from protocol.envelope import ok_response, parse_response
from protocol.errors import InvalidRequest, TopicAlreadyExists, UnknownServerError
from protocol.framing import FrameDecoder, encode_frame

from .fakebroker import FakeBroker, ServerConnection


def pair() -> tuple[ClientConnection, ServerConnection]:
    return ClientConnection(client_id="test"), ServerConnection(FakeBroker())


def exchange(client: ClientConnection, server: ServerConnection, *frames: bytes) -> list:
    client.receive_data(server.receive_data(b"".join(frames)))
    replies = []
    while (reply := client.next_reply()) is not None:
        replies.append(reply)
    return replies


def test_pipelined_requests_are_answered_in_order() -> None:
    client, server = pair()
    frames = [client.send_request("create_topic", {"topic": f"t{i}"})[1] for i in range(5)]
    frames.append(client.send_request("metadata", {})[1])
    assert client.in_flight == 6
    replies = exchange(client, server, *frames)
    assert [r.id for r in replies] == [0, 1, 2, 3, 4, 5]
    assert [r.api for r in replies] == ["create_topic"] * 5 + ["metadata"]
    assert [t["topic"] for t in replies[-1].result()["topics"]] == [f"t{i}" for i in range(5)]
    assert client.in_flight == 0
    assert server.broker.requests[0]["client"] == "test"


def test_request_level_error_is_returned_not_raised() -> None:
    client, server = pair()
    first = client.send_request("create_topic", {"topic": "t"})[1]
    second = client.send_request("create_topic", {"topic": "t"})[1]
    ok, dup = exchange(client, server, first, second)
    assert ok.result() == {}
    assert isinstance(dup.error, TopicAlreadyExists)
    with pytest.raises(TopicAlreadyExists):
        dup.result()


def test_acks_zero_produce_expects_no_answer() -> None:
    client, server = pair()
    exchange(client, server, client.send_request("create_topic", {"topic": "t"})[1])
    batch = encode_batch([(None, b"v", None, 1)])
    body = {
        "acks": 0,
        "timeout_ms": 100,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": batch}]}],
    }
    _, frame = client.send_request("produce", body, expect_response=False)
    assert client.in_flight == 0
    assert server.receive_data(frame) == b""
    assert server.broker.topics["t"][0].high_watermark == 1


def test_client_validates_before_sending() -> None:
    client, _ = pair()
    with pytest.raises(InvalidRequest, match=r"body\.topic"):
        client.send_request("create_topic", {"topic": 5})
    assert client.in_flight == 0


def test_answer_split_across_reads_is_reassembled() -> None:
    client, server = pair()
    out = server.receive_data(client.send_request("api_versions", {})[1])
    for i in range(len(out) - 1):
        client.receive_data(out[i : i + 1])
        assert client.next_reply() is None
    client.receive_data(out[-1:])
    assert client.next_reply().result()["server"] == "fake"


def test_wrong_correlation_id_is_a_protocol_error() -> None:
    client, _ = pair()
    client.send_request("api_versions", {})
    client.receive_data(encode_frame(ok_response(99, {}).to_wire()))
    with pytest.raises(BrokerProtocolError, match="id 99"):
        client.next_reply()


def test_unsolicited_answer_is_a_protocol_error() -> None:
    client, _ = pair()
    client.receive_data(encode_frame(ok_response(0, {}).to_wire()))
    with pytest.raises(BrokerProtocolError, match="no request pending"):
        client.next_reply()


def test_malformed_response_body_is_a_protocol_error() -> None:
    client, _ = pair()
    client.send_request("metadata", {})
    client.receive_data(encode_frame(ok_response(0, {"topics": "all"}).to_wire()))
    with pytest.raises(BrokerProtocolError, match=r"body\.topics"):
        client.next_reply()
    assert issubclass(BrokerProtocolError, UnknownServerError)


def test_oversize_response_is_refused() -> None:
    client = ClientConnection(max_response_bytes=10)
    client.send_request("api_versions", {})
    client.receive_data(encode_frame(ok_response(0, {"server": "x" * 20}).to_wire()))
    with pytest.raises(BrokerProtocolError, match="exceeds"):
        client.next_reply()


def test_server_half_answers_garbage_with_invalid_request_and_closes() -> None:
    client, server = pair()
    client.send_request("api_versions", {})
    client.receive_data(server.receive_data(b"\x00\x00\x00\x01\xc1"))
    assert server.closed
    # The broker could not read the id, so the error carries -1: a protocol error here.
    with pytest.raises(BrokerProtocolError):
        client.next_reply()


def test_well_formed_bad_requests_keep_the_connection() -> None:
    server = ServerConnection(FakeBroker())
    frames = [
        encode_frame({"api": "nope", "v": 1, "id": 0, "body": {}}),
        encode_frame({"api": "metadata", "v": 9, "id": 1, "body": {}}),
        encode_frame({"api": "metadata", "v": 1, "id": 2, "body": {"topics": 3}}),
        encode_frame({"api": "metadata", "v": 1, "id": 3, "body": {}}),
    ]
    decoder = FrameDecoder()
    decoder.feed(server.receive_data(b"".join(frames)))
    answers = [parse_response(obj) for obj in decoder]
    assert [(a.id, a.error) for a in answers] == [
        (0, "INVALID_REQUEST"),
        (1, "UNSUPPORTED_VERSION"),
        (2, "INVALID_REQUEST"),
        (3, None),
    ]
    assert "body.topics" in (answers[2].message or "")
    assert not server.closed


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("127.0.0.1:9092", ("127.0.0.1", 9092)),
        ("localhost", ("localhost", 9092)),
        ("[::1]:19092", ("::1", 19092)),
        ("[::1]", ("::1", 9092)),
        (" host:0 ", ("host", 0)),
        ("::1", ("::1", 9092)),
    ],
)
def test_parse_address(text: str, expected: tuple[str, int]) -> None:
    assert parse_address(text) == expected


@pytest.mark.parametrize("text", [":9092", "host:port", "host:70000", "[::1", "host:", "[::1]x"])
def test_parse_address_rejects_nonsense(text: str) -> None:
    with pytest.raises(ValueError, match="bad address"):
        parse_address(text)
