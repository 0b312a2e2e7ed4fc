"""Connections of an in-process broker: acks 0, pipelined durable produces, slow readers."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from broker.server import BrokerHandle
from tests.broker.rawconn import RawConn, batch


async def test_acks_0_produce_gets_no_answer(inprocess_broker: BrokerHandle) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        await conn.call("create_topic", {"topic": "quiet"})
        body = {
            "acks": 0,
            "timeout_ms": 1000,
            "topics": [
                {"topic": "quiet", "partitions": [{"partition": 0, "records": batch(b"x")}]}
            ],
        }
        await conn.send("produce", body)
        marker = await conn.send("api_versions", {})
        assert (await conn.recv())["id"] == marker  # type: ignore[index]
        plog = inprocess_broker.context.manager.get_log("quiet", 0)
        assert plog.log_end_offset == 1


async def test_pipelined_durable_produces_share_fsyncs_and_stay_in_order(
    inprocess_broker: BrokerHandle,
) -> None:
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        await conn.call("create_topic", {"topic": "durable"})
        ids = []
        for i in range(12):
            ids.append(
                await conn.send(
                    "produce",
                    {
                        "acks": -1,
                        "timeout_ms": 60_000,
                        "topics": [
                            {
                                "topic": "durable",
                                "partitions": [{"partition": 0, "records": batch(b"%d" % i)}],
                            }
                        ],
                    },
                )
            )
        responses = [await conn.recv() for _ in ids]
    assert [r["id"] for r in responses if r] == ids
    offsets = [r["body"]["topics"][0]["partitions"][0]["base_offset"] for r in responses if r]
    assert offsets == list(range(12))
    plog = inprocess_broker.context.manager.get_log("durable", 0)
    assert plog.recovery_point == 12
    assert inprocess_broker.context.committer.fsyncs < 12  # waits overlapped, rounds shared


async def test_a_slow_reader_holds_a_bounded_amount_of_responses(
    inprocess_broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    from broker import connection

    monkeypatch.setattr(connection, "MAX_QUEUED_RESPONSE_BYTES", 2_000_000)
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        await conn.call("create_topic", {"topic": "big"})
        value = b"x" * 1000
        produce = {
            "acks": 1,
            "timeout_ms": 1000,
            "topics": [
                {
                    "topic": "big",
                    "partitions": [{"partition": 0, "records": batch(*[value] * 1000)}],
                }
            ],
        }
        assert (await conn.call("produce", produce))["error"] is None
        fetch = {
            "max_wait_ms": 0,
            "min_bytes": 0,
            "max_bytes": 1 << 20,
            "topics": [
                {
                    "topic": "big",
                    "partitions": [{"partition": 0, "offset": 0, "max_bytes": 1 << 20}],
                }
            ],
        }
        ids = [await conn.send("fetch", fetch) for _ in range(15)]
        (state,) = inprocess_broker.context.connections.values()
        most = 0
        for _ in range(30):  # watch the queue while nobody reads (reads run in threads)
            await trio.sleep(0.01)
            most = max(most, state.queued_bytes)
        assert 0 < most <= 2_000_000 + 5_100_000  # the budget plus one answer
        responses = [await conn.recv() for _ in ids]
        assert [r["id"] for r in responses if r] == ids
        assert all(
            len(r["body"]["topics"][0]["partitions"][0]["records"]) > 1_000_000
            for r in responses
            if r
        )
