"""init_producer_id and idempotent produce through the handlers, with a real
BrokerContext over a temporary data directory (the seam every codec uses)."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.context import BrokerContext
from broker.handlers.producer_ids import init_producer_id
from protocol.api_types import InitProducerIdAnswer, InitProducerIdRequest
from protocol.batch import encode_batch
from protocol.errors import InvalidRequest, OutOfOrderSequenceNumber
from storage.manager import LogManager
from tests.broker.contexts import NOW_MS
from tests.broker.test_handlers_direct import answer, ctx, produce_to

__all__ = ["ctx"]  # the fixture, shared with test_handlers_direct


def init(
    transactional_id: str | None = None, producer_id: int = -1, producer_epoch: int = -1
) -> InitProducerIdRequest:
    """An init_producer_id request; the defaults ask for a fresh id."""
    return InitProducerIdRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=producer_epoch
    )


def idempotent(producer: InitProducerIdAnswer, seq: int, *values: bytes) -> bytes:
    return encode_batch(
        [(None, v, None, NOW_MS) for v in values],
        producer_id=producer["producer_id"],
        producer_epoch=producer["producer_epoch"],
        base_sequence=seq,
    )


async def test_fresh_ids_are_unique_and_never_reused_after_a_restart(
    ctx: BrokerContext, tmp_path: Path
) -> None:
    first = await answer(ctx, init_producer_id, init())
    second = await answer(ctx, init_producer_id, init(transactional_id=None))
    assert first == {"producer_id": 0, "producer_epoch": 0}
    assert second == {"producer_id": 1, "producer_epoch": 0}
    ctx.manager.close()
    ctx.manager = LogManager(ctx.config.data_dir, ctx.config.log_config)
    ctx.manager.open()
    after = await answer(ctx, init_producer_id, init())
    assert after["producer_id"] > second["producer_id"]


async def test_a_known_producer_gets_its_next_epoch(ctx: BrokerContext) -> None:
    first = await answer(ctx, init_producer_id, init())
    bumped = await answer(
        ctx, init_producer_id, init(producer_id=first["producer_id"], producer_epoch=0)
    )
    assert bumped == {"producer_id": first["producer_id"], "producer_epoch": 1}


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (init(transactional_id="tx-1"), "transactions are not supported"),
        (init(producer_id=999, producer_epoch=0), "never issued"),
    ],
    ids=["transactional", "foreign-id"],
)
async def test_what_is_not_served(
    ctx: BrokerContext, body: InitProducerIdRequest, why: str
) -> None:
    with pytest.raises(InvalidRequest, match=why):
        await answer(ctx, init_producer_id, body)


async def test_a_retried_produce_is_answered_with_its_original_offset(
    ctx: BrokerContext,
) -> None:
    ctx.manager.create_topic("t", 1, {})
    producer = await answer(ctx, init_producer_id, init())
    await produce_to(ctx, "t", 0, encode_batch([(None, b"other", None, NOW_MS)]))
    first = await produce_to(ctx, "t", 0, idempotent(producer, 0, b"a", b"b"))
    retry = await produce_to(ctx, "t", 0, idempotent(producer, 0, b"a", b"b"))
    assert first["error"] is None and retry["error"] is None
    assert retry["base_offset"] == first["base_offset"] == 1
    assert ctx.manager.get_log("t", 0).log_end_offset == 3
    gap = await produce_to(ctx, "t", 0, idempotent(producer, 5, b"c"))
    assert gap["error"] == OutOfOrderSequenceNumber.code
