"""Every Kafka API Tidelog serves: the family modules' `HANDLERS`, joined and gated.

Add a family module by importing it here and listing it in `_FAMILIES`; an API
key served by two modules is a programming error caught at import, and so is a
row whose `via` names no native API.

Each row runs behind the gate (`gated`), which reads the row's declaration
(`KafkaApi.requires`, `KafkaApi.via`; broker/security/requires.py) before the
adapter runs: on a SASL listener, an API that is not `before_login` is refused
until the login (SASL_AUTHENTICATION_FAILED where the response has a top-level
error code, else the connection closes unanswered, as Kafka closes it; audited
either way), whether or not the adapter would reach a native handler; then the
row's `whole` right (FindCoordinator's group, OffsetDelete's, DescribeCluster's
cluster), answered in the row's `refused` shape or with the top-level code; a
row that declares nothing is refused to all but super users
(CLUSTER_AUTHORIZATION_FAILED). The adapter then gets the declaration on its
`KafkaCall`, and may check only the rights it declares (`KafkaCall.permits`).
"""

from __future__ import annotations

from types import ModuleType

from broker import dispatch
from broker.authz.access import access_for, refuse_unless, require_login
from broker.authz.gate import whole_name
from broker.context import Deferred
from broker.kafka import (
    admin,
    client_quotas,
    cluster_admin,
    core,
    groups,
    leader_epoch,
    producer_ids,
    scram_users,
    security,
    transactions,
)
from broker.kafka.call import KafkaAnswer, KafkaApi, KafkaCall, KafkaHandler
from broker.security.requires import LOGGED_IN, UNDECLARED
from protocol.errors import TidelogError
from protocol.kafka.codec import APIS_BY_KEY
from protocol.kafka.errors import for_tidelog_code
from protocol.kafka.messages import API_VERSIONS
from protocol.kafka.schema import VersionRange, version_range

_FAMILIES: tuple[ModuleType, ...] = (
    core,
    admin,
    cluster_admin,
    client_quotas,
    scram_users,
    leader_epoch,
    groups,
    producer_ids,
    security,
    transactions,
)


def gated(api: KafkaApi) -> KafkaHandler:
    """`api.handler` behind the login gate and its row's declaration."""
    requires = api.requires or (LOGGED_IN if api.via else UNDECLARED)
    handler = api.handler

    async def run(call: KafkaCall) -> KafkaAnswer | Deferred[KafkaAnswer] | None:
        ctx, name = call.ctx, call.request.api.name
        if ctx.security is not None and not requires.before_login:
            require_login(ctx, name)
        access = access_for(ctx, name) if requires.whole is not None else None
        if access is not None and requires.whole is not None:
            try:
                refuse_unless(access, requires.whole, whole_name(requires, call.body))
            except TidelogError as refusal:
                if api.refused is None:
                    raise  # the connection answers its top-level error code
                return api.refused(call, for_tidelog_code(refusal.code), refusal.message)
        return await handler(KafkaCall(call.ctx, call.conn, call.request, requires))

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
            served_range(key, row)  # a version outside the table is caught here
            joined[key] = row
    return joined


def served_range(key: int, row: KafkaApi | None) -> VersionRange:
    """The versions a row serves: its `versions`, or its API's whole table. A range the
    table does not cover (the codec could not read it) is a programming error."""
    api = APIS_BY_KEY.get(key)
    if api is None:
        raise RuntimeError(f"Kafka API key {key} has no table in protocol/kafka/messages.py")
    table = version_range(api.versions)
    if row is None or row.versions is None:
        return table
    served = version_range(row.versions)
    if served.empty or served.low < table.low or served.high > table.high:
        raise RuntimeError(f"{api.name} serves {row.versions}, its table covers {api.versions}")
    return served


def undeclared(rows: dict[int, KafkaApi]) -> list[int]:
    """The API keys whose row declares nothing (they are refused to all but super users)."""
    return sorted(key for key, row in rows.items() if not row.declared)


KAFKA_APIS: dict[int, KafkaApi] = join(_FAMILIES)
# What the connection runs: every row behind its gate.
KAFKA_HANDLERS: dict[int, KafkaHandler] = {key: gated(row) for key, row in KAFKA_APIS.items()}
# What ApiVersions advertises and the connection accepts: each row's versions, and
# ApiVersions' own (answered by the connection) at its whole table.
SERVED_VERSIONS: dict[int, VersionRange] = {
    **{key: served_range(key, row) for key, row in KAFKA_APIS.items()},
    API_VERSIONS.key: served_range(API_VERSIONS.key, None),
}
