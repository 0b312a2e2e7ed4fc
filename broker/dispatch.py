"""The API table: API names (PROTOCOL.md §4) -> handlers, shared by every codec.

A codec (today the msgpack one, broker/native_codec.py; the Kafka listener next)
turns bytes into an API name and a validated body, asks `handler_for` which
function answers it, awaits that function with the broker's context, and turns
the answer (a dict, None for nothing, or `Deferred`) into its own bytes.
`failure` and `first_error` map what a handler raised or answered to error codes
and metrics the same way for every codec. Nothing here knows the wire format.
"""

from __future__ import annotations

from broker.context import Answer, BrokerContext, Handler
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
from broker.handlers.topics import (
    alter_configs,
    create_topic,
    delete_topic,
    describe_configs,
    metadata,
)
from broker.logging import get_logger
from broker.security.gate import guard
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


# One row per API; its schema is in protocol/ (protocol.apis registers every one).
# api_versions reports exactly these names.
HANDLERS: dict[str, Handler] = {
    "api_versions": api_versions,
    # topics and configs (broker/handlers/topics.py)
    "create_topic": create_topic,
    "delete_topic": delete_topic,
    "metadata": metadata,
    "describe_configs": describe_configs,
    "alter_configs": alter_configs,
    "produce": produce,
    "fetch": fetch,
    # offsets over partitions (broker/handlers/offsets.py)
    "list_offsets": list_offsets,
    "offset_for_time": offset_for_time,
    "delete_records": delete_records,
    # Extension (docs/retention.md; schema in protocol/retention_schema.py).
    "explain_retention": explain_retention,
    # Extension (docs/compaction.md §9; schema in protocol/offsets_schema.py).
    "commit_offsets": commit_offsets,
    "fetch_offsets": fetch_offsets,
    # Extension (docs/idempotence.md; schema in protocol/schemas.py).
    "init_producer_id": init_producer_id,
    # Extension (docs/groups.md; schema in protocol/groups_schema.py).
    "join_group": join_group,
    "sync_group": sync_group,
    "heartbeat": heartbeat,
    "leave_group": leave_group,
    "list_groups": list_groups,
    "describe_groups": describe_groups,
    "delete_groups": delete_groups,
    # Extension (docs/protocol.md §9, docs/security.md; schema in protocol/schemas.py).
    "authenticate": authenticate,
    "create_acls": create_acls,
    "describe_acls": describe_acls,
    "delete_acls": delete_acls,
}
# The same handlers behind authentication and authorization (broker/security/gate.py),
# built on first use (and again if a row changes), so every row is guarded: api ->
# (the row's handler, its guarded form).
_GUARDED: dict[str, tuple[Handler, Handler]] = {}


def handler_for(api: str) -> Handler:
    """The guarded handler of `api` (what every codec runs); INVALID_REQUEST if unknown."""
    handler = HANDLERS.get(api)
    if handler is None:
        raise InvalidRequest(f"api: unknown api {api!r}")
    cached = _GUARDED.get(api)
    if cached is None or cached[0] is not handler:
        cached = _GUARDED[api] = (handler, guard(api, handler))
    return cached[1]


def first_error(body: Answer) -> str | None:
    """The first per-topic or per-partition error code in an answer, for metrics.

    A request counts as failed with that code (Kafka's failed-request and
    per-error meters count partition errors too).
    """
    for topic in body.get("topics", ()):
        error: str | None = topic.get("error")
        if error:
            return error
        for part in topic.get("partitions", ()):
            if isinstance(part, dict) and part.get("error"):
                return str(part["error"])
    return None


def failure(api: str, exc: Exception) -> TidelogError:
    """The error to answer for an exception escaping a handler (unexpected ones are logged)."""
    if isinstance(exc, TidelogError):
        log.info("request_failed", api=api, error=exc.code, reason=exc.message)
        return exc
    log.error("request_crashed", api=api, exc_info=exc)
    return UnknownServerError(f"{type(exc).__name__}: {exc}")
