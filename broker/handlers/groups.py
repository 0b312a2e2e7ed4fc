"""The consumer-group handlers: join_group, sync_group, heartbeat, leave_group,
list_groups, describe_groups, delete_groups (schemas in protocol/groups_schema.py).

Each turns a validated body into the coordinator's request (broker/groups/messages.py),
runs it through the group service (which waits for a Pending answer) and turns the
response back into a body. Errors are Kafka's group codes in the body's `error`
field; the Kafka adapters (broker/kafka/groups.py) call these same handlers.

A body may carry `require_known_member_id: False`, which no msgpack client can send
(validation drops unknown keys): the Kafka adapter sets it for JoinGroup v0-v3,
whose clients do not know MEMBER_ID_REQUIRED.
"""

from __future__ import annotations

from collections.abc import Callable

import structlog

from broker.context import BrokerContext
from broker.groups import (
    ErrorResponse,
    GroupCoordinator,
    GroupDescription,
    HeartbeatRequest,
    JoinRequest,
    JoinResponse,
    LeaveRequest,
    MemberIdentity,
    Pending,
    SyncRequest,
    SyncResponse,
)
from protocol import api_types as wire
from protocol.errors import (
    IllegalGeneration,
    MemberIdRequired,
    RebalanceInProgress,
    UnknownMemberId,
)

# What a client should do about the errors it must act on (the rest speak for themselves).
_ADVICE = {
    MemberIdRequired.code: "join again with the member_id of this answer",
    UnknownMemberId.code: "this member is not in the group (removed or expired): join again",
    IllegalGeneration.code: "the group moved to another generation: join again",
    RebalanceInProgress.code: "the group is rebalancing: join again",
}


class JoinGroupCall(wire.JoinGroupRequest, total=False):
    """A `join_group` body as the Kafka adapter may send it: the schema's keys and two
    more no msgpack body can carry (validation drops unknown keys)."""

    client_host: str  # the connection's host, as Kafka's broker reports it
    require_known_member_id: bool  # False for JoinGroup v0-v3


def _message(group: str, error: str | None) -> str | None:
    if error is None:
        return None
    advice = _ADVICE.get(error)
    return f"group {group}: {error}" + (f"; {advice}" if advice else "")


def _peer_host() -> str:
    """The client's address, as the connection bound it for its log lines."""
    peer = structlog.contextvars.get_contextvars().get("peer", "")
    return str(peer).rpartition(":")[0] or str(peer)


async def join_group(ctx: BrokerContext, body: JoinGroupCall) -> wire.JoinGroupAnswer:
    session_ms = body["session_timeout_ms"]
    rebalance_ms = body["rebalance_timeout_ms"]
    request = JoinRequest(
        group_id=body["group"],
        member_id=body["member_id"],
        protocol_type=body["protocol_type"],
        protocols=tuple((p["name"], bytes(p["metadata"])) for p in body["protocols"]),
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=session_ms if rebalance_ms < 0 else rebalance_ms,
        group_instance_id=body["group_instance_id"],
        client_id=body["client_id"],
        client_host=body.get("client_host") or _peer_host(),
        require_known_member_id=body.get("require_known_member_id", True),
    )
    response: JoinResponse = await ctx.groups.call(lambda c: c.join_group(request))
    return {
        "error": response.error,
        "message": _message(request.group_id, response.error),
        "generation": response.generation_id,
        "protocol_type": response.protocol_type,
        "protocol": response.protocol_name,
        "leader": response.leader_id,
        "member_id": response.member_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "metadata": m.metadata,
            }
            for m in response.members
        ],
    }


async def sync_group(ctx: BrokerContext, body: wire.SyncGroupRequest) -> wire.SyncGroupAnswer:
    request = SyncRequest(
        group_id=body["group"],
        member_id=body["member_id"],
        generation_id=body["generation"],
        assignments={a["member_id"]: bytes(a["assignment"]) for a in body["assignments"]},
        group_instance_id=body["group_instance_id"],
        protocol_type=body["protocol_type"],
        protocol_name=body["protocol"],
    )
    response: SyncResponse = await ctx.groups.call(lambda c: c.sync_group(request))
    return {
        "error": response.error,
        "message": _message(request.group_id, response.error),
        "protocol_type": response.protocol_type,
        "protocol": response.protocol_name,
        "assignment": response.assignment,
    }


async def heartbeat(ctx: BrokerContext, body: wire.HeartbeatRequest) -> wire.HeartbeatAnswer:
    request = HeartbeatRequest(
        group_id=body["group"],
        member_id=body["member_id"],
        generation_id=body["generation"],
        group_instance_id=body["group_instance_id"],
    )
    response = await ctx.groups.call(lambda c: c.heartbeat(request))
    return {"error": response.error, "message": _message(request.group_id, response.error)}


async def leave_group(ctx: BrokerContext, body: wire.LeaveGroupRequest) -> wire.LeaveGroupAnswer:
    request = LeaveRequest(
        group_id=body["group"],
        members=tuple(
            MemberIdentity(m["member_id"], m["group_instance_id"]) for m in body["members"]
        ),
    )
    response = await ctx.groups.call(lambda c: c.leave_group(request))
    return {
        "error": response.error,
        "message": _message(request.group_id, response.error),
        "members": [
            {
                "member_id": identity.member_id,
                "group_instance_id": identity.group_instance_id,
                "error": error,
            }
            for identity, error in response.members
        ],
    }


async def list_groups(ctx: BrokerContext, body: wire.ListGroupsRequest) -> wire.ListGroupsAnswer:
    groups = await ctx.groups.query(lambda c: c.list_groups())
    return {
        "groups": [
            {"group": group, "state": state, "protocol_type": protocol_type}
            for group, state, protocol_type in groups
        ]
    }


def _described(group: str, description: GroupDescription | None) -> wire.DescribeGroupsGroupAnswer:
    """Kafka's answer for a group it does not know: no error, state Dead."""
    if description is None:
        return {
            "group": group,
            "error": None,
            "message": None,
            "state": "Dead",
            "protocol_type": None,
            "protocol": None,
            "generation": -1,
            "leader": None,
            "members": [],
        }
    meta = description.metadata
    return {
        "group": group,
        "error": None,
        "message": None,
        "state": description.state,
        "protocol_type": meta.protocol_type,
        "protocol": meta.protocol_name,
        "generation": meta.generation_id,
        "leader": meta.leader_id,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "metadata": m.subscription,
                "assignment": m.assignment,
            }
            for m in meta.members
        ],
    }


async def describe_groups(
    ctx: BrokerContext, body: wire.DescribeGroupsRequest
) -> wire.DescribeGroupsAnswer:
    described = await ctx.groups.query(lambda c: [(g, c.describe_group(g)) for g in body["groups"]])
    return {"groups": [_described(group, d) for group, d in described]}


async def delete_groups(
    ctx: BrokerContext, body: wire.DeleteGroupsRequest
) -> wire.DeleteGroupsAnswer:
    """Each group separately: only an Empty group is deleted (NON_EMPTY_GROUP otherwise)."""
    answers: list[wire.DeleteGroupsGroupAnswer] = []
    for group in body["groups"]:
        response = await ctx.groups.call(_delete(group))
        answers.append(
            {"group": group, "error": response.error, "message": _message(group, response.error)}
        )
    return {"groups": answers}


def _delete(group: str) -> Callable[[GroupCoordinator], ErrorResponse | Pending]:
    return lambda c: c.delete_group(group)
