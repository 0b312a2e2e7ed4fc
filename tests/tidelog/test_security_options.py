"""Client security options (tidelog/security.py): Kafka property names, validation, repr."""

from __future__ import annotations

import pytest

from tidelog.security import Security, parse_jaas_config, security_from_properties

JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="alice" password="p\\"w";'
)


def test_kafka_client_properties() -> None:
    security = security_from_properties(
        {
            "security.protocol": "sasl_ssl",
            "sasl.mechanism": "scram-sha-512",
            "sasl.jaas.config": JAAS,
            "ssl.truststore.location": "/etc/ca.pem",
            "ssl.endpoint.identification.algorithm": "",
        }
    )
    assert (security.tls, security.sasl, security.ssl_check_hostname) == (True, True, False)
    assert security.sasl_mechanism == "SCRAM-SHA-512" and security.ssl_cafile == "/etc/ca.pem"
    assert (security.sasl_plain_username, security.sasl_plain_password) == ("alice", 'p"w')
    assert 'p"w' not in repr(security)
    plain = security_from_properties({})
    assert not plain.tls and not plain.sasl and plain.ssl_context() is None


def test_explicit_username_and_password_win_over_jaas() -> None:
    props = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "bob",
        "sasl.password": "pw",
    }
    assert security_from_properties(props).sasl_plain_username == "bob"
    assert parse_jaas_config("nothing here") == (None, None)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"security_protocol": "TLS"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"},
        {"security_protocol": "SASL_SSL", "sasl_mechanism": "PLAIN"},  # no user or password
    ],
)
def test_invalid_options_are_refused(kwargs: dict[str, str]) -> None:
    with pytest.raises(ValueError):
        Security(**kwargs)
