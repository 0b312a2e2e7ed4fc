"""Kafka's `listeners` key: `SCHEME://HOST:PORT[,...]`, the scheme being the security protocol.

| scheme | TLS | SASL |
|---|---|---|
| `PLAINTEXT` | no | no |
| `SSL` | yes | no (a client certificate, if any, names the principal) |
| `SASL_PLAINTEXT` | no | yes |
| `SASL_SSL` | yes | yes |

An empty HOST means every interface, as in Kafka. Pure: parsing and checks only.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

# More listeners than this is a typo, not a deployment.
LISTENERS_MAX = 16


class SecurityProtocol(StrEnum):
    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def tls(self) -> bool:
        return self in (SecurityProtocol.SSL, SecurityProtocol.SASL_SSL)

    @property
    def sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)


@dataclass(frozen=True, slots=True)
class ListenerSpec:
    """One configured listener."""

    protocol: SecurityProtocol
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.protocol.value}://{host}:{self.port}"


def parse_listener(text: str) -> ListenerSpec:
    """`SASL_SSL://127.0.0.1:9093` -> a ListenerSpec; ValueError saying what is wrong."""
    scheme, sep, address = text.strip().partition("://")
    if not sep:
        raise ValueError(f"{text!r}: expected SCHEME://HOST:PORT")
    try:
        protocol = SecurityProtocol(scheme.upper())
    except ValueError:
        choices = ", ".join(p.value for p in SecurityProtocol)
        raise ValueError(f"{text!r}: unknown security protocol {scheme!r} ({choices})") from None
    host, sep, port_text = address.rpartition(":")
    if not sep or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"{text!r}: expected a port in 0..65535")
    return ListenerSpec(protocol, host.strip("[]"), int(port_text))


def parse_listeners(text: str) -> tuple[ListenerSpec, ...]:
    """Every listener of a `listeners` value (empty text: none)."""
    specs = tuple(parse_listener(part) for part in text.split(",") if part.strip())
    if len(specs) > LISTENERS_MAX:
        raise ValueError(f"at most {LISTENERS_MAX} listeners")
    addresses = [(s.host, s.port) for s in specs if s.port != 0]
    if len(set(addresses)) != len(addresses):
        raise ValueError("two listeners share an address")
    return specs


def listeners_problem(text: str) -> str | None:
    """A `Setting.check`: why `text` is not a valid `listeners` value, or None."""
    try:
        parse_listeners(text)
    except ValueError as exc:
        return str(exc)
    return None
