"""Every API of both protocols declares what it needs, and one that does not is refused.

The declarations are the rows of broker/dispatch.py's `APIS` and of the Kafka family
modules' `HANDLERS` (joined by broker/kafka/registry.py). The refusal tests register
a real extra handler (a row without a declaration) and ask it on a real broker.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import trio

from broker import dispatch
from broker.authz.gate import NativeApi
from broker.context import ConnectionState
from broker.kafka import registry
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall
from broker.kafka.registry import KAFKA_APIS, KAFKA_HANDLERS
from broker.security.acl import ANONYMOUS, Operation, ResourceType
from broker.security.listeners import SecurityProtocol
from broker.security.requires import UNDECLARED, Requires, Right, each_topic
from broker.security.session import Session, set_session
from harness.kafka_python import kp_class
from protocol.errors import ClusterAuthorizationFailed, SaslAuthenticationFailed
from protocol.kafka.codec import decode_request
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import DESCRIBE_CLUSTER
from protocol.offsets_schema import fetch_offsets
from tests.broker.security.conftest import add_user
from tests.broker.security.test_kafka_acl_matrix import (
    ROWS,
    SETTINGS,
    KafkaWire,
    _login,
    _prepare,
    _users,
)
from tests.broker.security.test_sasl_acl_inprocess import AUTHZ, address, user
from tidelog.aio import open_client

CLUSTER_DENIED = ERRORS_BY_NAME["CLUSTER_AUTHORIZATION_FAILED"].code
ILLEGAL_SASL_STATE = ERRORS_BY_NAME["ILLEGAL_SASL_STATE"].code
SASL_FAILED = ERRORS_BY_NAME["SASL_AUTHENTICATION_FAILED"].code


def undeclared_apis() -> list[str]:
    """Every registered API of either protocol without a declaration of its own."""
    kafka = [f"kafka:{key}" for key in registry.undeclared(KAFKA_APIS)]
    return dispatch.undeclared() + kafka


def test_every_registered_api_declares_what_it_needs() -> None:
    assert undeclared_apis() == []
    assert set(dispatch.APIS) == set(dispatch.HANDLERS)
    # what the Kafka connection runs is exactly the declared rows, each behind the gate
    assert set(KAFKA_HANDLERS) == set(KAFKA_APIS)
    for key, row in KAFKA_APIS.items():
        assert all(dispatch.APIS[name].requires is not UNDECLARED for name in row.via), key


def test_a_row_without_a_declaration_is_found() -> None:
    async def extra(call: KafkaCall) -> KafkaAnswer:
        return {}

    family = ModuleType("extra_family")
    family.HANDLERS = {DESCRIBE_CLUSTER.key: KafkaApi(extra)}  # type: ignore[attr-defined]
    assert registry.undeclared(registry.join((family,))) == [DESCRIBE_CLUSTER.key]


async def test_a_native_api_registered_without_a_declaration_is_refused(
    secured_broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A handler in the table without a row of `APIS`: CLUSTER_AUTHORIZATION_FAILED
    for anyone but a super user, even naming a group its caller may read; before a
    login, refused as every API is."""
    ran: list[Any] = []

    async def future_api(ctx: Any, body: Any) -> Any:
        ran.append(body)
        return {}

    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    add_user(data, "dave", "pw-dave")
    monkeypatch.setitem(dispatch.HANDLERS, "future_api", future_api)
    assert dispatch.undeclared() == ["future_api"]
    async with secured_broker(*AUTHZ) as handle:
        session = Session(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", "User:dave")
        set_session(session)
        guarded = dispatch.handler_for("future_api")
        with pytest.raises(ClusterAuthorizationFailed) as refused:
            await guarded(handle.context, {})
        assert refused.value.code == "CLUSTER_AUTHORIZATION_FAILED"
        with pytest.raises(ClusterAuthorizationFailed):
            await guarded(handle.context, {"group": "g"})
        assert ran == []
        session.principal = "User:admin"
        assert await guarded(handle.context, {}) == {}
        session.principal, session.authenticated = ANONYMOUS, False
        with pytest.raises(SaslAuthenticationFailed):
            await guarded(handle.context, {})
        assert session.close_requested.is_set()
        assert len(ran) == 1


async def test_a_kafka_api_registered_without_a_declaration_is_refused(
    secured_broker: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A family row without `requires` or `via`, served on the wire: 31 for bob (the
    adapter never runs), the adapter's answer for admin, a super user."""
    ran: list[str] = []

    async def describe_cluster_again(call: KafkaCall) -> KafkaAnswer:
        ran.append(call.request.api.name)
        return {
            "throttle_time_ms": 0, "error_code": 0, "error_message": None,
            "cluster_id": "extra", "controller_id": 1, "brokers": [],
            "cluster_authorized_operations": -(2**31),
        }  # fmt: skip

    family = ModuleType("extra_family")
    family.HANDLERS = {  # type: ignore[attr-defined]
        DESCRIBE_CLUSTER.key: KafkaApi(describe_cluster_again)
    }
    (row,) = registry.join((family,)).values()
    monkeypatch.setitem(KAFKA_HANDLERS, DESCRIBE_CLUSTER.key, registry.gated(row))
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        fields = {"include_cluster_authorized_operations": False}
        async with await _login(handle, "bob") as bob:
            denied = await bob.ask(DESCRIBE_CLUSTER.key, 0, **fields)
        assert denied.error_code == CLUSTER_DENIED
        assert ran == []
        async with await _login(handle, "admin") as admin:
            served = await admin.ask(DESCRIBE_CLUSTER.key, 0, **fields)
        assert (served.error_code, served.cluster_id, ran) == (0, "extra", ["DescribeCluster"])


async def test_an_adapter_may_check_only_the_rights_its_row_declares(
    secured_broker: Any,
) -> None:
    message = kp_class(DESCRIBE_CLUSTER.key, True)[0](include_cluster_authorized_operations=False)
    message.with_header(correlation_id=1, client_id="t")
    request = decode_request(bytes(message.encode(header=True, framed=True))[4:])
    async with secured_broker() as handle:
        row = KAFKA_APIS[DESCRIBE_CLUSTER.key]
        assert row.requires is not None
        conn = ConnectionState(conn_id=1, peer="127.0.0.1:1")
        declared = KafkaCall(handle.context, conn, request, row.requires)
        assert declared.permits(Right(Operation.DESCRIBE, ResourceType.CLUSTER), "kafka-cluster")
        with pytest.raises(RuntimeError, match="not declared"):
            declared.permits(Right(Operation.ALTER, ResourceType.CLUSTER), "kafka-cluster")


# --- before the login (issue 38 item 10) ------------------------------------------


@pytest.mark.parametrize("row", [r for r in ROWS if "(" not in r.api], ids=lambda r: r.api)
async def test_every_kafka_api_before_login_is_refused_alike(
    secured_broker: Any, tmp_path: Path, row: Any
) -> None:
    """Before a SASL login every Kafka API but ApiVersions is refused by the gate before
    its adapter runs: SASL_AUTHENTICATION_FAILED where the response has a top-level
    code, else the connection closes unanswered (Kafka closes it either way); never
    another code (OffsetCommit used to answer INVALID_REQUEST per partition). Each
    refusal is audited and counted under the Kafka API's name."""
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        wire = KafkaWire(await trio.open_tcp_stream(handle.host, handle.port))
        async with wire:
            with trio.fail_after(5):
                try:
                    answer = await wire.ask(row.key, row.version, **row.fields)
                except AssertionError as closed:
                    assert "closed" in str(closed)
                    answer = None
                if row.api == "ApiVersions":
                    assert answer is not None and answer.error_code == 0
                    return
                if answer is not None:
                    assert answer.error_code == SASL_FAILED
                assert await wire.stream.receive_some(100) == b""
        metric = handle.context.metrics.get("tidelog_authorization_denied")
        name = kp_class(row.key, True).__name__.removesuffix("Request")
        assert metric.labels(name)._value.get() == 1


async def test_offset_commit_before_login_is_not_invalid_request(
    secured_broker: Any, tmp_path: Path
) -> None:
    (row,) = [r for r in ROWS if r.api == "OffsetCommit"]
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        await _prepare(handle)
        async with KafkaWire(await trio.open_tcp_stream(handle.host, handle.port)) as wire:
            part = {"partition_index": 0, "committed_offset": 0, "committed_metadata": ""}
            fields = {**row.fields, "topics": [{"name": "orders", "partitions": [part]}]}
            with pytest.raises(AssertionError, match="closed"), trio.fail_after(5):
                await wire.ask(row.key, row.version, **fields)
        # and the commit did not happen: billing's offset is still the one admin committed
        async with open_client(address(handle), security=user("admin", "pw-admin", "PLAIN")) as c:
            committed = await c.call(fetch_offsets("billing", [("orders", 0)]))
        assert committed[("orders", 0)].offset == 1


async def test_a_second_sasl_authenticate_is_illegal_not_a_failed_login(
    secured_broker: Any, tmp_path: Path
) -> None:
    """Kafka answers ILLEGAL_SASL_STATE to a SaslAuthenticate after a successful one;
    it is no failed login: not counted, not audited, and the connection stays open."""
    _users(tmp_path / "data")
    async with secured_broker(*SETTINGS) as handle:
        async with await _login(handle, "alice") as alice:
            token = b"\0alice\0pw-alice"
            again = await alice.ask(36, 1, auth_bytes=token)
            assert again.error_code == ILLEGAL_SASL_STATE
            metadata = await alice.ask(3, 4, topics=None, allow_auto_topic_creation=False)
            assert metadata.topics == []  # still logged in, still served
        logins = handle.context.metrics.get("tidelog_authentications")
        assert logins.labels("PLAIN", "failure")._value.get() == 0
        assert logins.labels("PLAIN", "success")._value.get() == 1


def test_declarations_that_could_not_be_enforced_are_refused_at_import() -> None:
    """An `each` right with no shape to answer its denials, a topic right naming no
    body field, a right on an API served before the login: each a programming error."""

    async def handler(ctx: Any, body: Any) -> Any:
        return {}

    with pytest.raises(ValueError, match="shape"):
        NativeApi(handler, each_topic(Operation.READ))
    with pytest.raises(ValueError, match="body field"):
        Requires(whole=Right(Operation.READ, ResourceType.TOPIC))
    with pytest.raises(ValueError, match="before the login"):
        Requires(whole=Right(Operation.ALTER, ResourceType.CLUSTER), before_login=True)
    assert NativeApi(handler).requires is UNDECLARED
