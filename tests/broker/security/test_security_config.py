"""The security keys of broker/config.py and `listeners` parsing (broker/security/listeners.py)."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.security.listeners import ListenerSpec, SecurityProtocol, parse_listeners
from protocol.errors import InvalidConfig

TLS_FILES = ("ssl.certfile=/etc/tidelog/cert.pem", "ssl.keyfile=/etc/tidelog/key.pem")


def _config(*sets: str, listen: str | None = None) -> BrokerConfig:
    return BrokerConfig.from_sources(data_dir="/tmp/unused", overrides=sets, listen=listen)


def test_default_is_one_plaintext_listener_on_loopback() -> None:
    config = _config()
    assert config.listener_specs == (ListenerSpec(SecurityProtocol.PLAINTEXT, "127.0.0.1", 9092),)
    assert not config.authorizer_enabled and config.sasl_enabled_mechanisms == {
        "SCRAM-SHA-256",
        "SCRAM-SHA-512",
    }


def test_listeners_give_protocols_and_listen_overrides_the_first_address() -> None:
    sets = ("listeners=SASL_SSL://0.0.0.0:9093,PLAINTEXT://127.0.0.1:9092", *TLS_FILES)
    config = _config(*sets)
    assert config.listen == ("0.0.0.0", 9093)
    assert [str(s) for s in config.listener_specs] == [
        "SASL_SSL://0.0.0.0:9093",
        "PLAINTEXT://127.0.0.1:9092",
    ]
    moved = _config(*sets, listen="127.0.0.1:0")
    assert str(moved.listener_specs[0]) == "SASL_SSL://127.0.0.1:0"


@pytest.mark.parametrize(
    ("sets", "message"),
    [
        (("listeners=HTTP://:1",), "unknown security protocol"),
        (("listeners=SSL//:1",), "SCHEME://HOST:PORT"),
        (("listeners=SSL://:99999",), "port"),
        (("listeners=PLAINTEXT://:9092,SSL://:9092", *TLS_FILES), "share an address"),
        (("listeners=SSL://:9093",), "ssl.certfile"),
        (("metrics.ssl.enable=true",), "ssl.certfile"),
        (("ssl.client.auth=required", *TLS_FILES), "ssl.cafile"),
        (("ssl.client.auth=sometimes",), "required, requested, none"),
        (("sasl.enabled.mechanisms=GSSAPI",), "unknown mechanism"),
        (("super.users=alice",), "not a principal"),
        (("authorizer=yes",), "on, off"),
        (("connection.failed.authentication.delay.ms=-1",), "must be in"),
    ],
)
def test_invalid_security_settings_are_refused(sets: tuple[str, ...], message: str) -> None:
    with pytest.raises(InvalidConfig, match=message):
        _config(*sets)


def test_super_users_are_semicolon_separated() -> None:
    config = _config("super.users=User:admin; User:CN=ops,O=Example", "authorizer=on")
    assert config.super_user_set == {"User:admin", "User:CN=ops,O=Example"}
    assert config.authorizer_enabled


def test_ipv6_listener_round_trips() -> None:
    (spec,) = parse_listeners("SASL_PLAINTEXT://[::1]:9094")
    assert (spec.host, spec.port, spec.protocol.sasl, spec.protocol.tls) == (
        "::1",
        9094,
        True,
        False,
    )
    assert str(spec) == "SASL_PLAINTEXT://[::1]:9094"


def test_deploy_example_is_a_valid_config() -> None:
    """deploy/security/secure.properties parses and asks for what docs/security.md says."""
    from tests.conftest import ROOT

    config = BrokerConfig.from_sources(config_file=ROOT / "deploy/security/secure.properties")
    assert [s.protocol for s in config.listener_specs] == [
        SecurityProtocol.SASL_SSL,
        SecurityProtocol.PLAINTEXT,
    ]
    assert config.authorizer_enabled and config.super_user_set == {"User:admin"}
    assert config.metrics_ssl_enable and config.ssl_client_auth == "requested"
