"""kafka-configs for client quotas and SCRAM users, against Apache Kafka and Tidelog
alike: the same commands print the same on both brokers (Kafka's ConfigCommand from
Maven's kafka-tools jar, interop/java_tools.py)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from interop import java_tools as tools
from interop.targets import Target

pytestmark = pytest.mark.interop


def _configs(bootstrap: str, *args: str) -> str:
    return tools.run_tool(tools.CONFIGS, ["--bootstrap-server", bootstrap, *args]).stdout.strip()


@pytest.mark.parametrize("target", ["kafka", "tidelog"])
def test_client_quotas_are_set_and_described(
    kafka: Target, tidelog: Target, target: str, unique: Callable[[str], str]
) -> None:
    bootstrap = kafka.bootstrap if target == "kafka" else tidelog.bootstrap
    client, user = unique("qc"), unique("qu")
    rates = "producer_byte_rate=1048576,consumer_byte_rate=2097152"
    assert _configs(
        bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
        "--add-config", rates,
    ) == f"Completed updating config for client {client}."  # fmt: skip
    assert _configs(
        bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
        "--entity-type", "clients", "--entity-default", "--add-config", "request_percentage=50",
    ) == f"Completed updating config for user {user}."  # fmt: skip
    assert _configs(
        bootstrap, "--describe", "--entity-type", "clients", "--entity-name", client
    ) == (
        f"Quota configs for client-id '{client}' are "
        "consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0"
    )
    assert _configs(
        bootstrap, "--describe", "--entity-type", "users", "--entity-name", user,
        "--entity-type", "clients", "--entity-default",
    ) == (
        f"Quota configs for user-principal '{user}', the default client-id are "
        "request_percentage=50.0"
    )  # fmt: skip
    _configs(
        bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
        "--delete-config", "producer_byte_rate,consumer_byte_rate",
    )  # fmt: skip
    assert (
        _configs(bootstrap, "--describe", "--entity-type", "clients", "--entity-name", client) == ""
    )
    with pytest.raises(tools.ToolError, match="producer_byte_rate cannot be a fractional value"):
        _configs(
            bootstrap, "--alter", "--entity-type", "clients", "--entity-name", client,
            "--add-config", "producer_byte_rate=1.5",
        )  # fmt: skip


def _scram(bootstrap: str, user: str) -> set[str]:
    """The mechanisms kafka-configs --describe lists for `user`."""
    out = _configs(bootstrap, "--describe", "--entity-type", "users", "--entity-name", user)
    head = f"SCRAM credential configs for user-principal '{user}' are "
    assert out.startswith(head), out
    return set(out.removeprefix(head).split(", "))


@pytest.mark.parametrize("target", ["kafka", "tidelog"])
def test_scram_users_are_added_described_and_deleted(
    kafka: Target, tidelog: Target, target: str, unique: Callable[[str], str]
) -> None:
    bootstrap = kafka.bootstrap if target == "kafka" else tidelog.bootstrap
    user = unique("scram")
    for config in ("SCRAM-SHA-256=[iterations=8192,password=p1]", "SCRAM-SHA-512=[password=p2]"):
        assert _configs(
            bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
            "--add-config", config,
        ) == f"Completed updating config for user {user}."  # fmt: skip
    # Kafka lists the mechanisms in no fixed order.
    assert _scram(bootstrap, user) == {
        "SCRAM-SHA-256=iterations=8192",
        "SCRAM-SHA-512=iterations=4096",
    }
    with pytest.raises(tools.ToolError, match="cannot be altered twice in the same request"):
        _configs(
            bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
            "--add-config", "SCRAM-SHA-256=[password=a],SCRAM-SHA-512=[password=b]",
        )  # fmt: skip
    _configs(
        bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
        "--delete-config", "SCRAM-SHA-512",
    )  # fmt: skip
    assert _scram(bootstrap, user) == {"SCRAM-SHA-256=iterations=8192"}
    with pytest.raises(tools.ToolError, match="does not exist"):
        _configs(
            bootstrap, "--alter", "--entity-type", "users", "--entity-name", user,
            "--delete-config", "SCRAM-SHA-512",
        )  # fmt: skip
