"""Kafka adapters run the way the listener runs them, without a socket.

A request is encoded by kafka-python's own protocol classes (header and all), decoded
by protocol.kafka, handed to the adapter from the registry with a real BrokerContext
over a LogManager in a temporary directory, and the answer is encoded by
protocol.kafka and decoded again by kafka-python's response class: both ends of
the bytes are a client library's.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio

from broker.context import BrokerContext, ConnectionState
from broker.kafka.call import KafkaCall
from broker.kafka.registry import KAFKA_HANDLERS
from harness import kafka_python
from harness.kafka_python import kafka  # loads kafka-python without its warning
from protocol.kafka.codec import decode_request, encode_response
from tests.broker.contexts import open_context

admin = kafka.protocol.admin

LISTEN = ("127.0.0.1", 19092)

KafkaRun = Callable[[Any], Awaitable[Any]]


@pytest.fixture
async def ctx(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[BrokerContext]:
    context = open_context(tmp_path / "data", nursery, listen=LISTEN)
    try:
        yield context
    finally:
        context.manager.close()


async def run_kafka(ctx: BrokerContext, request: Any, correlation_id: int = 7) -> Any:
    """Encode `request` (a kafka-python request object) as kafka-python sends it, run
    the registered adapter, and decode the answer with kafka-python's response class."""
    request.with_header(correlation_id=correlation_id, client_id="adapter-test")
    frame = bytes(request.encode(header=True, framed=True))
    decoded = decode_request(frame[4:])
    handler = KAFKA_HANDLERS[decoded.api.key]
    answer = await handler(KafkaCall(ctx, ConnectionState(1, "test"), decoded))
    assert isinstance(answer, dict), answer
    wire = encode_response(decoded.api, decoded.version, correlation_id, answer)
    response_class = kafka_python.CLASSES[(decoded.api.key, False)]
    response = response_class[decoded.version].decode(wire[4:], header=True)
    assert response.header.correlation_id == correlation_id
    return response


@pytest.fixture
def kafka(ctx: BrokerContext) -> KafkaRun:
    async def run(request: Any) -> Any:
        return await run_kafka(ctx, request)

    return run
