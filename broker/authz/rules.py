"""How a msgpack API answers the entries its `each` right denies, Kafka's way.

The gate (broker/authz/gate.py) checks a row's login and `whole` right before the
handler runs; when the row also declares `each` (a right on every topic or group
the request names), its shape here decides the answer:

- `partitions_denied`: a denied topic's partitions answer TOPIC_AUTHORIZATION_FAILED
  beside the others (produce, fetch, the offset lookups, delete_records; writing to
  a missing topic also needs Create, on the cluster or the topic, to auto-create it);
- `topics_hidden`: metadata for every topic shows only the ones the principal may
  describe; asked by name, the others answer TOPIC_AUTHORIZATION_FAILED;
- `group_topics`: commit_offsets, fetch_offsets: each topic as `partitions_denied`
  (all topics: filtered);
- `every_group`: describe_groups, delete_groups: a denied group refuses the request
  (GROUP_AUTHORIZATION_FAILED; the Kafka adapters ask one group at a time);
- `groups_listed`: list_groups: every group with Describe on the cluster, else the
  ones the principal may describe.

Every denial is audited and counted.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from broker.authz.access import Access, denied_message, refuse_unless
from broker.context import Answer, Body, BrokerContext, Deferred, Handler
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.security.requires import Right
from protocol.errors import TopicAuthorizationFailed

OP = Operation
TOPIC, CLUSTER = ResourceType.TOPIC, ResourceType.CLUSTER
DENIED = TopicAuthorizationFailed.code
_CREATE = Right(OP.CREATE, TOPIC, or_cluster=True)

Result = Answer | Deferred[Answer] | None
# A row's shape: the request's view of the authorizer, the row's `each` right, the
# handler and its arguments -> the answer with the denied entries answered.
Shape = Callable[[Access, Right, Handler, BrokerContext, Body], Awaitable[Result]]


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


def partitions_denied(**failed_fields: Any) -> Shape:
    """The right on every topic of `body.topics`; denied ones get per-partition errors."""

    async def apply(
        access: Access, right: Right, handler: Handler, ctx: BrokerContext, body: Body
    ) -> Result:
        allowed: list[dict[str, Any]] = []
        denied: list[dict[str, Any]] = []
        for entry in body["topics"]:
            ok = access.holds(right, entry["topic"])
            if ok and right.operation is OP.WRITE:
                ok = _may_write_to(access, ctx, entry["topic"])
            (allowed if ok else denied).append(entry)
        if not denied:
            return await handler(ctx, body)
        entries = [_denied_topic(entry, right.operation, failed_fields) for entry in denied]
        if allowed:
            return _with_topics(await handler(ctx, {**body, "topics": allowed}), entries)
        if body.get("acks") == 0:  # a produce that asked for no answer gets none
            return None
        return {"topics": entries}

    return apply


def _may_write_to(access: Access, ctx: BrokerContext, topic: str) -> bool:
    """Writing to a missing topic creates it: that needs Create as well."""
    if not ctx.config.auto_create_topics_enable or topic in ctx.manager.topics():
        return True
    return access.holds(_CREATE, topic)


def _denied_topic(entry: dict[str, Any], op: Operation, fields: dict[str, Any]) -> dict[str, Any]:
    message = denied_message(op, TOPIC, entry["topic"])
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


async def topics_hidden(
    access: Access, right: Right, handler: Handler, ctx: BrokerContext, body: Body
) -> Result:
    names = body["topics"]
    op = right.operation
    if names is None:  # every topic: show only what the principal may describe
        answer = await handler(ctx, body)
        assert isinstance(answer, dict)
        shown = [t for t in answer["topics"] if access.allowed(op, TOPIC, t["topic"])]
        return {**answer, "topics": shown}
    allowed = [n for n in names if access.holds(right, n)]
    denied = [
        {
            "topic": n,
            "error": DENIED,
            "message": denied_message(op, TOPIC, n),
            "configs": {},
            "partitions": [],
        }
        for n in names
        if n not in allowed
    ]
    answer = await handler(ctx, {**body, "topics": allowed}) if allowed else {"topics": []}
    return _with_topics(answer, denied)


def group_topics(**failed_fields: Any) -> Shape:
    """The right on each topic of a group's request (all topics: filtered)."""
    topics_shape = partitions_denied(**failed_fields)

    async def apply(
        access: Access, right: Right, handler: Handler, ctx: BrokerContext, body: Body
    ) -> Result:
        if body.get("topics") is not None:
            return await topics_shape(access, right, handler, ctx, body)
        answer = await handler(ctx, body)
        assert isinstance(answer, dict)
        shown = [t for t in answer["topics"] if access.allowed(right.operation, TOPIC, t["topic"])]
        return {**answer, "topics": shown}

    return apply


async def every_group(
    access: Access, right: Right, handler: Handler, ctx: BrokerContext, body: Body
) -> Result:
    for group in body["groups"]:
        refuse_unless(access, right, group)
    return await handler(ctx, body)


async def groups_listed(
    access: Access, right: Right, handler: Handler, ctx: BrokerContext, body: Body
) -> Result:
    answer = await handler(ctx, body)
    if answer is None or access.allowed(right.operation, CLUSTER, CLUSTER_NAME):
        return answer
    assert isinstance(answer, dict)
    op, rtype = right.operation, right.resource
    shown = [g for g in answer["groups"] if access.allowed(op, rtype, g["group"])]
    return {**answer, "groups": shown}
