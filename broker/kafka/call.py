"""What a Kafka API adapter receives and returns (one shape for every family module)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from broker.context import BrokerContext, ConnectionState, Deferred
from protocol.kafka.codec import KafkaRequest

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

    @property
    def version(self) -> int:
        return self.request.header.api_version

    @property
    def body(self) -> dict[str, Any]:
        return self.request.body


KafkaHandler = Callable[[KafkaCall], Awaitable[KafkaAnswer | Deferred[KafkaAnswer] | None]]
