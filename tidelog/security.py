"""How our clients reach a secured broker: TLS and SASL options, kafka-python's names.

    Client("broker:9093", security=Security(
        security_protocol="SASL_SSL", ssl_cafile="ca.pem",
        sasl_mechanism="SCRAM-SHA-512", sasl_plain_username="alice",
        sasl_plain_password=password))

`Client`, `tidelog.aio.open_client`, `Producer`, `Consumer`, the CLI and the Spark
Data Source all take one `Security`. TLS verifies the broker against `ssl_cafile`
(else the system's CAs) and its host name (unless `ssl_check_hostname=False`),
TLS 1.2 or newer only; `ssl_certfile`/`ssl_keyfile` present a client certificate
(mTLS). SASL runs the `authenticate` exchange (docs/protocol.md §9) right after
connecting. The password is kept out of `repr`.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field

from protocol.sasl.client import SaslClient
from protocol.sasl.scram import MECHANISMS

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")


@dataclass(frozen=True, slots=True)
class Security:
    """A connection's security options; the default is plaintext, anonymous."""

    security_protocol: str = "PLAINTEXT"
    ssl_cafile: str | None = None
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_check_hostname: bool = True
    sasl_mechanism: str | None = None
    sasl_plain_username: str | None = None
    sasl_plain_password: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, "
                f"got {self.security_protocol!r}"
            )
        if self.sasl:
            if self.sasl_mechanism not in MECHANISMS:
                raise ValueError(f"sasl_mechanism must be one of {', '.join(MECHANISMS)}")
            if not self.sasl_plain_username or not self.sasl_plain_password:
                raise ValueError("SASL needs sasl_plain_username and sasl_plain_password")

    @property
    def tls(self) -> bool:
        return self.security_protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    def ssl_context(self) -> ssl.SSLContext | None:
        """The client TLS context, or None for a plaintext protocol."""
        if not self.tls:
            return None
        context = ssl.create_default_context(cafile=self.ssl_cafile)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.check_hostname = self.ssl_check_hostname
        if self.ssl_certfile:
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile)
        return context

    def sasl_client(self) -> SaslClient | None:
        """A fresh exchange for one connection, or None without SASL."""
        if not self.sasl:
            return None
        assert self.sasl_mechanism and self.sasl_plain_username and self.sasl_plain_password
        return SaslClient(self.sasl_mechanism, self.sasl_plain_username, self.sasl_plain_password)


PLAINTEXT = Security()


# Kafka client property names `security_from_properties` reads (the CLI's
# --command-config file, the Spark options without their `kafka.` prefix).
SECURITY_PROPERTIES = (
    "security.protocol",
    "ssl.cafile",
    "ssl.truststore.location",
    "ssl.certfile",
    "ssl.keyfile",
    "ssl.endpoint.identification.algorithm",
    "sasl.mechanism",
    "sasl.jaas.config",
    "sasl.username",
    "sasl.password",
)
_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_jaas_config(text: str) -> tuple[str | None, str | None]:
    """(username, password) of a `sasl.jaas.config` value, as Kafka clients write it:

    `org.apache.kafka.common.security.scram.ScramLoginModule required
    username="alice" password="...";` (PlainLoginModule the same).
    """
    options = {key: value.replace('\\"', '"') for key, value in _JAAS_OPTION.findall(text)}
    return options.get("username"), options.get("password")


def security_from_properties(props: Mapping[str, str]) -> Security:
    """A `Security` from Kafka client properties; ValueError names what is wrong.

    TLS files are PEM (`ssl.truststore.location` is read as a PEM CA file, as
    librdkafka's `ssl.ca.location`); `ssl.endpoint.identification.algorithm=` (empty)
    turns host-name checking off, as in Kafka.
    """
    username, password = parse_jaas_config(props.get("sasl.jaas.config", ""))
    return Security(
        security_protocol=props.get("security.protocol", "PLAINTEXT").upper(),
        ssl_cafile=props.get("ssl.cafile") or props.get("ssl.truststore.location") or None,
        ssl_certfile=props.get("ssl.certfile") or None,
        ssl_keyfile=props.get("ssl.keyfile") or None,
        ssl_check_hostname=props.get("ssl.endpoint.identification.algorithm", "https") != "",
        sasl_mechanism=props.get("sasl.mechanism", "").upper() or None,
        sasl_plain_username=props.get("sasl.username") or username,
        sasl_plain_password=props.get("sasl.password") or password,
    )
