"""The broker's SCRAM users managed through Kafka's admin API on the real broker
process, with confluent-kafka's AdminClient (librdkafka): users created, described,
logged in with and deleted; Kafka's errors; a principal without the cluster rights
refused."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import confluent_kafka
import confluent_kafka.admin as ck
import pytest

with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin
    import kafka.errors

from tests.broker.security.conftest import add_user
from tests.conftest import BrokerProcess
from tests.integration.kafka_helpers import CLIENT_TIMEOUT_S

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:read_text is deprecated:DeprecationWarning"),
]

SHA256, SHA512 = ck.ScramMechanism.SCRAM_SHA_256, ck.ScramMechanism.SCRAM_SHA_512
SETTINGS = (
    "listeners=SASL_PLAINTEXT://127.0.0.1:0",
    "sasl.enabled.mechanisms=SCRAM-SHA-256,SCRAM-SHA-512",
    "authorizer=on",
    "super.users=User:admin",
    "connection.failed.authentication.delay.ms=0",
)


def _config(broker: BrokerProcess, name: str, password: str, mechanism: str) -> dict[str, Any]:
    return {
        "bootstrap.servers": broker.bootstrap,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": mechanism,
        "sasl.username": name,
        "sasl.password": password,
    }


def _admin(broker: BrokerProcess, name: str, password: str) -> ck.AdminClient:
    return ck.AdminClient(_config(broker, name, password, "SCRAM-SHA-512"))


def _logs_in(broker: BrokerProcess, name: str, password: str, mechanism: str) -> bool:
    client = ck.AdminClient(_config(broker, name, password, mechanism))
    try:
        client.list_topics(timeout=5)
    except confluent_kafka.KafkaException:
        return False
    return True


def _code(future: Any) -> str:
    with pytest.raises(confluent_kafka.KafkaException) as raised:
        future.result(CLIENT_TIMEOUT_S)
    return str(raised.value.args[0].name())


@pytest.fixture
def broker(broker_factory: Callable[..., BrokerProcess], tmp_path: Any) -> BrokerProcess:
    add_user(tmp_path / "data", "admin", "admin-pw")
    add_user(tmp_path / "data", "bob", "bob-pw")
    return broker_factory(*SETTINGS)


def test_scram_users_are_created_described_used_and_deleted(broker: BrokerProcess) -> None:
    admin = _admin(broker, "admin", "admin-pw")
    assert not _logs_in(broker, "carol", "carol-pw", "SCRAM-SHA-256")
    upsert = ck.UserScramCredentialUpsertion(
        "carol", ck.ScramCredentialInfo(SHA256, 8192), b"carol-pw"
    )
    admin.alter_user_scram_credentials([upsert])["carol"].result(CLIENT_TIMEOUT_S)
    assert _logs_in(broker, "carol", "carol-pw", "SCRAM-SHA-256")
    assert not _logs_in(broker, "carol", "wrong", "SCRAM-SHA-256")
    described = admin.describe_user_scram_credentials(["carol"])["carol"].result(CLIENT_TIMEOUT_S)
    assert [(i.mechanism, i.iterations) for i in described.scram_credential_infos] == [
        (SHA256, 8192)
    ]
    everyone = admin.describe_user_scram_credentials().result(CLIENT_TIMEOUT_S)
    assert sorted(everyone) == ["admin", "bob", "carol"]
    assert sorted(i.mechanism for i in everyone["admin"].scram_credential_infos) == [SHA256, SHA512]

    delete = ck.UserScramCredentialDeletion("carol", SHA256)
    admin.alter_user_scram_credentials([delete])["carol"].result(CLIENT_TIMEOUT_S)
    assert not _logs_in(broker, "carol", "carol-pw", "SCRAM-SHA-256")
    assert "carol" not in admin.describe_user_scram_credentials().result(CLIENT_TIMEOUT_S)


def test_kafkas_errors(broker: BrokerProcess) -> None:
    admin = _admin(broker, "admin", "admin-pw")
    futures = admin.describe_user_scram_credentials(["nobody"])
    assert _code(futures["nobody"]) == "RESOURCE_NOT_FOUND"
    missing = ck.UserScramCredentialDeletion("nobody", SHA256)
    assert _code(admin.alter_user_scram_credentials([missing])["nobody"]) == "RESOURCE_NOT_FOUND"
    few = ck.UserScramCredentialUpsertion("dave", ck.ScramCredentialInfo(SHA256, 1000), b"pw")
    assert _code(admin.alter_user_scram_credentials([few])["dave"]) == "UNACCEPTABLE_CREDENTIAL"
    twice = [
        ck.UserScramCredentialUpsertion("erin", ck.ScramCredentialInfo(SHA256, 4096), b"pw"),
        ck.UserScramCredentialUpsertion("erin", ck.ScramCredentialInfo(SHA512, 4096), b"pw"),
    ]
    assert _code(admin.alter_user_scram_credentials(twice)["erin"]) == "DUPLICATE_RESOURCE"
    assert not _logs_in(broker, "erin", "pw", "SCRAM-SHA-256")


def test_a_principal_without_cluster_rights_is_refused(broker: BrokerProcess) -> None:
    # kafka-python here: librdkafka 2.x crashes on a request-level error in a
    # DescribeUserScramCredentials answer (Apache Kafka's answer too).
    kp_bob = kafka.admin.KafkaAdminClient(
        bootstrap_servers=broker.bootstrap, security_protocol="SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="bob", sasl_plain_password="bob-pw",
    )  # fmt: skip
    try:
        with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
            kp_bob.describe_user_scram_credentials()
    finally:
        kp_bob.close()
    bob = _admin(broker, "bob", "bob-pw")
    upsert = ck.UserScramCredentialUpsertion("mallory", ck.ScramCredentialInfo(SHA256, 4096), b"pw")
    assert _code(bob.alter_user_scram_credentials([upsert])["mallory"]) == (
        "CLUSTER_AUTHORIZATION_FAILED"
    )
    assert not _logs_in(broker, "mallory", "pw", "SCRAM-SHA-256")
