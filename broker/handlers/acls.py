"""`create_acls`, `describe_acls`, `delete_acls` (docs/protocol.md §9, docs/security.md).

The ACLs of `acls.json` over the wire, as `tidelog acls` edits them offline; Kafka's
CreateAcls/DescribeAcls/DeleteAcls (broker/kafka/security.py) call these. A change
applies to the next request. With the authorizer off they answer SECURITY_DISABLED,
as Kafka does; who may call them is the authorizer's business (Alter on the cluster
to change, Describe to list: broker/security/policy.py).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import trio

from broker.context import Answer, Body, BrokerContext
from broker.security.acl import (
    MATCH,
    AclBinding,
    AclFilter,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    parse_enum,
)
from broker.security.acl_store import AclStore
from protocol.errors import InvalidRequest, SecurityDisabled


def _store(ctx: BrokerContext) -> AclStore:
    security = ctx.security
    if security is None or not security.authorizer_enabled:
        raise SecurityDisabled("the authorizer is off (authorizer=on enables ACLs)")
    return security.acls


def acl_filter(entry: dict[str, Any]) -> AclFilter:
    """A wire filter (nil = any) as an AclFilter; InvalidRequest naming a bad value.
    `pattern_type` `Match` selects what applies to `resource_name`, as Kafka's MATCH."""
    if str(entry.get("pattern_type")).lower() == MATCH.lower():
        name = entry.get("resource_name")
        unnamed = acl_filter({**entry, "pattern_type": None, "resource_name": None})
        return replace(unnamed, applies_to=name)
    kinds = {
        "resource_type": ResourceType,
        "pattern_type": PatternType,
        "operation": Operation,
        "permission": Permission,
    }
    try:
        typed = {
            name: parse_enum(kinds[name], value) if name in kinds and value is not None else value
            for name, value in entry.items()
        }
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc
    return AclFilter(**typed)


async def create_acls(ctx: BrokerContext, body: Body) -> Answer:
    store = _store(ctx)
    results: list[dict[str, Any]] = []
    valid: list[AclBinding] = []
    for entry in body["acls"]:
        try:
            valid.append(AclBinding.from_json(entry))
            results.append({"error": None, "message": None})
        except ValueError as exc:
            results.append({"error": InvalidRequest.code, "message": str(exc)})
    if valid:
        await trio.to_thread.run_sync(store.add, valid)
    return {"results": results}


async def describe_acls(ctx: BrokerContext, body: Body) -> Answer:
    store = _store(ctx)
    found = await trio.to_thread.run_sync(store.bindings, acl_filter(body))
    return {"acls": [binding.to_json() for binding in found]}


async def delete_acls(ctx: BrokerContext, body: Body) -> Answer:
    store = _store(ctx)
    results: list[dict[str, Any]] = []
    for entry in body["filters"]:
        try:
            selector = acl_filter(entry)
        except InvalidRequest as exc:
            results.append({"error": exc.code, "message": exc.message, "deleted": []})
            continue
        removed = await trio.to_thread.run_sync(store.remove, selector)
        results.append({"error": None, "message": None, "deleted": [b.to_json() for b in removed]})
    return {"results": results}
