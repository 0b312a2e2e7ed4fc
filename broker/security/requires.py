"""What an API needs from the authorizer, declared where the API is registered.

Every row of both API tables (broker/dispatch.py for msgpack, the Kafka family
modules joined by broker/kafka/registry.py) carries a `Requires`; the gate that
runs every row (broker/authz/) reads it before the handler runs:

- `before_login`: served on a SASL listener before the login (ApiVersions and the
  SASL exchange itself); every other API is refused there first;
- `whole`: one right for the whole request, on the cluster or on the one resource
  the body names in `name_from`; refused before the handler runs;
- `each`: a right on every resource the request names (its topics, its groups);
  the API's rule answers the denied ones beside the allowed ones, as Kafka does.

A row without a declaration is refused to everyone but super users
(`UNDECLARED`: All on the cluster): an API added later fails closed. Pure data: no
import of the broker's context, so `broker.security` stays below it.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.security.acl import Operation, ResourceType


@dataclass(frozen=True, slots=True)
class Right:
    """One operation on one type of resource."""

    operation: Operation
    resource: ResourceType
    # The same operation on the cluster grants it too (Kafka's rule for Create).
    or_cluster: bool = False

    def __str__(self) -> str:
        return f"{self.operation.value} on {self.resource.value.lower()}"


@dataclass(frozen=True, slots=True)
class Requires:
    """The rights an API needs, and whether it is served before a SASL login."""

    whole: Right | None = None
    name_from: str | None = None  # the body field naming `whole`'s resource
    each: Right | None = None
    before_login: bool = False

    def __post_init__(self) -> None:
        named = self.whole is not None and self.whole.resource is not ResourceType.CLUSTER
        if named != (self.name_from is not None):
            raise ValueError(f"{self}: a topic or group right names its body field, no other")
        if self.before_login and (self.whole or self.each):
            raise ValueError(f"{self}: an API served before the login can need no right")

    @property
    def rights(self) -> tuple[Right, ...]:
        return tuple(r for r in (self.whole, self.each) if r is not None)


# Served to anyone, before any login: ApiVersions and the SASL exchange.
ANYONE = Requires(before_login=True)
# Nothing beyond a login (init_producer_id: every produce is still checked).
LOGGED_IN = Requires()
# A row that declares nothing: All on the cluster, which only super users hold in practice.
UNDECLARED = Requires(whole=Right(Operation.ALL, ResourceType.CLUSTER))


def on_cluster(operation: Operation) -> Requires:
    return Requires(whole=Right(operation, ResourceType.CLUSTER))


def on_topic(operation: Operation, name_from: str = "topic") -> Requires:
    """`operation` on the one topic the body names (Create: or on the cluster)."""
    right = Right(operation, ResourceType.TOPIC, or_cluster=operation is Operation.CREATE)
    return Requires(whole=right, name_from=name_from)


def on_group(operation: Operation, name_from: str = "group", each: Right | None = None) -> Requires:
    return Requires(whole=Right(operation, ResourceType.GROUP), name_from=name_from, each=each)


def each_topic(operation: Operation) -> Requires:
    """`operation` on every topic the request names (Create: or on the cluster)."""
    right = Right(operation, ResourceType.TOPIC, or_cluster=operation is Operation.CREATE)
    return Requires(each=right)


def each_group(operation: Operation) -> Requires:
    return Requires(each=Right(operation, ResourceType.GROUP))
