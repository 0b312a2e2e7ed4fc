"""Error messages name what the peer sent in msgpack's terms and never end empty
(issue 23, minor findings), over a real in-process broker."""

from __future__ import annotations

import msgpack
import pytest

from broker.server import BrokerHandle
from protocol.framing import LENGTH
from tests.broker.rawconn import RawConn


async def _answer_to(handle: BrokerHandle, frame_body: bytes) -> dict:
    conn = await RawConn.open(handle)
    async with conn.stream:
        await conn.stream.send_all(LENGTH.pack(len(frame_body)) + frame_body)
        answer = await conn.recv()
    assert answer is not None
    return answer


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param([1, 2], "got array", id="array"),
        pytest.param(b"x", "got bin", id="bin"),
        pytest.param(None, "got nil", id="nil"),
        pytest.param(1.5, "got float", id="float"),
    ],
)
async def test_a_body_of_the_wrong_type_is_named_in_msgpack_terms(
    inprocess_broker: BrokerHandle, body: object, expected: str
) -> None:
    envelope = {"api": "metadata", "v": 1, "id": 7, "body": body}
    answer = await _answer_to(inprocess_broker, msgpack.packb(envelope, use_bin_type=True))
    assert answer["error"] == "INVALID_REQUEST"
    assert answer["message"].endswith(expected), answer["message"]
    assert "tuple" not in answer["message"]


@pytest.mark.parametrize(
    ("frame_body", "expected"),
    [
        pytest.param(b"\xc1", "0xc1", id="reserved-type-byte"),
        pytest.param(b"\x91" * 5000 + b"\x01", "nest", id="nesting-bomb"),
        pytest.param(b"\x92\x01", "incomplete", id="truncated"),
        pytest.param(b"\x01\x02", "extra", id="extra-data"),
    ],
)
async def test_an_undecodable_frame_says_why(
    inprocess_broker: BrokerHandle, frame_body: bytes, expected: str
) -> None:
    answer = await _answer_to(inprocess_broker, frame_body)
    assert answer["error"] == "INVALID_REQUEST"
    message = answer["message"]
    assert not message.rstrip().endswith(":"), message
    assert expected in message.lower(), message
