"""The broker's security state, built once from `BrokerConfig` at start.

`BrokerSecurity` joins what the accept path (TLS) and the handler layer
(authentication, authorization) need: the TLS context source, the credential and
ACL stores of the data directory, and the settings. It lives on `BrokerContext`
(`ctx.security`); a context without one (tests that build a bare context) serves
without TLS, SASL or ACLs, as before issue 22.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from broker.config import BrokerConfig
from broker.security.acl_store import AclStore
from broker.security.credentials import CredentialStore
from broker.security.tls import TlsContextSource


@dataclass
class BrokerSecurity:
    credentials: CredentialStore
    acls: AclStore
    tls: TlsContextSource | None = None
    authorizer_enabled: bool = False
    mechanisms: frozenset[str] = frozenset()
    failed_auth_delay_s: float = 0.1

    @classmethod
    def from_config(
        cls, config: BrokerConfig, *, on_reload_failed: Callable[[Exception], None] | None = None
    ) -> BrokerSecurity:
        """Raises ssl.SSLError / OSError when the configured certificate cannot be loaded."""
        tls = None
        if config.ssl_certfile and config.ssl_keyfile:
            tls = TlsContextSource(
                config.ssl_certfile,
                config.ssl_keyfile,
                config.ssl_cafile,
                config.ssl_client_auth,
                on_reload_failed=on_reload_failed,
            )
        return cls(
            credentials=CredentialStore(config.data_dir),
            acls=AclStore(
                config.data_dir,
                super_users=config.super_user_set,
                allow_if_no_acl=config.allow_everyone_if_no_acl_found,
            ),
            tls=tls,
            authorizer_enabled=config.authorizer_enabled,
            mechanisms=config.sasl_enabled_mechanisms,
            failed_auth_delay_s=config.connection_failed_authentication_delay_ms / 1000,
        )
