"""What each API needs from the authorizer, Kafka's rules applied to Tidelog's APIs.

- produce: Write on each topic (+ Create, on the cluster or the topic, to auto-create);
- fetch: Read on each topic; list_offsets, offset_for_time: Describe; delete_records: Delete;
  a denied topic's partitions answer TOPIC_AUTHORIZATION_FAILED beside the others;
- metadata: Describe on each topic; asked for all, the others are hidden; asked by
  name, they answer TOPIC_AUTHORIZATION_FAILED;
- create_topic: Create on the cluster or the topic; delete_topic: Delete;
  describe_configs: DescribeConfigs; alter_configs: AlterConfigs; explain_retention:
  Describe (TOPIC_AUTHORIZATION_FAILED);
- commit_offsets: Read on the group (GROUP_AUTHORIZATION_FAILED), Read on each topic;
  fetch_offsets: Describe on both;
- join_group, sync_group, heartbeat, leave_group: Read on the group; describe_groups:
  Describe on each group named, delete_groups: Delete on each (a denied one refuses
  the request, GROUP_AUTHORIZATION_FAILED; Kafka answers it per group); list_groups:
  every group with Describe on the cluster, else only those the principal may describe;
- create_acls, delete_acls: Alter on the cluster; describe_acls: Describe on it
  (CLUSTER_AUTHORIZATION_FAILED);
- api_versions, authenticate: nothing; init_producer_id: nothing beyond a login (Kafka
  asks IdempotentWrite on the cluster or Write on some topic; an id grants nothing
  here, since every produce is still checked for Write on its topics);
- any other API: Read on its `group` if it names one, else All on the cluster
  (GROUP_/CLUSTER_AUTHORIZATION_FAILED).

The last row fails closed: an API added later is refused to everyone but super users
until it gets a row here. Denied partitions are answered beside the allowed ones, as
Kafka does; every denial is audited and counted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.context import Answer, Body, BrokerContext, Deferred, Handler
from broker.security import audit
from broker.security.acl import CLUSTER_NAME, Authorizer, Operation, ResourceType
from protocol.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    TopicAuthorizationFailed,
)

OP = Operation
TOPIC, GROUP, CLUSTER = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
DENIED = TopicAuthorizationFailed.code


@dataclass(frozen=True, slots=True)
class Access:
    """One request's view of the authorizer: who asks, from where, for which API."""

    ctx: BrokerContext
    authorizer: Authorizer
    principal: str
    host: str
    api: str

    def allowed(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        """The decision alone (for filtering what a principal may see)."""
        return self.authorizer.authorize(self.principal, self.host, op, rtype, name)

    def require(self, op: Operation, rtype: ResourceType, name: str) -> bool:
        """The decision; a denial is audited and counted."""
        if self.allowed(op, rtype, name):
            return True
        audit.request_denied(self.principal, self.host, self.api, rtype.value, name, op.value)
        self.ctx.metrics.get("tidelog_authorization_denied").labels(self.api).inc()
        return False


Result = Answer | Deferred[Answer] | None
Policy = Callable[[Access, Handler, BrokerContext, Body], Awaitable[Result]]


def _denied_message(op: Operation, rtype: ResourceType, name: str) -> str:
    return f"not authorized to {op.value} {rtype.value.lower()} {name!r}"


def _with_topics(result: Result, extra: list[dict[str, Any]]) -> Result:
    """`result` with `extra` topic entries appended (also once a Deferred finishes)."""
    if result is None or not extra:
        return result
    if isinstance(result, Deferred):
        inner = result

        async def finish() -> Answer:
            answer = await inner.finish()
            return {**answer, "topics": [*answer["topics"], *extra]}

        return Deferred(finish)
    return {**result, "topics": [*result["topics"], *extra]}


def per_topic(op: Operation, **failed_fields: Any) -> Policy:
    """`op` on every topic of `body.topics`; denied ones get per-partition errors."""

    async def apply(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
        allowed: list[dict[str, Any]] = []
        denied: list[dict[str, Any]] = []
        for entry in body["topics"]:
            ok = access.require(op, TOPIC, entry["topic"])
            if ok and access.api == "produce":
                ok = _may_write_to(access, ctx, entry["topic"])
            (allowed if ok else denied).append(entry)
        if not denied:
            return await handler(ctx, body)
        entries = [_denied_topic(entry, op, failed_fields) for entry in denied]
        if allowed:
            return _with_topics(await handler(ctx, {**body, "topics": allowed}), entries)
        if access.api == "produce" and body.get("acks") == 0:
            return None
        return {"topics": entries}

    return apply


def _may_write_to(access: Access, ctx: BrokerContext, topic: str) -> bool:
    """Writing to a missing topic creates it: that needs Create as well."""
    if not ctx.config.auto_create_topics_enable or topic in ctx.manager.topics():
        return True
    return access.allowed(OP.CREATE, CLUSTER, CLUSTER_NAME) or access.require(
        OP.CREATE, TOPIC, topic
    )


def _denied_topic(entry: dict[str, Any], op: Operation, fields: dict[str, Any]) -> dict[str, Any]:
    message = _denied_message(op, TOPIC, entry["topic"])
    parts = entry.get("partitions") or [{"partition": -1}]
    return {
        "topic": entry["topic"],
        "partitions": [
            {
                "partition": p["partition"] if isinstance(p, dict) else p,
                "error": DENIED,
                "message": message,
                **fields,
            }
            for p in parts
        ],
    }


def one_topic(op: Operation) -> Policy:
    """`op` on `body.topic` (Create: on the cluster or the topic)."""

    async def apply(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
        name = body["topic"]
        cluster_ok = op is OP.CREATE and access.allowed(OP.CREATE, CLUSTER, CLUSTER_NAME)
        if not (cluster_ok or access.require(op, TOPIC, name)):
            raise TopicAuthorizationFailed(_denied_message(op, TOPIC, name))
        return await handler(ctx, body)

    return apply


async def metadata(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
    names = body["topics"]
    if names is None:  # every topic: show only what the principal may describe
        answer = await handler(ctx, body)
        assert isinstance(answer, dict)
        shown = [t for t in answer["topics"] if access.allowed(OP.DESCRIBE, TOPIC, t["topic"])]
        return {**answer, "topics": shown}
    allowed = [n for n in names if access.require(OP.DESCRIBE, TOPIC, n)]
    denied = [
        {
            "topic": n,
            "error": DENIED,
            "message": _denied_message(OP.DESCRIBE, TOPIC, n),
            "configs": {},
            "partitions": [],
        }
        for n in names
        if n not in allowed
    ]
    answer = await handler(ctx, {**body, "topics": allowed}) if allowed else {"topics": []}
    return _with_topics(answer, denied)


def group_then_topics(group_op: Operation, topic_op: Operation, **failed_fields: Any) -> Policy:
    """`group_op` on `body.group`, then `topic_op` on each topic (all topics: filtered)."""
    topics_policy = per_topic(topic_op, **failed_fields)

    async def apply(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
        group = body["group"]
        if not access.require(group_op, GROUP, group):
            raise GroupAuthorizationFailed(_denied_message(group_op, GROUP, group))
        if body.get("topics") is not None:
            return await topics_policy(access, handler, ctx, body)
        answer = await handler(ctx, body)
        assert isinstance(answer, dict)
        shown = [t for t in answer["topics"] if access.allowed(topic_op, TOPIC, t["topic"])]
        return {**answer, "topics": shown}

    return apply


async def unlisted(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
    """An API without a row: Read on its group if it names one, else All on the cluster."""
    group = body.get("group") if isinstance(body, dict) else None
    if isinstance(group, str):
        if not access.require(OP.READ, GROUP, group):
            raise GroupAuthorizationFailed(_denied_message(OP.READ, GROUP, group))
    elif not access.require(OP.ALL, CLUSTER, CLUSTER_NAME):
        raise ClusterAuthorizationFailed(_denied_message(OP.ALL, CLUSTER, CLUSTER_NAME))
    return await handler(ctx, body)


def cluster(op: Operation) -> Policy:
    """`op` on the cluster resource (the ACL APIs: Alter to change, Describe to list)."""

    async def apply(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
        if not access.require(op, CLUSTER, CLUSTER_NAME):
            raise ClusterAuthorizationFailed(_denied_message(op, CLUSTER, CLUSTER_NAME))
        return await handler(ctx, body)

    return apply


async def anyone(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
    return await handler(ctx, body)


def one_group(op: Operation) -> Policy:
    """`op` on the request's `group` (the membership APIs)."""

    async def apply(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
        group = body["group"]
        if not access.require(op, GROUP, group):
            raise GroupAuthorizationFailed(_denied_message(op, GROUP, group))
        return await handler(ctx, body)

    return apply


def each_group(op: Operation) -> Policy:
    """`op` on every group in the request's `groups` (describe_groups, delete_groups)."""

    async def apply(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
        for group in body["groups"]:
            if not access.require(op, GROUP, group):
                raise GroupAuthorizationFailed(_denied_message(op, GROUP, group))
        return await handler(ctx, body)

    return apply


async def list_groups(access: Access, handler: Handler, ctx: BrokerContext, body: Body) -> Result:
    """All groups with Describe on the cluster, else the ones the principal may describe."""
    answer = await handler(ctx, body)
    if answer is None or access.allowed(OP.DESCRIBE, CLUSTER, CLUSTER_NAME):
        return answer
    assert isinstance(answer, dict)
    shown = [g for g in answer["groups"] if access.allowed(OP.DESCRIBE, GROUP, g["group"])]
    return {**answer, "groups": shown}


_OFFSET_FAILED = {"offset": None, "timestamp": None}
POLICIES: dict[str, Policy] = {
    "api_versions": anyone,
    "authenticate": anyone,
    "produce": per_topic(OP.WRITE, base_offset=-1, log_append_time=-1, log_start_offset=-1),
    "fetch": per_topic(OP.READ, high_watermark=-1, log_start_offset=-1, records=b""),
    "list_offsets": per_topic(OP.DESCRIBE, **_OFFSET_FAILED),
    "offset_for_time": per_topic(OP.DESCRIBE, **_OFFSET_FAILED),
    "delete_records": per_topic(OP.DELETE, low_watermark=-1),
    "metadata": metadata,
    "create_topic": one_topic(OP.CREATE),
    "delete_topic": one_topic(OP.DELETE),
    "describe_configs": one_topic(OP.DESCRIBE_CONFIGS),
    "alter_configs": one_topic(OP.ALTER_CONFIGS),
    "explain_retention": one_topic(OP.DESCRIBE),
    "commit_offsets": group_then_topics(OP.READ, OP.READ),
    "fetch_offsets": group_then_topics(OP.DESCRIBE, OP.DESCRIBE, offset=-1, metadata=""),
    "join_group": one_group(OP.READ),
    "sync_group": one_group(OP.READ),
    "heartbeat": one_group(OP.READ),
    "leave_group": one_group(OP.READ),
    "describe_groups": each_group(OP.DESCRIBE),
    "delete_groups": each_group(OP.DELETE),
    "list_groups": list_groups,
    "init_producer_id": anyone,
    "create_acls": cluster(OP.ALTER),
    "delete_acls": cluster(OP.ALTER),
    "describe_acls": cluster(OP.DESCRIBE),
}


def policy_for(api: str) -> Policy:
    return POLICIES.get(api, unlisted)
