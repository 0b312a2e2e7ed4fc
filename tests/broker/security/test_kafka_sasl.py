"""Kafka's SaslHandshake/SaslAuthenticate adapters (broker/kafka/security.py) with
kafka-python's own request classes and SCRAM client, on a real broker context."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from broker.context import ConnectionState
from broker.dispatch import handler_for
from broker.kafka.call import KafkaCall
from broker.kafka.registry import KAFKA_HANDLERS
from broker.security.listeners import SecurityProtocol
from broker.security.session import Session, set_session
from harness.kafka_python import kp_class
from protocol.errors import SaslAuthenticationFailed
from protocol.kafka import KafkaFrameDecoder, decode_request, encode_response
from protocol.kafka.codec import APIS_BY_KEY
from protocol.kafka.messages import SASL_AUTHENTICATE, SASL_HANDSHAKE
from tests.broker.security.conftest import add_user

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    from kafka.net.sasl.scram import SaslMechanismScram

SASL = "listeners=SASL_PLAINTEXT://127.0.0.1:0"


async def _ask(ctx: Any, api_key: int, version: int, **fields: Any) -> Any:
    """Encode with kafka-python, run our adapter, decode our answer with kafka-python."""
    message = kp_class(api_key, True)[version](**fields)
    message.with_header(correlation_id=7, client_id="kafka-python")
    return await _answer(ctx, bytes(message.encode(header=True, framed=True)), api_key, version)


async def _answer(ctx: Any, framed: bytes, api_key: int, version: int) -> Any:
    """Run our adapter on one framed request; its answer decoded with kafka-python."""
    decoder = KafkaFrameDecoder()
    decoder.feed(framed)
    request = decode_request(next(iter(decoder)))
    conn = ConnectionState(conn_id=1, peer="127.0.0.1:1")
    answer = await KAFKA_HANDLERS[api_key](KafkaCall(ctx, conn, request))
    frame = encode_response(APIS_BY_KEY[api_key], version, 7, answer)
    return kp_class(api_key, False)[version].decode(frame[8:])  # size + correlation id


def _session() -> Session:
    session = Session(SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", authenticated=False)
    set_session(session)
    return session


@pytest.mark.parametrize("version", [0, 1])
async def test_kafka_python_scram_logs_in(
    secured_broker: Any, tmp_path: Path, version: int
) -> None:
    add_user(tmp_path / "data", "alice", "pw")
    async with secured_broker(SASL) as handle:
        ctx = handle.context
        refused = _session()
        with pytest.raises(SaslAuthenticationFailed):  # nothing else before the login
            await handler_for("metadata")(ctx, {"topics": None})
        assert refused.close_requested.is_set()
        session = _session()  # a new connection
        answer = await _ask(ctx, SASL_HANDSHAKE.key, 1, mechanism="SCRAM-SHA-512")
        assert answer.error_code == 0
        assert answer.mechanisms == ["SCRAM-SHA-256", "SCRAM-SHA-512"]
        client = SaslMechanismScram(
            sasl_plain_username="alice", sasl_plain_password="pw", sasl_mechanism="SCRAM-SHA-512"
        )
        while not client.is_done():
            answer = await _ask(ctx, SASL_AUTHENTICATE.key, version, auth_bytes=client.auth_bytes())
            assert answer.error_code == 0, answer.error_message
            client.receive(answer.auth_bytes)  # checks our server signature
        assert session.authenticated and session.principal == "User:alice"
        assert await handler_for("metadata")(ctx, {"topics": None}) == {"topics": []}


async def test_wrong_password_unknown_mechanism_and_no_handshake(
    secured_broker: Any, tmp_path: Path
) -> None:
    add_user(tmp_path / "data", "alice", "pw")
    async with secured_broker(SASL, "connection.failed.authentication.delay.ms=0") as handle:
        ctx = handle.context
        session = _session()
        answer = await _ask(ctx, SASL_AUTHENTICATE.key, 1, auth_bytes=b"n,,n=alice,r=abc")
        assert answer.error_code == 34  # ILLEGAL_SASL_STATE: no handshake yet
        answer = await _ask(ctx, SASL_HANDSHAKE.key, 1, mechanism="GSSAPI")
        assert (answer.error_code, answer.mechanisms) == (33, ["SCRAM-SHA-256", "SCRAM-SHA-512"])
        session = _session()
        await _ask(ctx, SASL_HANDSHAKE.key, 1, mechanism="SCRAM-SHA-256")
        client = SaslMechanismScram(
            sasl_plain_username="alice", sasl_plain_password="bad", sasl_mechanism="SCRAM-SHA-256"
        )
        first = await _ask(ctx, SASL_AUTHENTICATE.key, 1, auth_bytes=client.auth_bytes())
        client.receive(first.auth_bytes)
        final = await _ask(ctx, SASL_AUTHENTICATE.key, 1, auth_bytes=client.auth_bytes())
        assert final.error_code == 58 and "invalid credentials" in final.error_message
        assert session.close_requested.is_set() and not session.authenticated


async def test_handshake_on_a_listener_without_sasl(secured_broker: Any) -> None:
    async with secured_broker() as handle:
        set_session(Session(SecurityProtocol.PLAINTEXT, "127.0.0.1"))
        answer = await _ask(handle.context, SASL_HANDSHAKE.key, 1, mechanism="PLAIN")
        assert answer.error_code == 34


async def test_kafka_acl_apis_with_kafka_python_classes(secured_broker: Any) -> None:
    """CreateAcls/DescribeAcls/DeleteAcls v1 as kafka-python encodes them (kafka-acls' APIs)."""
    async with secured_broker("authorizer=on", "super.users=User:ANONYMOUS") as handle:
        ctx = handle.context
        set_session(Session(SecurityProtocol.PLAINTEXT, "127.0.0.1"))
        creation = {
            "resource_type": 2,  # Topic
            "resource_name": "orders-",
            "resource_pattern_type": 4,  # Prefixed
            "principal": "User:alice",
            "host": "*",
            "operation": 3,  # Read
            "permission_type": 3,  # Allow
        }
        unsupported = {**creation, "resource_type": 6}  # DelegationToken: not here
        as_struct = kp_class(30, True)[1].AclCreation
        created = await _ask(
            ctx, 30, 1, creations=[as_struct(**c) for c in (creation, unsupported)]
        )
        assert [r.error_code for r in created.results] == [0, 42]
        found = await _ask(
            ctx, 29, 1,
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter="User:alice", host_filter=None, operation=1, permission_type=1,
        )  # fmt: skip
        assert found.error_code == 0
        (resource,) = found.resources
        assert (resource.resource_type, resource.resource_name, resource.pattern_type) == (
            2,
            "orders-",
            4,
        )
        assert [(a.principal, a.operation, a.permission_type) for a in resource.acls] == [
            ("User:alice", 3, 3)
        ]
        deleted = await _ask(
            ctx, 31, 1,
            filters=[kp_class(31, True)[1].DeleteAclsFilter(
                resource_type_filter=2, resource_name_filter="orders-",
                pattern_type_filter=4, principal_filter=None, host_filter=None,
                operation=1, permission_type=1,
            )],
        )  # fmt: skip
        (result,) = deleted.filter_results
        assert result.error_code == 0 and [m.resource_name for m in result.matching_acls] == [
            "orders-"
        ]
        set_session(Session(SecurityProtocol.PLAINTEXT, "127.0.0.1", principal="User:bob"))
        denied = await _ask(
            ctx, 29, 1,
            resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
            principal_filter=None, host_filter=None, operation=1, permission_type=1,
        )  # fmt: skip
        assert denied.error_code == 31  # CLUSTER_AUTHORIZATION_FAILED


# What kafka-acls.sh 4.4.0 sent for `--list --topic orders-eu --resource-pattern-type
# match` (captured through a relay): DescribeAcls v1, correlation id 5, client id
# adminclient-1; Topic, "orders-eu", MATCH, any principal, host, operation, permission.
JAVA_DESCRIBE_ACLS_MATCH = bytes.fromhex(
    "0000002a001d000100000005000d61646d696e636c69656e742d310200096f72646572732d657502ffffffff0101"
)


async def test_kafka_acls_list_with_pattern_type_match(secured_broker: Any) -> None:
    """`kafka-acls --list --topic orders-eu --resource-pattern-type match` sends a
    DescribeAcls filter with MATCH (2): every ACL that applies to the topic, i.e. its
    literal name, the literal wildcard and each prefix of it (was INVALID_REQUEST)."""
    async with secured_broker("authorizer=on", "super.users=User:ANONYMOUS") as handle:
        ctx = handle.context
        set_session(Session(SecurityProtocol.PLAINTEXT, "127.0.0.1"))
        patterns = [("orders-eu", 3), ("orders-", 4), ("*", 3), ("orders", 3), ("other-", 4)]
        as_struct = kp_class(30, True)[1].AclCreation
        created = await _ask(
            ctx, 30, 1,
            creations=[
                as_struct(
                    resource_type=2, resource_name=name, resource_pattern_type=pattern,
                    principal="User:alice", host="*", operation=3, permission_type=3,
                )
                for name, pattern in patterns
            ],
        )  # fmt: skip
        assert [r.error_code for r in created.results] == [0] * len(patterns)
        java = await _answer(ctx, JAVA_DESCRIBE_ACLS_MATCH, 29, 1)
        assert java.error_code == 0
        assert sorted((r.resource_name, r.pattern_type) for r in java.resources) == [
            ("*", 3),
            ("orders-", 4),
            ("orders-eu", 3),
        ]
        match = {"resource_type_filter": 2, "resource_name_filter": "orders-eu"}
        match |= {"pattern_type_filter": 2, "principal_filter": None, "host_filter": None}
        match |= {"operation": 1, "permission_type": 1}
        found = await _ask(ctx, 29, 1, **match)
        assert found.error_code == 0
        assert sorted((r.resource_name, r.pattern_type) for r in found.resources) == [
            ("*", 3),
            ("orders-", 4),
            ("orders-eu", 3),
        ]
        deleted = await _ask(ctx, 31, 1, filters=[kp_class(31, True)[1].DeleteAclsFilter(**match)])
        (result,) = deleted.filter_results
        assert result.error_code == 0
        assert sorted(m.resource_name for m in result.matching_acls) == [
            "*",
            "orders-",
            "orders-eu",
        ]
        left = await _ask(
            ctx, 29, 1, **{**match, "resource_name_filter": None, "pattern_type_filter": 1}
        )
        assert sorted(r.resource_name for r in left.resources) == ["orders", "other-"]
