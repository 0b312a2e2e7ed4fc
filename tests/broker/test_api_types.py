"""The generated request and answer types (protocol/api_types.py) against the schema
table, the validator and the dispatch table.

mypy checks the handlers against these types (`make lint`); these tests check, at run
time, that the types say what the validator and the handlers really do.
"""

from __future__ import annotations

import typing
from pathlib import Path
from typing import Any, get_args, get_type_hints, is_typeddict

import pytest

from broker.dispatch import HANDLERS
from protocol import api_types, build_api_types
from protocol.build_api_types import TARGET, render
from protocol.schemas import APIS, validate_request_body, validate_response_body
from tests.broker.typed_bodies import problems
from tests.protocol.test_schemas import MINIMAL_REQUESTS, MINIMAL_RESPONSES

ACL = {
    "principal": "User:alice",
    "host": "*",
    "resource_type": "Topic",
    "resource_name": "t",
    "pattern_type": "Literal",
    "operation": "Read",
    "permission": "Allow",
}

# A request for every API with its required keys only, so validation fills in every
# default (the core APIs' from tests/protocol/test_schemas.py); `unknown` is dropped by
# validation (docs/protocol.md §2).
SAMPLES: dict[str, Any] = {
    **MINIMAL_REQUESTS,
    "commit_offsets": {
        "group": "g",
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "offset": 3}]}],
    },
    "fetch_offsets": {"group": "g", "topics": [{"topic": "t"}]},
    "explain_retention": {"topic": "t"},
    "init_producer_id": {},
    "join_group": {
        "group": "g",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": memoryview(b"meta")}],
        "session_timeout_ms": 10_000,
    },
    "sync_group": {"group": "g", "member_id": "m", "generation": 1},
    "heartbeat": {"group": "g", "member_id": "m", "generation": 1},
    "leave_group": {"group": "g", "members": [{}]},
    "list_groups": {},
    "list_transactions": {"transactional_ids": ["tx"], "states": ["Ongoing"]},
    "describe_groups": {"groups": ["g"]},
    "delete_groups": {"groups": ["g"]},
    "authenticate": {"mechanism": "PLAIN", "auth_bytes": b"\x00alice\x00secret"},
    "create_acls": {"acls": [ACL]},
    "describe_acls": {},
    "delete_acls": {"filters": [{}, {"principal": "User:alice"}]},
    "remote_segments": {"topic": "t", "partitions": [{"partition": 0}]},
}


def test_the_generated_module_is_what_the_schema_table_renders() -> None:
    assert TARGET.read_text(encoding="utf-8") == render(), (
        "protocol/api_types.py is stale: run `python -m protocol.build_api_types`"
    )


def test_check_fails_on_a_stale_module_until_it_is_rewritten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "api_types.py"
    target.write_text(render().replace("BinIn = ", "BinIn = str | "), encoding="utf-8")
    monkeypatch.setattr(build_api_types, "TARGET", target)
    assert build_api_types.main(["--check"]) == 1
    assert build_api_types.main([]) == 0
    assert target.read_text(encoding="utf-8") == render()
    assert build_api_types.main(["--check"]) == 0


def test_every_api_of_the_dispatch_table_has_a_request_and_an_answer_type() -> None:
    assert set(api_types.API_TYPES) == set(HANDLERS) == set(SAMPLES)
    for api, (request, answer) in api_types.API_TYPES.items():
        assert is_typeddict(request), api
        assert is_typeddict(answer), api


@pytest.mark.parametrize("api", sorted(SAMPLES))
def test_a_validated_request_has_the_shape_of_its_type(api: str) -> None:
    request_type, _ = api_types.API_TYPES[api]
    body = validate_request_body(api, {**SAMPLES[api], "unknown": 1})
    assert problems(body, request_type) == []
    # Every key of a validated body is there (defaults filled in): all are required.
    assert request_type.__required_keys__ == set(body)


@pytest.mark.parametrize("api", sorted(MINIMAL_RESPONSES))
def test_a_minimal_answer_has_the_shape_of_its_type(api: str) -> None:
    """What a handler may leave out (keys with defaults) its answer type leaves out too."""
    _, answer_type = api_types.API_TYPES[api]
    assert problems(MINIMAL_RESPONSES[api], answer_type) == []
    assert problems(validate_response_body(api, MINIMAL_RESPONSES[api]), answer_type) == []


@pytest.mark.parametrize("api", sorted(APIS))
def test_an_answer_type_leaves_out_exactly_the_keys_with_defaults(api: str) -> None:
    _, answer_type = api_types.API_TYPES[api]
    fields = APIS[api].response.fields
    assert answer_type.__required_keys__ == {k for k, f in fields.items() if f.required}
    assert answer_type.__optional_keys__ == {k for k, f in fields.items() if not f.required}


@pytest.mark.parametrize("api", sorted(HANDLERS))
def test_every_handler_is_annotated_with_its_apis_types(api: str) -> None:
    """The table erases each row's types (`Handler`); this ties them back to the API."""
    request_type, answer_type = api_types.API_TYPES[api]
    hints = get_type_hints(HANDLERS[api])
    body_type = hints["body"]
    # The API's request type, or one that adds optional keys only (JoinGroupCall).
    assert body_type.__required_keys__ == request_type.__required_keys__
    assert body_type.__optional_keys__ >= request_type.__optional_keys__
    assert get_type_hints(body_type).items() >= get_type_hints(request_type).items()
    returned = hints["return"]
    answers = get_args(returned) if typing.get_origin(returned) is not None else (returned,)
    assert answer_type in answers, returned


def test_the_shape_check_catches_a_missing_an_unknown_and_a_wrong_key() -> None:
    body = validate_request_body("produce", SAMPLES["produce"])
    del body["topics"][0]["partitions"][0]["records"]
    body["topics"][0]["surprise"] = 1
    body["acks"] = 2
    assert sorted(problems(body, api_types.ProduceRequest)) == [
        "body.acks: 2 not in (-1, 0, 1)",
        "body.topics[0].partitions[0].records: missing",
        "body.topics[0].surprise: not a key of ProduceTopic",
    ]
