"""What a Kafka API adapter receives and returns, and how a family module registers one."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.authz.access import permits
from broker.context import BrokerContext, ConnectionState, Deferred
from broker.security.requires import UNDECLARED, Requires, Right
from protocol.kafka.codec import KafkaRequest
from protocol.kafka.errors import KafkaError

# A Kafka response body (the API's response fields, snake_case, as protocol.kafka
# encodes them); None sends nothing (Produce with acks=0); a Deferred finishes
# beside later requests and its answer is written in this request's place.
KafkaAnswer = dict[str, Any]


@dataclass(frozen=True, slots=True)
class KafkaCall:
    """One decoded Kafka request on one connection, with the broker it runs in."""

    ctx: BrokerContext
    conn: ConnectionState
    request: KafkaRequest
    # The row's declaration, set by the registry's gate before the adapter runs.
    requires: Requires = UNDECLARED

    @property
    def version(self) -> int:
        return self.request.header.api_version

    @property
    def body(self) -> dict[str, Any]:
        return self.request.body

    def permits(self, right: Right, name: str) -> bool:
        """The authorizer's answer for one of the row's declared rights on `name` (True
        without an authorizer); a denial is audited and counted. A right the row does
        not declare is a programming error: an adapter checks only what it declares."""
        requires = self.requires  # `rights` builds a tuple: the identities come first
        if (
            right is not requires.each
            and right is not requires.whole
            and right not in requires.rights
        ):
            raise RuntimeError(f"{self.request.api.name}: {right} is not declared by its row")
        return permits(self.ctx, self.request.api.name, right, name)


KafkaHandler = Callable[[KafkaCall], Awaitable[KafkaAnswer | Deferred[KafkaAnswer] | None]]
# How an API answers a request its `whole` right refuses (the error and its message).
Refusal = Callable[[KafkaCall, KafkaError, str], KafkaAnswer]


@dataclass(frozen=True, slots=True)
class KafkaApi:
    """One row of a family module's `HANDLERS`: the adapter and what it needs.

    `requires` names the rights of the API itself and whether it is served before a
    SASL login: its `whole` right is checked by the registry's gate before the adapter
    runs (refused with `refused`'s answer, else the top-level error code), its `each`
    right by the adapter on each entry (`KafkaCall.permits`), answered beside the
    others. `via` names the native APIs whose declared rows decide the rest (the
    adapter calls them through `dispatch.handler_for`, which gates each call). A row
    with neither is refused to all but super users (CLUSTER_AUTHORIZATION_FAILED).

    `versions` ("0-5", Kafka's range syntax) are the versions the adapter serves, and
    the ones ApiVersions advertises; None serves every version of the API's table in
    protocol/kafka/messages.py. A table may cover more (a schema lands before the
    handler that honours its new fields): those versions are refused as unknown ones."""

    handler: KafkaHandler
    requires: Requires | None = None
    refused: Refusal | None = None
    via: tuple[str, ...] = ()
    versions: str | None = None

    @property
    def declared(self) -> bool:
        return self.requires is not None or bool(self.via)
