"""Kafka's kafka-acls.sh (AclCommand) against `tidelog serve` on a SASL_PLAINTEXT
listener with SCRAM-SHA-512, `authorizer=on` and `super.users=User:admin` (issue 22
item 3): add, list in Kafka's format, the ACLs enforced for alice through
confluent-kafka, remove, list empty. Tidelog only: the Kafka harness has no SASL."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from interop import java_tools as tools

# Every kafka-acls run is a JVM start (1-3 s, far more on a loaded machine); eight here.
ACLS_TEST_TIMEOUT_S = 600
pytestmark = [pytest.mark.interop, pytest.mark.timeout(ACLS_TEST_TIMEOUT_S)]

MECHANISM = "SCRAM-SHA-512"
USERS = {"admin": "admin-pw", "alice": "alice-pw"}
CLIENT_TIMEOUT_S = 20.0
USERS_ADD = (sys.executable, "-m", "broker", "users", "add")
POLLS = 60

ORDERS = "ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)"
PREFIXED = "ResourcePattern(resourceType=TOPIC, name=orders-, patternType=PREFIXED)"
SECRET = "ResourcePattern(resourceType=TOPIC, name=orders-secret, patternType=LITERAL)"
GROUP = "ResourcePattern(resourceType=GROUP, name=billing, patternType=LITERAL)"


def _entry(operation: str, permission: str = "ALLOW") -> str:
    return f"(principal=User:alice, host=*, operation={operation}, permissionType={permission})"


EXPECTED = {
    ORDERS: {_entry("READ"), _entry("DESCRIBE")},
    PREFIXED: {_entry("READ"), _entry("DESCRIBE")},
    SECRET: {_entry("READ", "DENY")},
    GROUP: {_entry("READ")},
}


def _add_users(data_dir: Path) -> None:
    """With the operator's CLI (`tidelog users add`, i.e. `python -m broker`), before
    the broker starts."""
    for user, password in USERS.items():
        subprocess.run(
            [*USERS_ADD, user, "--password-stdin", "--data-dir", str(data_dir)],
            input=password,
            text=True,
            check=True,
            capture_output=True,
            cwd=data_dir.parent,
        )


def _client_config(bootstrap: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": MECHANISM,
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def _command_config(path: Path) -> Path:
    path.write_text(
        "security.protocol=SASL_PLAINTEXT\n"
        f"sasl.mechanism={MECHANISM}\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required"
        f' username="admin" password="{USERS["admin"]}";\n'
    )
    return path


def _read(bootstrap: str, topic: str) -> tuple[list[bytes], int | None]:
    """alice reads `topic` from offset 0 in group billing and commits: the values, and
    the first error code (None if there was none)."""
    consumer = confluent_kafka.Consumer(
        {
            **_client_config(bootstrap, "alice"),
            "group.id": "billing",
            "enable.auto.commit": False,
        }
    )
    values: list[bytes] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
        for _ in range(POLLS):
            message = consumer.poll(0.5)
            if message is None:
                continue
            if message.error() is not None:
                return values, message.error().code()
            values.append(message.value())
            if len(values) == 2:
                break
        consumer.commit(asynchronous=False)
        return values, None
    except confluent_kafka.KafkaException as exc:
        return values, exc.args[0].code()
    finally:
        consumer.close()


def _metadata_error(bootstrap: str, topic: str) -> int | None:
    """The error alice's Metadata request for `topic` answers (librdkafka keeps it from
    `poll` of an assigned partition, so it is asked for directly)."""
    consumer = confluent_kafka.Consumer({**_client_config(bootstrap, "alice"), "group.id": "m"})
    try:
        error = consumer.list_topics(topic, timeout=CLIENT_TIMEOUT_S).topics[topic].error
        return None if error is None else error.code()
    finally:
        consumer.close()


def test_kafka_acls_against_tidelog(broker_factory, tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    _add_users(data_dir)
    broker = broker_factory(
        "listeners=SASL_PLAINTEXT://127.0.0.1:0",
        f"sasl.enabled.mechanisms={MECHANISM}",
        "authorizer=on",
        "super.users=User:admin",
        data_dir=data_dir,
    )
    bootstrap = f"127.0.0.1:{broker.port}"
    admin_props = _command_config(tmp_path / "admin.properties")

    def acls(*args: str) -> str:
        base = ["--bootstrap-server", bootstrap, "--command-config", str(admin_props)]
        return tools.run_tool(tools.ACLS, [*base, *args]).stdout

    admin = AdminClient(_client_config(bootstrap, "admin"))
    topics = ["orders", "orders-eu", "orders-secret", "ledger"]
    for future in admin.create_topics([NewTopic(t, 1) for t in topics]).values():
        future.result(timeout=CLIENT_TIMEOUT_S)
    producer = confluent_kafka.Producer(_client_config(bootstrap, "admin"))
    for topic in topics:
        producer.produce(topic, b"first", partition=0)
        producer.produce(topic, b"second", partition=0)
    assert producer.flush(CLIENT_TIMEOUT_S) == 0

    read_describe = ["--operation", "Read", "--operation", "Describe"]
    alice = ["--allow-principal", "User:alice"]
    acls("--add", *alice, *read_describe, "--topic", "orders")
    acls(
        "--add", *alice, *read_describe, "--topic", "orders-", "--resource-pattern-type", "prefixed"
    )
    acls("--add", *alice, "--operation", "Read", "--group", "billing")
    acls(
        "--add", "--deny-principal", "User:alice", "--operation", "Read", "--topic", "orders-secret"
    )

    assert tools.parse_acl_listing(acls("--list")) == EXPECTED
    assert tools.parse_acl_listing(acls("--list", "--topic", "orders")) == {
        ORDERS: EXPECTED[ORDERS]
    }
    match = ["--resource-pattern-type", "match"]  # what applies to the topic
    assert tools.parse_acl_listing(acls("--list", "--topic", "orders-secret", *match)) == {
        PREFIXED: EXPECTED[PREFIXED],
        SECRET: EXPECTED[SECRET],
    }

    assert _read(bootstrap, "orders") == ([b"first", b"second"], None)
    assert _read(bootstrap, "orders-eu") == ([b"first", b"second"], None)
    denied = confluent_kafka.KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert _metadata_error(bootstrap, "orders-secret") is None  # Describe by the prefix
    assert _read(bootstrap, "orders-secret") == ([], denied)  # its Read: deny wins
    assert _metadata_error(bootstrap, "ledger") == denied  # no ACL at all

    acls("--remove", "--force", *alice, *read_describe, "--topic", "orders")
    acls(
        "--remove", "--force", *alice, *read_describe,
        "--topic", "orders-", "--resource-pattern-type", "prefixed",
    )  # fmt: skip
    acls("--remove", "--force", *alice, "--operation", "Read", "--group", "billing")
    acls("--remove", "--force", "--topic", "orders-secret")
    assert tools.parse_acl_listing(acls("--list")) == {}
    assert _metadata_error(bootstrap, "orders") == denied
    assert _metadata_error(bootstrap, "orders-eu") == denied
