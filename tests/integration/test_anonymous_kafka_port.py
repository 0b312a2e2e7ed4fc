"""Issue 38 #8: `--kafka-listen` beside authenticating listeners, with the authorizer off.

The Kafka-only port is plaintext and anonymous: next to SASL listeners, with
`authorizer=off`, it served every client everything, silently. The broker now refuses
to start (status 2, naming what to change) unless `kafka.listen.anonymous.enable=true`
says it is meant, and then warns naming the open port. The real `tidelog serve`.
"""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from protocol.errors import InvalidConfig
from tests.conftest import BrokerFactory

SASL = "listeners=SASL_PLAINTEXT://127.0.0.1:0"
KAFKA_PORT = ("--kafka-listen", "127.0.0.1:0")


def test_the_broker_refuses_to_start_and_says_what_to_change(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(SASL, extra_args=KAFKA_PORT, wait=False)
    assert broker.proc.wait(timeout=60) == 2
    message = broker.output()
    assert "--kafka-listen" in message and "authorizer=on" in message
    assert "kafka.listen.anonymous.enable" in message


def test_with_the_opt_in_it_serves_and_warns_naming_the_port(
    broker_factory: BrokerFactory,
) -> None:
    broker = broker_factory(SASL, "kafka.listen.anonymous.enable=true", extra_args=KAFKA_PORT)
    ready = broker.wait_for_event("broker_ready")
    warning = broker.wait_for_event("listener_anonymous")
    assert warning["listener"] == "kafka_listen"
    assert warning["address"] == ready["kafka_listen"]


def test_a_plaintext_listener_beside_a_sasl_one_is_warned_about(
    broker_factory: BrokerFactory,
) -> None:
    """The same open door written in `listeners=`: Kafka allows it, so a warning only."""
    broker = broker_factory(f"{SASL},PLAINTEXT://127.0.0.1:0")
    warning = broker.wait_for_event("listener_anonymous")
    assert warning["listener"] == "listeners[1]"
    assert warning["address"].startswith("127.0.0.1:") and not warning["address"].endswith(":0")


@pytest.mark.parametrize(
    "sets",
    [
        {"authorizer": "on"},  # anonymous clients are checked against the ACLs
        {},  # no authenticating listener: nothing is promised
    ],
)
def test_no_refusal_when_nothing_is_left_open_by_surprise(sets: dict[str, str]) -> None:
    props = {**sets, **({"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"} if sets else {})}
    config = BrokerConfig.from_props(props, data_dir="d", kafka_listen=("127.0.0.1", 9094))
    assert config.kafka_listen == ("127.0.0.1", 9094)


def test_the_refusal_is_a_config_error() -> None:
    props = {"listeners": "SASL_PLAINTEXT://127.0.0.1:9093"}
    with pytest.raises(InvalidConfig, match=r"kafka\.listen\.anonymous\.enable"):
        BrokerConfig.from_props(props, data_dir="d", kafka_listen=("127.0.0.1", 9094))
