"""The msgpack fetch over a partition holding Kafka v2 batches (issue 35): §3 batches
unless the request says `kafka_batches`, for bytes, spans and local reads alike."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from broker.context import BrokerContext
from broker.dispatch import handler_for
from protocol.api_types import FetchAnswer, FetchPartition, FetchRequest, FetchTopic
from protocol.batch import (
    ANY_LAYOUT,
    F_MAGIC,
    KAFKA_LAYOUT,
    KAFKA_MAGIC,
    MAGIC,
    BatchWalk,
    encode_batch,
    iter_records,
)
from protocol.kafka.convert import tidelog_to_kafka
from storage.record_source import FileSpan
from tests.broker.contexts import NOW_MS, open_context


@pytest.fixture
async def ctx(tmp_path: Path, nursery: trio.Nursery) -> AsyncIterator[BrokerContext]:
    context = open_context(tmp_path / "data", nursery)
    try:
        yield context
    finally:
        context.manager.close()


def _fill(ctx: BrokerContext, kafka_records: int) -> list[bytes]:
    """A §3 batch, then a Kafka batch of `kafka_records` 100-byte values."""
    ctx.manager.create_topic("t", 1)
    plog = ctx.manager.get_log("t", 0)
    plog.append(encode_batch([(None, b"first", None, NOW_MS)]))
    rows = [(None, b"x" * 100, None, NOW_MS) for _ in range(kafka_records)]
    plog.append(tidelog_to_kafka(encode_batch(rows), partition_leader_epoch=-1)[0],
                layout=KAFKA_LAYOUT)  # fmt: skip
    return [b"first"] + [b"x" * 100] * kafka_records


async def _fetch(ctx: BrokerContext, **fields: bool) -> FetchAnswer:
    wanted = FetchPartition(partition=0, offset=0, max_bytes=1 << 24)
    body = FetchRequest(
        max_wait_ms=0, min_bytes=0, max_bytes=1 << 24,
        topics=[FetchTopic(topic="t", partitions=[wanted])],
        local_read=fields.get("local_read", False),
        kafka_batches=fields.get("kafka_batches", False),
    )  # fmt: skip
    result = await handler_for("fetch")(ctx, body)
    assert isinstance(result, dict)
    return result  # type: ignore[return-value]


def _magics(data: bytes) -> list[int]:
    return [fields[F_MAGIC] for _, fields in BatchWalk(data, layout=ANY_LAYOUT)]


@pytest.mark.parametrize("count", [3, 1_000])  # bytes; a span of the file
async def test_without_kafka_batches_every_batch_is_tidelogs(
    ctx: BrokerContext, count: int
) -> None:
    values = _fill(ctx, count)
    for local_read in (False, True):
        part = (await _fetch(ctx, local_read=local_read))["topics"][0]["partitions"][0]
        assert part.get("local") is None  # converted: never read from the file
        records = part["records"]
        assert isinstance(records, bytes)
        assert _magics(records) == [MAGIC, MAGIC]
        assert [r.value for r in iter_records(records)] == values


async def test_with_kafka_batches_the_stored_bytes_go_out(ctx: BrokerContext) -> None:
    _fill(ctx, 1_000)
    stored = ctx.manager.get_log("t", 0).active_segment.log_path.read_bytes()
    part = (await _fetch(ctx, kafka_batches=True))["topics"][0]["partitions"][0]
    records = part["records"]
    assert isinstance(records, FileSpan)  # large: sent from the file, as before
    try:
        assert records.read() == stored
        assert _magics(records.read()) == [MAGIC, KAFKA_MAGIC]
    finally:
        records.close()
    local = (await _fetch(ctx, kafka_batches=True, local_read=True))["topics"][0]
    assert local["partitions"][0]["local"]["length"] == len(stored)
