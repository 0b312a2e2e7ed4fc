"""One request's view of the authorizer, and the login gate, shared by both codecs.

Every decision that refuses something is audited and counted
(`tidelog_authorization_denied{api}`); a decision that only filters what a
principal sees (`Access.allowed`, `allows`) is neither.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.context import BrokerContext
from broker.security import audit
from broker.security.acl import ANONYMOUS, CLUSTER_NAME, Authorizer, Operation, ResourceType
from broker.security.requires import Right
from broker.security.session import current_session
from protocol.errors import (
    ClusterAuthorizationFailed,
    GroupAuthorizationFailed,
    SaslAuthenticationFailed,
    TidelogError,
    TopicAuthorizationFailed,
)

# The error that refuses a whole request for want of a right on this resource type.
REFUSAL: dict[ResourceType, type[TidelogError]] = {
    ResourceType.TOPIC: TopicAuthorizationFailed,
    ResourceType.GROUP: GroupAuthorizationFailed,
    ResourceType.CLUSTER: ClusterAuthorizationFailed,
}


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

    def holds(self, right: Right, name: str) -> bool:
        """`right` on `name` (or on the cluster, when it grants it); a denial is audited."""
        if right.or_cluster and self.allowed(right.operation, ResourceType.CLUSTER, CLUSTER_NAME):
            return True
        return self.require(right.operation, right.resource, name)


def denied_message(op: Operation, rtype: ResourceType, name: str) -> str:
    return f"not authorized to {op.value} {rtype.value.lower()} {name!r}"


def refuse_unless(access: Access, right: Right, name: str) -> None:
    """Raise the resource type's authorization error unless `right` is held on `name`."""
    if not access.holds(right, name):
        raise REFUSAL[right.resource](denied_message(right.operation, right.resource, name))


def require_login(ctx: BrokerContext, api: str) -> None:
    """Before a SASL login only the exchange itself is served: the rest is refused,
    audited, and the connection closes."""
    session = current_session()
    if session is not None and not session.authenticated:
        audit.request_denied(ANONYMOUS, session.client_host, api, "Cluster", "-", "Any")
        ctx.metrics.get("tidelog_authorization_denied").labels(api).inc()
        session.request_close()
        raise SaslAuthenticationFailed(
            f"{api}: this listener requires SASL authentication first (authenticate)"
        )


def access_for(ctx: BrokerContext, api: str) -> Access | None:
    """The current session's view of the authorizer; None when no authorizer runs."""
    security = ctx.security
    if security is None or not security.authorizer_enabled:
        return None
    session = current_session()
    return Access(
        ctx,
        security.acls.authorizer(),
        session.principal if session is not None else ANONYMOUS,
        session.client_host if session is not None else "memory",
        api,
    )


def permits(ctx: BrokerContext, api: str, right: Right, name: str) -> bool:
    """The authorizer's answer for `right` on `name`: True when no authorizer runs; a
    denial is audited and counted as the rules' are."""
    access = access_for(ctx, api)
    return access is None or access.holds(right, name)


def allows(ctx: BrokerContext, op: Operation, rtype: ResourceType, name: str) -> bool:
    """`permits` without the audit: for what a principal may see or is told it may do
    (DescribeCluster's operations), whose absence alone is no denial."""
    access = access_for(ctx, "-")
    return access is None or access.allowed(op, rtype, name)
