"""Whether the console runs, and how (docs/console.md, "Settings").

`console.enable=auto` (the default) serves it when the metrics listener is on a
loopback address, so a fresh `make run` has it and a broker exposed on a network has
not until someone turns it on. A login is asked for whenever the broker
authenticates its clients (a SASL or mTLS listener, or `authorizer=on`); then the
console refuses to send passwords and session cookies in the clear beyond loopback:
`console.enable=on` there needs `metrics.ssl.enable` (the broker's certificate).
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

from broker.config import BrokerConfig
from protocol.errors import InvalidConfig


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


@dataclass(frozen=True, slots=True)
class ConsoleSettings:
    login_required: bool
    tls: bool
    idle_timeout_s: float
    failed_login_delay_s: float

    @classmethod
    def resolve(cls, config: BrokerConfig) -> ConsoleSettings | None:
        """The console's settings, or None when it is off; InvalidConfig if unsafe."""
        host = config.metrics_listen[0]
        loopback = is_loopback(host)
        if config.console_enable == "off" or (config.console_enable == "auto" and not loopback):
            return None
        tls = config.metrics_ssl_enable and bool(config.ssl_certfile and config.ssl_keyfile)
        login = config.authentication_enabled
        if login and not loopback and not tls:
            raise InvalidConfig(
                "console.enable: the console's logins would cross the network in the clear "
                f"on --metrics-listen {host or '*'}; set metrics.ssl.enable=true (with "
                "ssl.certfile and ssl.keyfile), listen on loopback, or console.enable=off"
            )
        return cls(
            login_required=login,
            tls=tls,
            idle_timeout_s=config.console_session_timeout_ms / 1000,
            failed_login_delay_s=config.connection_failed_authentication_delay_ms / 1000,
        )
