"""The API table: API names (docs/protocol.md §4) -> handlers, shared by every codec.

A codec (the msgpack one, broker/native/requests.py; the Kafka adapters of
broker/kafka/ call the same rows) turns bytes into an API name and a validated
body, asks `handler_for` which function answers it, awaits that function with the
broker's context, and turns the answer (a dict, None for nothing, or `Deferred`)
into its own bytes. Each row declares what it needs from the authorizer, and
`handler_for` hands out the handler behind that declaration (broker/authz/gate.py).
`failure` maps what a handler raised to an error code the same way
for every codec. Nothing here knows the wire format.
"""

from __future__ import annotations

from broker.authz import rules
from broker.authz.gate import NativeApi, guard
from broker.context import BrokerContext, Handler
from broker.handlers.acls import create_acls, delete_acls, describe_acls
from broker.handlers.authenticate import authenticate
from broker.handlers.explain import explain_retention
from broker.handlers.fetch import fetch
from broker.handlers.group_offsets import commit_offsets, fetch_offsets
from broker.handlers.groups import (
    delete_groups,
    describe_groups,
    heartbeat,
    join_group,
    leave_group,
    list_groups,
    sync_group,
)
from broker.handlers.offsets import delete_records, list_offsets, offset_for_time
from broker.handlers.produce import produce
from broker.handlers.producer_ids import init_producer_id
from broker.handlers.remote_segments import remote_segments
from broker.handlers.topics import (
    alter_configs,
    create_topic,
    delete_topic,
    describe_configs,
    metadata,
)
from broker.handlers.transactions import list_transactions
from broker.logging import get_logger
from broker.security.acl import Operation as OP
from broker.security.acl import ResourceType
from broker.security.requires import (
    ANYONE,
    LOGGED_IN,
    UNDECLARED,
    Right,
    each_group,
    each_topic,
    on_cluster,
    on_group,
    on_topic,
)
from protocol.api_types import ApiVersionsAnswer, ApiVersionsRequest
from protocol.errors import InvalidRequest, TidelogError, UnknownServerError
from protocol.schemas import API_VERSIONS

log = get_logger(component="handlers")

SERVER_NAME = "tidelog"
try:
    from importlib.metadata import version as _dist_version

    SERVER_VERSION = _dist_version("tidelog")
except Exception:  # running from a tree that was never installed
    SERVER_VERSION = "0.0.0"


async def api_versions(ctx: BrokerContext, body: ApiVersionsRequest) -> ApiVersionsAnswer:
    """`api_versions`: exactly the APIs of this table, and the broker's size limits."""
    return {
        "server": SERVER_NAME,
        "version": SERVER_VERSION,
        "apis": {name: list(API_VERSIONS.get(name, (1, 1))) for name in sorted(HANDLERS)},
        "limits": {
            "socket.request.max.bytes": ctx.config.socket_request_max_bytes,
            "message.max.bytes": ctx.config.message_max_bytes,
        },
    }


# One row per API; its schema is in protocol/ (protocol.apis registers every one), and
# what it needs from the authorizer is declared beside it (broker/security/requires.py;
# a row without `requires` is refused to all but super users). api_versions reports
# exactly these names.
_DENIED_PARTITION = {"offset": None, "timestamp": None}
APIS: dict[str, NativeApi] = {
    "api_versions": NativeApi(api_versions, ANYONE),
    # topics and configs (broker/handlers/topics.py)
    "create_topic": NativeApi(create_topic, on_topic(OP.CREATE)),
    "delete_topic": NativeApi(delete_topic, on_topic(OP.DELETE)),
    "metadata": NativeApi(metadata, each_topic(OP.DESCRIBE), rules.topics_hidden),
    "describe_configs": NativeApi(describe_configs, on_topic(OP.DESCRIBE_CONFIGS)),
    "alter_configs": NativeApi(alter_configs, on_topic(OP.ALTER_CONFIGS)),
    "produce": NativeApi(
        produce,
        each_topic(OP.WRITE),
        rules.partitions_denied(base_offset=-1, log_append_time=-1, log_start_offset=-1),
    ),
    "fetch": NativeApi(
        fetch,
        each_topic(OP.READ),
        rules.partitions_denied(high_watermark=-1, log_start_offset=-1, records=b""),
    ),
    # offsets over partitions (broker/handlers/offsets.py)
    "list_offsets": NativeApi(
        list_offsets, each_topic(OP.DESCRIBE), rules.partitions_denied(**_DENIED_PARTITION)
    ),
    "offset_for_time": NativeApi(
        offset_for_time, each_topic(OP.DESCRIBE), rules.partitions_denied(**_DENIED_PARTITION)
    ),
    "delete_records": NativeApi(
        delete_records, each_topic(OP.DELETE), rules.partitions_denied(low_watermark=-1)
    ),
    # Extension (docs/retention.md; schema in protocol/retention_schema.py).
    "explain_retention": NativeApi(explain_retention, on_topic(OP.DESCRIBE_CONFIGS)),
    # Extension (docs/tiered-storage.md; schema in protocol/remote_schema.py): it names
    # where a topic's records are, so it needs Read, as fetch does.
    "remote_segments": NativeApi(remote_segments, on_topic(OP.READ)),
    # Extension (docs/compaction.md §9; schema in protocol/offsets_schema.py).
    "commit_offsets": NativeApi(
        commit_offsets,
        on_group(OP.READ, each=Right(OP.READ, ResourceType.TOPIC)),
        rules.group_topics(),
    ),
    "fetch_offsets": NativeApi(
        fetch_offsets,
        on_group(OP.DESCRIBE, each=Right(OP.DESCRIBE, ResourceType.TOPIC)),
        rules.group_topics(offset=-1, metadata=""),
    ),
    # Extension (docs/idempotence.md; schema in protocol/schemas.py). Kafka asks
    # IdempotentWrite on the cluster or Write on some topic; an id grants nothing here,
    # since every produce is still checked for Write on its topics.
    "init_producer_id": NativeApi(init_producer_id, LOGGED_IN),
    # Extension (docs/groups.md; schema in protocol/groups_schema.py).
    "join_group": NativeApi(join_group, on_group(OP.READ)),
    "sync_group": NativeApi(sync_group, on_group(OP.READ)),
    "heartbeat": NativeApi(heartbeat, on_group(OP.READ)),
    "leave_group": NativeApi(leave_group, on_group(OP.READ)),
    "list_groups": NativeApi(list_groups, each_group(OP.DESCRIBE), rules.groups_listed),
    "describe_groups": NativeApi(describe_groups, each_group(OP.DESCRIBE), rules.every_group),
    "delete_groups": NativeApi(delete_groups, each_group(OP.DELETE), rules.every_group),
    # Extension (docs/transactions.md; schema in protocol/transactions_schema.py): the
    # names of transactional ids are shown to who may describe the cluster.
    "list_transactions": NativeApi(list_transactions, on_cluster(OP.DESCRIBE)),
    # Extension (docs/protocol.md §9, docs/security.md; schema in protocol/schemas.py).
    "authenticate": NativeApi(authenticate, ANYONE),
    "create_acls": NativeApi(create_acls, on_cluster(OP.ALTER)),
    "describe_acls": NativeApi(describe_acls, on_cluster(OP.DESCRIBE)),
    "delete_acls": NativeApi(delete_acls, on_cluster(OP.ALTER)),
}
# The handlers alone, by API name (a test may swap one; its row's declaration stays).
HANDLERS: dict[str, Handler] = {name: row.handler for name, row in APIS.items()}
# The same handlers behind the login gate and their row's declared rights
# (broker/authz/gate.py), built on first use (and again if a row changes), so every
# row is guarded: api -> (the row's handler, its guarded form).
_GUARDED: dict[str, tuple[Handler, Handler]] = {}


def handler_for(api: str) -> Handler:
    """The guarded handler of `api` (what every codec runs); INVALID_REQUEST if unknown.

    A handler registered without a row in `APIS` runs behind `UNDECLARED`."""
    handler = HANDLERS.get(api)
    if handler is None:
        raise InvalidRequest(f"api: unknown api {api!r}")
    cached = _GUARDED.get(api)
    if cached is None or cached[0] is not handler:
        cached = _GUARDED[api] = (handler, guard(api, handler, APIS.get(api)))
    return cached[1]


def undeclared() -> list[str]:
    """The registered APIs without an authorization declaration of their own."""
    rows = {name: APIS.get(name) for name in HANDLERS}
    return sorted(name for name, row in rows.items() if row is None or row.requires is UNDECLARED)


def failure(api: str, exc: Exception) -> TidelogError:
    """The error to answer for an exception escaping a handler (unexpected ones are logged)."""
    if isinstance(exc, TidelogError):
        log.info("request_failed", api=api, error=exc.code, reason=exc.message)
        return exc
    log.error("request_crashed", api=api, exc_info=exc)
    return UnknownServerError(f"{type(exc).__name__}: {exc}")
