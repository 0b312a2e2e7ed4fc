"""Issue 38 #9: an ACL binding that can never match is refused at every door.

A principal with surrounding whitespace (`User:bob `) or a host that is not a literal
IP address or `*` (`localhost`, `127.0.0.0/8`: the authorizer compares the client's
address as text) was stored, listed like a grant, and matched nobody. Kafka's
CreateAcls answers such a creation INVALID_REQUEST with a message, per creation;
msgpack `create_acls`, `tidelog acls add` and the store refuse them the same way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from broker.cli.main import main
from broker.security.acl import AclBinding, AclFilter
from broker.security.acl_store import AclStore
from protocol.kafka.errors import ERRORS_BY_NAME
from tests.broker.security.conftest import add_user
from tests.broker.security.test_kafka_acl_matrix import SETTINGS, _login
from tests.broker.security.test_sasl_acl_inprocess import AUTHZ, address, user
from tidelog.aio import open_client

INVALID_REQUEST = ERRORS_BY_NAME["INVALID_REQUEST"].code
# (principal, host, what the refusal names)
NEVER_MATCHING = [
    ("User:bob ", "*", "principal"),
    (" User:bob", "*", "principal"),
    ("User:", "*", "principal"),
    ("User:bob", "localhost", "host"),
    ("User:bob", "127.0.0.0/8", "host"),
    ("User:bob", " 10.0.0.1", "host"),
    ("User:bob", "0:0:0:0:0:0:0:1", "::1"),  # not the form a client address is compared in
]


def _binding(principal: str, host: str) -> dict[str, str]:
    return {
        "principal": principal,
        "host": host,
        "resource_type": "Topic",
        "resource_name": "orders",
        "pattern_type": "Literal",
        "operation": "Read",
        "permission": "Allow",
    }


@pytest.mark.parametrize(("principal", "host", "named"), NEVER_MATCHING)
def test_a_binding_that_can_never_match_is_refused(principal: str, host: str, named: str) -> None:
    with pytest.raises(ValueError, match=named):
        AclBinding.from_json(_binding(principal, host))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("name", "pattern"), [("orders ", "Literal"), ("a/b", "Prefixed"), ("x" * 250, "Literal")]
)
def test_a_topic_binding_no_topic_name_can_match_is_refused(name: str, pattern: str) -> None:
    entry = {**_binding("User:bob", "*"), "resource_name": name, "pattern_type": pattern}
    with pytest.raises(ValueError, match="never match a topic"):
        AclBinding.from_json(entry)  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["*", "10.0.0.1", "::1", "2001:db8::7"])
def test_literal_addresses_and_the_wildcard_are_accepted(host: str) -> None:
    assert AclBinding.from_json(_binding("User:CN=Jane Doe,O=Example", host)).host == host  # type: ignore[arg-type]


@pytest.mark.parametrize(("principal", "host", "named"), NEVER_MATCHING)
def test_cli_refuses_it_and_stores_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], principal: str, host: str, named: str
) -> None:
    argv = ["acls", "add", "--data-dir", str(tmp_path), "--allow-principal", principal]
    status = main([*argv, "--allow-host", host, "--operation", "Read", "--topic", "orders"])
    assert status == 1 and named in capsys.readouterr().err
    assert AclStore(tmp_path).bindings() == []


async def test_msgpack_create_acls_refuses_it_per_binding(
    secured_broker: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    good = _binding("User:bob", "127.0.0.1")
    admin_login = user("admin", "pw-admin")
    async with (
        secured_broker(*AUTHZ) as handle,
        open_client(address(handle), security=admin_login) as admin,
    ):
        wanted = [good, _binding("User:bob ", "*"), _binding("User:bob", "localhost")]
        answer = await admin.request("create_acls", {"acls": wanted})
    errors = [(r["error"], r["message"]) for r in answer["results"]]
    assert errors[0] == (None, None)
    assert [e for e, _ in errors[1:]] == ["INVALID_REQUEST", "INVALID_REQUEST"]
    assert "principal" in errors[1][1] and "host" in errors[2][1]
    assert AclStore(data).bindings() == [AclBinding.from_json(good)]  # type: ignore[arg-type]


def _creation(principal: str, host: str) -> dict[str, Any]:
    return {
        "resource_type": 2,  # Topic
        "resource_name": "orders",
        "resource_pattern_type": 3,  # Literal
        "principal": principal,
        "host": host,
        "operation": 3,  # Read
        "permission_type": 3,  # Allow
    }


async def test_kafka_create_acls_answers_invalid_request_per_creation(
    secured_broker: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    creations = [
        _creation("User:bob", "*"),
        _creation("User:bob ", "*"),
        _creation("User:bob", "127.0.0.0/8"),
    ]
    async with secured_broker(*SETTINGS) as handle, await _login(handle, "admin") as wire:
        answer = await wire.ask(30, 1, creations=creations)
    codes = [(r.error_code, r.error_message) for r in answer.results]
    assert codes[0] == (0, None)
    assert [c for c, _ in codes[1:]] == [INVALID_REQUEST, INVALID_REQUEST]
    assert "principal" in codes[1][1] and "host" in codes[2][1]
    assert [b.principal for b in AclStore(data).bindings()] == ["User:bob"]


def test_a_stored_binding_that_can_never_match_is_dropped_on_load(tmp_path: Path) -> None:
    """acls.json written before the check: the dead entry is neither listed nor applied
    (it matched nobody), and the next edit leaves it out of the file."""
    good = _binding("User:bob", "*")
    document = {"version": 1, "acls": [good, _binding("User:bob ", "*")]}
    (tmp_path / "acls.json").write_text(json.dumps(document))
    store = AclStore(tmp_path)
    assert store.bindings() == [AclBinding.from_json(good)]  # type: ignore[arg-type]
    assert len(store.authorizer().bindings) == 1
    store.remove(AclFilter(principal="User:bob"))
    assert json.loads((tmp_path / "acls.json").read_text())["acls"] == []
