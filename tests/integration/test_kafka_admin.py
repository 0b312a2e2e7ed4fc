"""Kafka's admin APIs end to end: the real broker process, three client libraries'
admin clients (kafka-python's KafkaAdminClient, aiokafka's AIOKafkaAdminClient,
confluent-kafka's AdminClient), each observing exactly what it observed of Apache
Kafka 4.4 for the same scenario (tests/interop/admin_expected.py;
tests/interop/test_admin_differential.py runs both side by side)."""

from __future__ import annotations

import warnings

import pytest

from tests.conftest import BrokerProcess
from tests.interop.admin_expected import ADMIN_DETAILS as SEEN_ON_KAFKA

# kafka-python 3.0 builds its protocol classes at import time with a deprecated
# importlib.resources call (a third party's warning; the suite turns warnings into errors).
with warnings.catch_warnings():
    warnings.filterwarnings("ignore", r"(read|open)_text is deprecated", DeprecationWarning)
    from interop.admin_scenarios import ADMIN_DETAILS
    from interop.scenarios import CLIENTS

pytestmark = pytest.mark.integration


@pytest.mark.parametrize("client", sorted(ADMIN_DETAILS))
def test_admin_client_sees_what_it_sees_of_kafka(
    broker_process: BrokerProcess, client: str
) -> None:
    seen = ADMIN_DETAILS[client](broker_process.bootstrap, f"admin-{client}")
    assert seen == SEEN_ON_KAFKA[client]


@pytest.mark.parametrize("client", sorted(ADMIN_DETAILS))
def test_create_configure_delete_topic(broker_process: BrokerProcess, client: str) -> None:
    """The interop suite's admin_topics scenario, as tests/interop/test_scenarios.py
    expects it of Apache Kafka."""
    seen = CLIENTS[client].admin_topics(broker_process.bootstrap, f"adm-{client}")
    assert seen == {
        "create": "NONE",
        "create_again": "TOPIC_ALREADY_EXISTS",
        "listed_after_create": True,
        "retention_before": ("604800000", "DEFAULT_CONFIG"),
        "retention_after": ("3600000", "DYNAMIC_TOPIC_CONFIG"),
        "listed_after_delete": False,
    }


def test_every_client_has_a_kafka_reference() -> None:
    assert (
        set(ADMIN_DETAILS) == set(SEEN_ON_KAFKA) == {"kafka-python", "aiokafka", "confluent-kafka"}
    )
