"""SASL over msgpack and ACL enforcement, against a real in-process broker (serve_broker).

Clients are our own trio client (tidelog.aio) and raw frames (tests/integration/wire),
so what is checked is the broker's behaviour on the wire.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from broker.security.acl import AclBinding
from broker.security.acl_store import AclStore
from protocol.auth_schema import authenticate
from protocol.batch import encode_batch
from protocol.connection import ClientConnection
from protocol.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    IllegalSaslState,
    SaslAuthenticationFailed,
    SecurityDisabled,
    TopicAuthorizationFailed,
    UnsupportedSaslMechanism,
)
from protocol.offsets_schema import commit_offsets, fetch_offsets
from tests.broker.security.conftest import add_user
from tidelog.aio import open_client
from tidelog.security import Security

SASL = "listeners=SASL_PLAINTEXT://127.0.0.1:0"
ALL_MECHANISMS = "sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"


def user(name: str, password: str, mechanism: str = "SCRAM-SHA-512") -> Security:
    return Security(
        security_protocol="SASL_PLAINTEXT",
        sasl_mechanism=mechanism,
        sasl_plain_username=name,
        sasl_plain_password=password,
    )


def address(handle: Any) -> str:
    return f"{handle.host}:{handle.port}"


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_each_mechanism_logs_in_and_serves(
    secured_broker: Any, tmp_path: Path, mechanism: str
) -> None:
    add_user(tmp_path / "data", "alice", "pw-alice")
    async with secured_broker(SASL, ALL_MECHANISMS) as handle:
        async with open_client(address(handle), security=user("alice", "pw-alice", mechanism)) as c:
            await c.create_topic("orders")
            assert [t["topic"] for t in await c.metadata()] == ["orders"]
        metric = handle.context.metrics.get("tidelog_authentications")
        assert metric.labels(mechanism, "success")._value.get() == 1


async def test_wrong_password_is_refused_after_the_delay_and_closed(
    secured_broker: Any, tmp_path: Path
) -> None:
    add_user(tmp_path / "data", "alice", "right")
    sets = (SASL, "connection.failed.authentication.delay.ms=300")
    async with secured_broker(*sets) as handle:
        started = trio.current_time()
        with pytest.raises(SaslAuthenticationFailed, match="invalid credentials"):
            async with open_client(address(handle), security=user("alice", "wrong")):
                pass
        assert trio.current_time() - started >= 0.3
        with pytest.raises(SaslAuthenticationFailed):  # unknown user: the same answer
            async with open_client(address(handle), security=user("mallory", "right")):
                pass
        async with open_client(address(handle), security=user("alice", "right")) as c:
            await c.api_versions()  # the broker serves the others
        metric = handle.context.metrics.get("tidelog_authentications")
        assert metric.labels("SCRAM-SHA-512", "failure")._value.get() == 2


async def _ask(stream: trio.abc.Stream, conn: ClientConnection, api: str, body: Any) -> Any:
    """One request over a raw stream; the Reply."""
    _, frame = conn.send_request(api, body)
    await stream.send_all(frame)
    while (reply := conn.next_reply()) is None:
        data = await stream.receive_some(65536)
        assert data, "connection closed before the answer"
        conn.receive_data(data)
    return reply


async def test_requests_before_authentication_are_refused_and_the_connection_closed(
    secured_broker: Any,
) -> None:
    async with secured_broker(SASL) as handle:
        stream = await trio.open_tcp_stream(handle.host, handle.port)
        conn = ClientConnection(client_id="raw")
        versions = (await _ask(stream, conn, "api_versions", {})).result()
        assert "authenticate" in versions["apis"]  # allowed before authentication
        reply = await _ask(stream, conn, "metadata", {"topics": None})
        assert reply.error.code == "SASL_AUTHENTICATION_FAILED"
        with trio.fail_after(5):  # then the broker closes its side
            assert await stream.receive_some(100) == b""
        await stream.aclose()


def open_client_over(stream: trio.abc.Stream) -> Any:
    from tidelog.aio import stream_client

    return stream_client(stream)


async def test_unsupported_mechanism_names_the_enabled_ones_and_keeps_the_connection(
    secured_broker: Any,
) -> None:
    async with secured_broker(SASL, "sasl.enabled.mechanisms=SCRAM-SHA-256") as handle:
        stream = await trio.open_tcp_stream(handle.host, handle.port)
        async with open_client_over(stream) as c:
            with pytest.raises(UnsupportedSaslMechanism, match="SCRAM-SHA-256"):
                await c.call(authenticate("PLAIN", b"\0alice\0pw"))
            await c.api_versions()


async def test_authenticate_on_a_plaintext_listener_is_illegal(secured_broker: Any) -> None:
    async with secured_broker() as handle, open_client(address(handle)) as c:
        with pytest.raises(IllegalSaslState):
            await c.call(authenticate("PLAIN", b"\0alice\0pw"))


# --- ACLs ------------------------------------------------------------------------


def grant(data_dir: Path, *texts: str) -> None:
    """'Allow User:alice Read Topic Literal orders' lines into acls.json."""
    bindings = []
    for text in texts:
        permission, principal, operation, rtype, pattern, name = text.split()
        bindings.append(
            AclBinding.parse(principal, "*", rtype, name, pattern, operation, permission)
        )
    AclStore(data_dir).add(bindings)


AUTHZ = (SASL, "authorizer=on", "super.users=User:admin")


def _records() -> bytes:
    return encode_batch([(b"k", b"v", (), 1_700_000_000_000)])


async def test_acl_matrix_over_msgpack(secured_broker: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    for name in ("admin", "alice", "bob"):
        add_user(data, name, f"pw-{name}")
    grant(
        data,
        "Allow User:alice Write Topic Prefixed orders",
        "Allow User:alice Read Topic Prefixed orders",
        "Allow User:alice Delete Topic Literal orders",
        "Allow User:alice AlterConfigs Topic Literal orders",
        "Allow User:alice Read Group Literal billing",
        "Deny User:alice Read Topic Literal orders-secret",
        "Allow User:bob Describe Topic Literal orders",
    )
    async with secured_broker(*AUTHZ) as handle:
        async with open_client(address(handle), security=user("admin", "pw-admin")) as admin:
            for topic in ("orders", "orders-secret", "payments"):
                await admin.create_topic(topic)
        alice_sec, bob_sec = user("alice", "pw-alice"), user("bob", "pw-bob")
        async with (
            open_client(address(handle), security=alice_sec) as alice,
            open_client(address(handle), security=bob_sec) as bob,
        ):
            # produce: Write on the topic; the denied topic fails beside the allowed one
            answer = await alice.request(
                "produce",
                {
                    "acks": 1,
                    "timeout_ms": 1000,
                    "topics": [
                        {
                            "topic": "orders",
                            "partitions": [{"partition": 0, "records": _records()}],
                        },
                        {
                            "topic": "payments",
                            "partitions": [{"partition": 0, "records": _records()}],
                        },
                    ],
                },
            )
            errors = {t["topic"]: t["partitions"][0]["error"] for t in answer["topics"]}
            assert errors == {"orders": None, "payments": "TOPIC_AUTHORIZATION_FAILED"}
            await alice.produce("orders-secret", 0, _records())  # Write: allowed
            with pytest.raises(TopicAuthorizationFailed):
                await bob.produce("orders", 0, _records())
            # fetch: Read; deny wins on orders-secret despite the prefixed allow
            assert len((await alice.fetch("orders", 0, 0)).records) > 0
            with pytest.raises(TopicAuthorizationFailed):
                await alice.fetch("orders-secret", 0, 0)
            with pytest.raises(TopicAuthorizationFailed):
                await bob.fetch("orders", 0, 0)
            # list_offsets: Describe (implied by Read for alice, explicit for bob)
            assert await alice.list_offsets("orders", 0, "latest") is not None
            assert await bob.list_offsets("orders", 0, "latest") is not None
            with pytest.raises(TopicAuthorizationFailed):
                await bob.list_offsets("payments", 0, "latest")
            # metadata: hides what a principal may not describe
            assert sorted(t["topic"] for t in await alice.metadata()) == ["orders", "orders-secret"]
            assert [t["topic"] for t in await bob.metadata()] == ["orders"]
            named = {t["topic"]: t["error"] for t in await bob.metadata(["orders", "payments"])}
            assert named == {"orders": None, "payments": "TOPIC_AUTHORIZATION_FAILED"}
            # configs
            await alice.alter_configs("orders", {"retention.ms": 3600000})
            assert (await alice.describe_configs("orders"))["retention.ms"]["value"] == 3600000
            with pytest.raises(TopicAuthorizationFailed):
                await bob.describe_configs("orders")
            with pytest.raises(TopicAuthorizationFailed):
                await bob.alter_configs("orders", {"retention.ms": 1})
            # create/delete: Create on the cluster or topic; Delete on the topic
            with pytest.raises(TopicAuthorizationFailed):
                await alice.create_topic("orders-new")
            with pytest.raises(TopicAuthorizationFailed):
                await bob.delete_topic("orders")
            # delete_records: Delete
            assert await alice.delete_records("orders", 0, 0) == 0
            with pytest.raises(TopicAuthorizationFailed):
                await bob.delete_records("orders", 0, 0)
            # groups: Read on the group, then on each topic
            await alice.call(commit_offsets("billing", {("orders", 0): 1}))
            with pytest.raises(GroupAuthorizationFailed):
                await bob.call(commit_offsets("billing", {("orders", 0): 1}))
            with pytest.raises(GroupAuthorizationFailed):
                await alice.call(commit_offsets("other", {("orders", 0): 1}))
            assert await alice.call(fetch_offsets("billing", [("orders", 0)])) is not None
            await alice.delete_topic("orders")
        metric = handle.context.metrics.get("tidelog_authorization_denied")
        assert metric.labels("fetch")._value.get() == 2


async def test_acl_changes_apply_live_and_survive_restart(
    secured_broker: Any, tmp_path: Path
) -> None:
    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    add_user(data, "carol", "pw-carol")
    async with secured_broker(*AUTHZ) as handle:
        async with open_client(address(handle), security=user("admin", "pw-admin")) as admin:
            await admin.create_topic("logs")
        async with open_client(address(handle), security=user("carol", "pw-carol")) as carol:
            assert await carol.metadata() == []
            grant(data, "Allow User:carol Describe Topic Literal logs")
            await trio.sleep(1.1)  # the broker re-reads acls.json at most once a second
            assert [t["topic"] for t in await carol.metadata()] == ["logs"]
    async with (
        secured_broker(*AUTHZ) as handle,
        open_client(address(handle), security=user("carol", "pw-carol")) as carol,
    ):
        assert [t["topic"] for t in await carol.metadata()] == ["logs"]


async def test_acl_apis_over_msgpack(secured_broker: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    add_user(data, "admin", "pw-admin")
    add_user(data, "erin", "pw-erin")
    binding = {
        "principal": "User:erin",
        "host": "*",
        "resource_type": "Topic",
        "resource_name": "logs-",
        "pattern_type": "Prefixed",
        "operation": "Read",
        "permission": "Allow",
    }
    async with secured_broker(*AUTHZ) as handle:
        admin_sec, erin_sec = user("admin", "pw-admin"), user("erin", "pw-erin")
        async with (
            open_client(address(handle), security=admin_sec) as admin,
            open_client(address(handle), security=erin_sec) as erin,
        ):
            bad = {**binding, "operation": "Fly"}
            answer = await admin.request("create_acls", {"acls": [binding, bad]})
            assert [r["error"] for r in answer["results"]] == [None, "INVALID_REQUEST"]
            listed = await admin.request("describe_acls", {"principal": "User:erin"})
            assert listed["acls"] == [binding]
            assert AclStore(data).bindings()[0].resource_name == "logs-"  # persisted
            with pytest.raises(ClusterAuthorizationFailed):
                await erin.request("describe_acls", {})
            with pytest.raises(ClusterAuthorizationFailed):
                await erin.request("create_acls", {"acls": [binding]})
            removed = await admin.request("delete_acls", {"filters": [{"operation": "read"}]})
            assert removed["results"][0]["deleted"] == [binding]
            assert (await admin.request("describe_acls", {}))["acls"] == []


async def test_acl_apis_answer_security_disabled_without_the_authorizer(
    secured_broker: Any,
) -> None:
    async with secured_broker() as handle, open_client(address(handle)) as c:
        with pytest.raises(SecurityDisabled):
            await c.request("describe_acls", {})


async def test_group_and_producer_id_apis_over_msgpack(secured_broker: Any, tmp_path: Path) -> None:
    data = tmp_path / "data"
    for name in ("admin", "alice", "bob"):
        add_user(data, name, f"pw-{name}")
    grant(data, "Allow User:alice Read Group Literal billing")
    join = {
        "group": "billing",
        "member_id": "",
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b""}],
        "session_timeout_ms": 10000,
        "rebalance_timeout_ms": 10000,
    }
    async with secured_broker(*AUTHZ) as handle:
        alice_sec, bob_sec = user("alice", "pw-alice"), user("bob", "pw-bob")
        async with (
            open_client(address(handle), security=alice_sec) as alice,
            open_client(address(handle), security=bob_sec) as bob,
            open_client(address(handle), security=user("admin", "pw-admin")) as admin,
        ):
            # membership: Read on the group (the answer is the coordinator's, not a denial)
            answer = await alice.request("join_group", join)
            assert answer["error"] == "MEMBER_ID_REQUIRED"
            with pytest.raises(GroupAuthorizationFailed):
                await bob.request("join_group", join)
            beat = {"group": "billing", "member_id": "m", "generation": 1}
            with pytest.raises(GroupAuthorizationFailed):
                await bob.request("heartbeat", beat)
            # describe: Describe (implied by Read); delete: Delete, which alice lacks
            described = await alice.request("describe_groups", {"groups": ["billing"]})
            assert [g["group"] for g in described["groups"]] == ["billing"]
            with pytest.raises(GroupAuthorizationFailed):
                await bob.request("describe_groups", {"groups": ["billing"]})
            with pytest.raises(GroupAuthorizationFailed):
                await alice.request("delete_groups", {"groups": ["billing"]})
            # list: filtered by Describe on each group unless Describe on the cluster
            await admin.create_topic("ledger")
            await admin.call(commit_offsets("audit", {("ledger", 0): 0}))
            listed = {g["group"] for g in (await admin.request("list_groups", {}))["groups"]}
            assert {"billing", "audit"} <= listed
            alice_list = (await alice.request("list_groups", {}))["groups"]
            assert [g["group"] for g in alice_list] == ["billing"]
            assert (await bob.request("list_groups", {}))["groups"] == []
            # init_producer_id: any authenticated principal (every produce is still checked)
            ids = await bob.request("init_producer_id", {})
            assert ids["producer_id"] >= 0
