"""Every Kafka API Tidelog serves: the family modules' `HANDLERS`, joined and gated.

Add a family module by importing it here and listing it in `_FAMILIES`; an API
key served by two modules is a programming error caught at import, and so is a
row whose `via` names no native API.

Each row runs behind the gate (`gated`), which reads the row's declaration
(`KafkaApi.requires`, `KafkaApi.via`; broker/security/requires.py) before the
adapter runs: on a SASL listener, an API that is not `before_login` is refused
until the login (SASL_AUTHENTICATION_FAILED, audited, the connection closes),
whether or not the adapter would reach a native handler; a row that declares
nothing is refused to all but super users (CLUSTER_AUTHORIZATION_FAILED). The
adapter then gets the declaration on its `KafkaCall`, and may check only the
rights it declares (`KafkaCall.permits`).
"""

from __future__ import annotations

from dataclasses import replace
from types import ModuleType

from broker import dispatch
from broker.authz.access import access_for, refuse_unless, require_login
from broker.context import Deferred
from broker.kafka import admin, core, groups, producer_ids, security
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall, KafkaHandler
from broker.security.acl import CLUSTER_NAME
from broker.security.requires import LOGGED_IN, UNDECLARED

_FAMILIES: tuple[ModuleType, ...] = (core, admin, groups, producer_ids, security)


def gated(api: KafkaApi) -> KafkaHandler:
    """`api.handler` behind the login gate and its row's declaration."""
    requires = api.requires or (LOGGED_IN if api.via else UNDECLARED)
    handler = api.handler

    async def run(call: KafkaCall) -> KafkaAnswer | Deferred[KafkaAnswer] | None:
        ctx, name = call.ctx, call.request.api.name
        if ctx.security is not None and not requires.before_login:
            require_login(ctx, name)
        if not api.declared:
            access = access_for(ctx, name)
            if access is not None:
                assert UNDECLARED.whole is not None
                refuse_unless(access, UNDECLARED.whole, CLUSTER_NAME)
        return await handler(replace(call, requires=requires))

    return run


def join(families: tuple[ModuleType, ...]) -> dict[int, KafkaApi]:
    """The families' rows by API key (each key once, each `via` a native API)."""
    joined: dict[int, KafkaApi] = {}
    for module in families:
        for key, row in module.HANDLERS.items():
            if key in joined:
                raise RuntimeError(f"Kafka API key {key} served twice ({module.__name__})")
            unknown = [name for name in row.via if name not in dispatch.APIS]
            if unknown:
                raise RuntimeError(f"Kafka API key {key}: via unknown native APIs {unknown}")
            joined[key] = row
    return joined


def undeclared(rows: dict[int, KafkaApi]) -> list[int]:
    """The API keys whose row declares nothing (they are refused to all but super users)."""
    return sorted(key for key, row in rows.items() if not row.declared)


KAFKA_APIS: dict[int, KafkaApi] = join(_FAMILIES)
# What the connection runs: every row behind its gate.
KAFKA_HANDLERS: dict[int, KafkaHandler] = {key: gated(row) for key, row in KAFKA_APIS.items()}
