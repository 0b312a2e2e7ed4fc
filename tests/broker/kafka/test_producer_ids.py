"""Kafka's InitProducerId adapter: a request kafka-python encoded, decoded by our codec,
answered by the adapter with a real BrokerContext over a temporary data directory,
and the response decoded by kafka-python."""

from __future__ import annotations

import pytest

from broker.context import BrokerContext, ConnectionState
from broker.kafka.call import KafkaCall
from broker.kafka.registry import KAFKA_HANDLERS
from harness.kafka_python import kp_class
from protocol.kafka.codec import decode_request, encode_response
from protocol.kafka.errors import ERRORS_BY_NAME
from protocol.kafka.messages import INIT_PRODUCER_ID
from tests.broker.test_handlers_direct import ctx

__all__ = ["ctx"]  # the fixture, shared with test_handlers_direct


async def round_trip(
    ctx: BrokerContext, version: int, transactional_id: str | None, correlation_id: int
) -> object:
    """kafka-python's request -> our codec -> the adapter -> our codec -> kafka-python."""
    request_class = kp_class(INIT_PRODUCER_ID.key, True)
    message = request_class(transactional_id=transactional_id, transaction_timeout_ms=60_000)
    message.API_VERSION = version
    message.with_header(correlation_id=correlation_id, client_id="kafka-python")
    request = decode_request(bytes(message.encode(header=True)))
    call = KafkaCall(ctx, ConnectionState(conn_id=1, peer="test", protocol="kafka"), request)
    answer = await KAFKA_HANDLERS[INIT_PRODUCER_ID.key](call)
    assert isinstance(answer, dict)
    frame = encode_response(INIT_PRODUCER_ID, version, correlation_id, answer)
    response_class = kp_class(INIT_PRODUCER_ID.key, False)
    return response_class.decode(frame[4:], version=version, header=True)


@pytest.mark.parametrize("version", [0, 1])
async def test_an_idempotent_producer_gets_fresh_ids(ctx: BrokerContext, version: int) -> None:
    first = await round_trip(ctx, version, None, 7)
    second = await round_trip(ctx, version, None, 8)
    assert first.header.correlation_id == 7
    assert (first.error_code, first.producer_id, first.producer_epoch) == (0, 0, 0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (0, 1, 0)


async def test_a_transactional_producer_gets_an_id_then_the_next_epoch(
    ctx: BrokerContext,
) -> None:
    await ctx.transactions.load()
    first = await round_trip(ctx, 1, "payments-tx", 3)
    assert first.error_code == ERRORS_BY_NAME["NONE"].code
    assert first.producer_id >= 0 and first.producer_epoch == 0
    again = await round_trip(ctx, 1, "payments-tx", 4)  # a new instance: fences the old
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)


async def test_a_transactional_producer_waits_for_the_load(ctx: BrokerContext) -> None:
    answer = await round_trip(ctx, 1, "payments-tx", 3)  # nothing loaded the coordinator
    assert answer.error_code == ERRORS_BY_NAME["COORDINATOR_LOAD_IN_PROGRESS"].code
    assert (answer.producer_id, answer.producer_epoch) == (-1, -1)
