"""`create_acls`, `describe_acls`, `delete_acls` (docs/protocol.md §9, docs/security.md).

The ACLs of `acls.json` over the wire, as `tidelog acls` edits them offline; Kafka's
CreateAcls/DescribeAcls/DeleteAcls (broker/kafka/security.py) call these. A change
applies to the next request. With the authorizer off they answer SECURITY_DISABLED,
as Kafka does; who may call them is the authorizer's business (Alter on the cluster
to change, Describe to list: their rows in broker/dispatch.py).
"""

from __future__ import annotations

from dataclasses import replace
from enum import StrEnum
from typing import TypeVar

from broker import offload
from broker.context import BrokerContext
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
from protocol import api_types as wire
from protocol.errors import InvalidRequest, SecurityDisabled

E = TypeVar("E", bound=StrEnum)


def _store(ctx: BrokerContext) -> AclStore:
    security = ctx.security
    if security is None or not security.authorizer_enabled:
        raise SecurityDisabled("the authorizer is off (authorizer=on enables ACLs)")
    return security.acls


def acl_filter(entry: wire.AclFilter) -> AclFilter:
    """A wire filter (nil = any) as an AclFilter; InvalidRequest naming a bad value.
    `pattern_type` `Match` selects what applies to `resource_name`, as Kafka's MATCH."""
    if str(entry.get("pattern_type")).lower() == MATCH.lower():
        name = entry.get("resource_name")
        unnamed = acl_filter({**entry, "pattern_type": None, "resource_name": None})
        return replace(unnamed, applies_to=name)
    try:
        return AclFilter(
            principal=entry.get("principal"),
            host=entry.get("host"),
            resource_type=_enum(ResourceType, entry.get("resource_type")),
            resource_name=entry.get("resource_name"),
            pattern_type=_enum(PatternType, entry.get("pattern_type")),
            operation=_enum(Operation, entry.get("operation")),
            permission=_enum(Permission, entry.get("permission")),
        )
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from exc


def _enum(kind: type[E], value: str | None) -> E | None:
    return None if value is None else parse_enum(kind, value)


async def create_acls(ctx: BrokerContext, body: wire.CreateAclsRequest) -> wire.CreateAclsAnswer:
    store = _store(ctx)
    results: list[wire.AclResult] = []
    valid: list[AclBinding] = []
    for entry in body["acls"]:
        try:
            valid.append(AclBinding.from_json(entry))
            results.append({"error": None, "message": None})
        except ValueError as exc:
            results.append({"error": InvalidRequest.code, "message": str(exc)})
    if valid:
        await offload.to_worker(store.add, valid)
    return {"results": results}


async def describe_acls(
    ctx: BrokerContext, body: wire.DescribeAclsRequest
) -> wire.DescribeAclsAnswer:
    store = _store(ctx)
    found = await offload.to_worker(store.bindings, acl_filter(body))
    return {"acls": [binding.to_json() for binding in found]}


async def delete_acls(ctx: BrokerContext, body: wire.DeleteAclsRequest) -> wire.DeleteAclsAnswer:
    store = _store(ctx)
    results: list[wire.DeleteAclsResultAnswer] = []
    for entry in body["filters"]:
        try:
            selector = acl_filter(entry)
        except InvalidRequest as exc:
            results.append({"error": exc.code, "message": exc.message, "deleted": []})
            continue
        removed = await offload.to_worker(store.remove, selector)
        results.append({"error": None, "message": None, "deleted": [b.to_json() for b in removed]})
    return {"results": results}
