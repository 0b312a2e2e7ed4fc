"""What each codec says a request's answer may take (`answer_room`): the grant a fetch
reserves from the memory budget is no larger than the fetch asked for (issue 38 #5)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio

from broker.config import BrokerConfig
from broker.handlers.fetch import FETCH_RESPONSE_MAX_BYTES
from broker.kafka.connection import KAFKA
from broker.native.codec import MSGPACK
from broker.server import serve_broker
from protocol.kafka.codec import RequestHeader, encode_request
from tests.broker.rawconn import RawConn, batch

MIB = 1024 * 1024


def kafka_fetch(version: int, max_bytes: int, client_id: str | None = "consumer-1") -> bytes:
    partition: dict[str, Any] = {"partition": 0, "fetch_offset": 0, "partition_max_bytes": 1024}
    body = {
        "replica_id": -1,
        "max_wait_ms": 500,
        "min_bytes": 1,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [partition]}],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
    return encode_request(RequestHeader(1, version, 7, client_id), body)[4:]  # no size


@pytest.mark.parametrize("version", [4, 7, 11, 12, 14, 15, 17, 18])
@pytest.mark.parametrize("client_id", ["consumer-1", None])
def test_a_kafka_fetch_asks_for_its_max_bytes(version: int, client_id: str | None) -> None:
    assert KAFKA.answer_room(kafka_fetch(version, 123_456, client_id)) == 123_456
    assert KAFKA.answer_room(kafka_fetch(version, 2**31 - 1)) == FETCH_RESPONSE_MAX_BYTES


def test_other_kafka_requests_and_unreadable_fetches() -> None:
    produce = encode_request(
        RequestHeader(0, 7, 1, None),
        {"transactional_id": None, "acks": 1, "timeout_ms": 1, "topic_data": []},
    )[4:]
    assert KAFKA.answer_room(produce) == 0
    assert KAFKA.answer_room(kafka_fetch(4, 1000)[:20]) == FETCH_RESPONSE_MAX_BYTES


def test_a_msgpack_fetch_asks_for_its_max_bytes() -> None:
    assert MSGPACK.answer_room({"api": "fetch", "body": {"max_bytes": 777}}) == 777
    assert MSGPACK.answer_room({"api": "fetch", "body": {}}) == FETCH_RESPONSE_MAX_BYTES
    assert MSGPACK.answer_room({"api": "produce", "body": {}}) == 0
    assert MSGPACK.answer_room([1, 2]) == 0


async def test_a_fetch_never_waits_on_the_requests_queued_behind_it(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """A fetch's grant counts the answers its connection holds, not the budget the
    reader reserved for large requests pipelined behind it: those are released only
    after the fetch, so waiting on them would never end."""
    config = BrokerConfig.from_props(
        {"queued.max.request.bytes": str(16 * MIB)},  # a 2 MiB share per connection
        data_dir=tmp_path / "data",
        listen=("127.0.0.1", 0),
        metrics_listen=("127.0.0.1", 0),
    )
    handle = await nursery.start(serve_broker, config)
    conn = await RawConn.open(handle)
    async with conn.stream:
        await conn.call("create_topic", {"topic": "t", "configs": {"max.message.bytes": "2097152"}})
        records = batch(b"x" * (1536 * 1024))  # reserved by the reader: over 64 KiB
        produce = {"acks": 1, "timeout_ms": 5000, "topics": [
            {"topic": "t", "partitions": [{"partition": 0, "records": records}]}
        ]}  # fmt: skip
        wait = {"max_wait_ms": 300, "min_bytes": 1 << 30, "max_bytes": 1 << 20, "topics": [
            {"topic": "t", "partitions": [{"partition": 0, "offset": 0, "max_bytes": 1 << 20}]}
        ]}  # fmt: skip
        fetch = {**wait, "max_wait_ms": 0, "min_bytes": 0}
        ids = [await conn.send("fetch", wait), await conn.send("fetch", fetch)]
        ids += [await conn.send("produce", produce) for _ in range(4)]
        with trio.fail_after(10):  # a generous "does not hang" bound
            answers = [await conn.recv() for _ in ids]
    assert [a["id"] for a in answers if a] == ids
    assert all(a["error"] is None for a in answers if a)
