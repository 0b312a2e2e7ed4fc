"""Running a native handler from a Kafka adapter, with Kafka's error for what it raised.

The admin adapters answer Kafka per resource (per topic, per config resource), so
a refusal of one resource is a result, not an exception: `run_native` returns
the native answer or the Kafka error (code and message) to put in that
resource's entry. Unexpected exceptions go through `dispatch.failure` (logged,
UNKNOWN_SERVER_ERROR) as for the msgpack codec.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.context import BrokerContext, Deferred
from broker.dispatch import failure, handler_for
from protocol.kafka.errors import KafkaError, for_tidelog_code
from protocol.schemas import validate_request_body


@dataclass(frozen=True, slots=True)
class NativeOutcome:
    """A native call's answer (None when it failed) and the Kafka error to report."""

    answer: Mapping[str, Any] | None
    error: KafkaError = KafkaError.NONE
    message: str | None = None

    @classmethod
    def failed(cls, error: KafkaError, message: str | None) -> NativeOutcome:
        return cls(None, error, message)


class Refused(Exception):
    """A resource's Kafka error, found by an adapter's own check before any native call."""

    def __init__(self, error: KafkaError, message: str | None) -> None:
        super().__init__(message)
        self.outcome = NativeOutcome.failed(error, message)


async def run_native(ctx: BrokerContext, api: str, body: Mapping[str, Any]) -> NativeOutcome:
    """Validate `body` as the msgpack codec does, run `api`'s handler, map a failure."""
    try:
        result = await handler_for(api)(ctx, validate_request_body(api, body))
        if isinstance(result, Deferred):
            result = await result.finish()
    except Exception as exc:
        return failed_outcome(api, exc)
    return NativeOutcome(result or {})


def failed_outcome(api: str, exc: Exception) -> NativeOutcome:
    """The Kafka error for an exception (an adapter's own reads of storage can race a
    deletion too); unexpected ones are logged as UNKNOWN_SERVER_ERROR."""
    if isinstance(exc, Refused):
        return exc.outcome
    error = failure(api, exc)
    return NativeOutcome.failed(for_tidelog_code(error.code), error.message or None)
