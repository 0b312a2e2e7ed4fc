"""Envelopes: shape checks that name the offending key, ids for malformed requests."""

from __future__ import annotations

import pytest

from protocol.envelope import (
    UNKNOWN_ID,
    Request,
    Response,
    error_response,
    ok_response,
    parse_request,
    parse_response,
    request_id_of,
)
from protocol.errors import InvalidRequest, OffsetOutOfRange, TopicAlreadyExists

GOOD = {"api": "metadata", "v": 1, "id": 5, "body": {}}


def test_parse_request_round_trips_to_wire() -> None:
    request = parse_request({**GOOD, "client": "me"})
    assert request == Request(api="metadata", id=5, body={}, v=1, client="me")
    assert parse_request(request.to_wire()) == request


def test_unknown_keys_are_ignored() -> None:
    assert parse_request({**GOOD, "future": [1, 2]}).api == "metadata"


def test_client_key_is_omitted_when_absent() -> None:
    assert "client" not in Request(api="metadata", id=1).to_wire()


@pytest.mark.parametrize(
    ("obj", "key"),
    [
        ({"v": 1, "id": 1, "body": {}}, "'api'"),
        ({**GOOD, "api": 3}, "'api'"),
        ({**GOOD, "v": "1"}, "'v'"),
        ({**GOOD, "v": True}, "'v'"),
        ({**GOOD, "id": None}, "'id'"),
        ({**GOOD, "id": False}, "'id'"),
        ({**GOOD, "id": 2**63}, "'id'"),
        ({**GOOD, "body": []}, "'body'"),
        ({k: v for k, v in GOOD.items() if k != "body"}, "'body'"),
        ({**GOOD, "client": 7}, "'client'"),
        ({**GOOD, "client": "x" * 256}, "'client'"),
    ],
    ids=[
        "missing-api",
        "api-int",
        "v-str",
        "v-bool",
        "id-nil",
        "id-bool",
        "id-over-int64",
        "body-array",
        "missing-body",
        "client-int",
        "client-too-long",
    ],
)
def test_bad_envelope_names_the_key(obj: dict, key: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        parse_request(obj)
    assert key in info.value.message


@pytest.mark.parametrize("obj", [[1, 2], "api", None, 5], ids=["array", "str", "nil", "int"])
def test_non_map_request_is_invalid(obj: object) -> None:
    with pytest.raises(InvalidRequest, match="must be a map"):
        parse_request(obj)


def test_request_id_of_answers_malformed_requests_with_their_id() -> None:
    assert request_id_of({"id": 42, "api": 3}) == 42
    assert request_id_of({"id": True}) == UNKNOWN_ID
    assert request_id_of({"id": 2**64 - 1}) == UNKNOWN_ID
    assert request_id_of([1]) == UNKNOWN_ID


def test_responses_round_trip_and_raise_their_error() -> None:
    ok = ok_response(3, {"topics": []})
    assert parse_response(ok.to_wire()) == ok
    assert ok.raise_for_error() == {"topics": []}

    failed = error_response(4, TopicAlreadyExists("t exists"))
    wire = failed.to_wire()
    assert wire == {"id": 4, "error": "TOPIC_ALREADY_EXISTS", "message": "t exists", "body": None}
    with pytest.raises(TopicAlreadyExists, match="t exists"):
        parse_response(wire).raise_for_error()


def test_error_response_without_message_sends_nil() -> None:
    assert error_response(1, OffsetOutOfRange()).message is None


def test_unknown_error_code_from_a_newer_broker_stays_visible() -> None:
    response = Response(id=1, error="BRAND_NEW_CODE", message="hm")
    with pytest.raises(Exception, match="BRAND_NEW_CODE"):
        response.raise_for_error()


@pytest.mark.parametrize(
    "obj",
    [
        {"error": None, "body": {}},
        {"id": 1, "error": None, "body": None},
        {"id": 1, "error": 5, "body": None},
        {"id": 1, "error": "X", "message": b"m"},
        (1, 2),
    ],
    ids=["missing-id", "nil-body-without-error", "error-int", "message-bin", "array"],
)
def test_malformed_response_is_rejected(obj: object) -> None:
    with pytest.raises(InvalidRequest):
        parse_response(obj)
