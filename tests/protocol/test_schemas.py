"""Schemas: every API's request and response, validation messages with full paths."""

from __future__ import annotations

import pytest

from protocol.envelope import Request
from protocol.errors import InvalidRequest, InvalidTopic, UnsupportedVersion
from protocol.schemas import (
    API_VERSIONS,
    APIS,
    MAX_LIST_ITEMS,
    build_request,
    check_topic_name,
    validate_request,
    validate_request_body,
    validate_response_body,
)
from tests.integration.wire import CONTRACT_APIS

PROTOCOL_APIS = set(CONTRACT_APIS)

MINIMAL_REQUESTS = {
    "api_versions": {},
    "create_topic": {"topic": "t"},
    "delete_topic": {"topic": "t"},
    "metadata": {},
    "describe_configs": {"topic": "t"},
    "alter_configs": {"topic": "t"},
    "produce": {
        "acks": -1,
        "timeout_ms": 1000,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": b""}]}],
    },
    "fetch": {
        "max_wait_ms": 0,
        "min_bytes": 1,
        "max_bytes": 100,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": 0, "max_bytes": 9}]}],
    },
    "list_offsets": {
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "spec": "latest"}]}]
    },
    "offset_for_time": {
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "timestamp": 5}]}]
    },
    "delete_records": {"topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": -1}]}]},
}

MINIMAL_RESPONSES = {
    "api_versions": {"server": "tidelog", "version": "0.1.0", "apis": {"fetch": [1, 1]}},
    "create_topic": {},
    "delete_topic": {},
    "metadata": {"topics": [{"topic": "t", "error": "UNKNOWN_TOPIC_OR_PARTITION"}]},
    "describe_configs": {"configs": {"retention.ms": {"value": "1", "source": "default"}}},
    "alter_configs": {},
    "produce": {"topics": [{"topic": "t", "partitions": [{"partition": 0, "error": "X"}]}]},
    "fetch": {"topics": [{"topic": "t", "partitions": [{"partition": 0, "error": None}]}]},
    "list_offsets": {"topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": 3}]}]},
    "offset_for_time": {"topics": [{"topic": "t", "partitions": [{"partition": 0}]}]},
    "delete_records": {
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "low_watermark": 2}]}]
    },
}


def test_every_protocol_api_has_a_schema_at_version_1() -> None:
    # Extensions (e.g. explain_retention) may register more; §4's must all be there.
    assert set(APIS) >= PROTOCOL_APIS
    assert all(API_VERSIONS[api] == (1, 1) for api in PROTOCOL_APIS)


@pytest.mark.parametrize("api", sorted(PROTOCOL_APIS))
def test_minimal_request_and_response_validate(api: str) -> None:
    validate_request_body(api, MINIMAL_REQUESTS[api])
    validate_response_body(api, MINIMAL_RESPONSES[api])


def test_defaults_are_filled_and_unknown_keys_dropped() -> None:
    body = validate_request_body("create_topic", {"topic": "t", "extra": 1})
    # validate_only: an extension (docs/protocol.md), false unless asked for
    assert body == {"topic": "t", "partitions": 1, "configs": {}, "validate_only": False}
    assert validate_request_body("metadata", {}) == {"topics": None}
    assert validate_request_body("alter_configs", {"topic": "t"}) == {
        "topic": "t",
        "set": {},
        "delete": [],
        "validate_only": False,
    }


def test_default_containers_are_not_shared_between_calls() -> None:
    first = validate_request_body("create_topic", {"topic": "t"})
    first["configs"]["x"] = 1
    assert validate_request_body("create_topic", {"topic": "t"})["configs"] == {}


def test_tuples_from_the_decoder_come_back_as_lists() -> None:
    body = validate_request_body("metadata", {"topics": ("a", "b")})
    assert body == {"topics": ["a", "b"]}


def test_response_defaults_fill_nil_fields() -> None:
    body = validate_response_body("fetch", MINIMAL_RESPONSES["fetch"])
    [entry] = body["topics"][0]["partitions"]
    assert entry == {
        "partition": 0,
        "error": None,
        "message": None,
        "high_watermark": None,
        "log_start_offset": None,
        "records": b"",
        "local": None,  # only a local read's answer has one (docs/protocol.md §9)
        # only a read_committed answer has these (docs/protocol.md §9, transactions)
        "last_stable_offset": None,
        "aborted_transactions": None,
        "next_offset": None,
    }


def fetch_with_offset(offset: object) -> dict:
    body = MINIMAL_REQUESTS["fetch"]
    partition = {**body["topics"][0]["partitions"][0], "offset": offset}
    return {**body, "topics": [{"topic": "t", "partitions": [partition]}]}


@pytest.mark.parametrize(
    ("api", "body", "message"),
    [
        (
            "fetch",
            fetch_with_offset(True),
            "body.topics[0].partitions[0].offset: expected int64, got bool",
        ),
        (
            "fetch",
            fetch_with_offset(2**63),
            "body.topics[0].partitions[0].offset: 9223372036854775808 is out of range",
        ),
        ("fetch", fetch_with_offset(1.0), "offset: expected int64, got float"),
        ("fetch", {**MINIMAL_REQUESTS["fetch"], "local_read": 1}, "body.local_read: expected bool"),
        ("create_topic", {}, "body.topic: missing required key"),
        ("create_topic", {"topic": b"t"}, "body.topic: expected str, got bin"),
        ("create_topic", {"topic": "t", "partitions": 2**31}, "body.partitions: 2147483648"),
        ("create_topic", {"topic": "t", "configs": {"a": [1]}}, "body.configs['a']: expected str"),
        ("create_topic", {"topic": "t", "configs": []}, "body.configs: expected map, got array"),
        ("produce", {**MINIMAL_REQUESTS["produce"], "acks": 2}, "body.acks: must be one of"),
        ("produce", {**MINIMAL_REQUESTS["produce"], "acks": True}, "body.acks: expected"),
        ("produce", {**MINIMAL_REQUESTS["produce"], "timeout_ms": -1}, "body.timeout_ms: -1"),
        (
            "produce",
            {
                **MINIMAL_REQUESTS["produce"],
                "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": "s"}]}],
            },
            "body.topics[0].partitions[0].records: expected bin, got str",
        ),
        (
            "list_offsets",
            {"topics": [{"topic": "t", "partitions": [{"partition": 0, "spec": "first"}]}]},
            "body.topics[0].partitions[0].spec: must be one of",
        ),
        ("metadata", {"topics": "t"}, "body.topics: expected array, got str"),
        ("metadata", {"topics": [1]}, "body.topics[0]: expected str, got int"),
        ("alter_configs", {"topic": "t", "delete": [None]}, "body.delete[0]: expected str"),
        ("api_versions", [], "body: expected map, got array"),
    ],
    ids=lambda value: value if isinstance(value, str) and " " not in value else None,
)
def test_invalid_bodies_name_the_offending_key(api: str, body: object, message: str) -> None:
    with pytest.raises(InvalidRequest) as info:
        validate_request_body(api, body)
    assert message in info.value.message


def test_list_size_is_bounded() -> None:
    with pytest.raises(InvalidRequest, match=r"body\.topics: more than"):
        validate_request_body("metadata", {"topics": ["t"] * (MAX_LIST_ITEMS + 1)})


def test_int64_bounds_are_inclusive() -> None:
    for offset in (-(2**63), 2**63 - 1):
        validate_request_body("fetch", fetch_with_offset(offset))
    with pytest.raises(InvalidRequest):
        validate_request_body("fetch", fetch_with_offset(-(2**63) - 1))


def test_unknown_api_and_unsupported_version() -> None:
    with pytest.raises(InvalidRequest, match="unknown api 'nope'"):
        validate_request(Request(api="nope", id=1))
    with pytest.raises(UnsupportedVersion, match=r"metadata supports versions 1\.\.1, got 2"):
        validate_request(Request(api="metadata", id=1, v=2))


def test_malformed_response_names_the_key() -> None:
    with pytest.raises(InvalidRequest, match=r"body.topics\[0\].partitions\[0\].partition"):
        validate_response_body(
            "produce", {"topics": [{"topic": "t", "partitions": [{"partition": "0"}]}]}
        )


def test_build_request_validates_before_anything_is_sent() -> None:
    request = build_request("create_topic", {"topic": "t"}, 9, client="cli")
    assert request.to_wire() == {
        "api": "create_topic",
        "v": 1,
        "id": 9,
        "client": "cli",
        "body": {"topic": "t", "partitions": 1, "configs": {}, "validate_only": False},
    }
    with pytest.raises(InvalidRequest, match=r"body\.partitions"):
        build_request("create_topic", {"topic": "t", "partitions": "2"}, 1)


@pytest.mark.parametrize("name", ["a", "A.b_c-9", "x" * 249, "..."])
def test_legal_topic_names(name: str) -> None:
    check_topic_name(name)


@pytest.mark.parametrize(
    "name",
    ["", ".", "..", "x" * 250, "a/b", "../etc", "tópico", "a b", "a\n", "a\x00"],
    ids=["empty", "dot", "dotdot", "long", "slash", "traversal", "unicode", "space", "nl", "nul"],
)
def test_illegal_topic_names(name: str) -> None:
    with pytest.raises(InvalidTopic):
        check_topic_name(name)
