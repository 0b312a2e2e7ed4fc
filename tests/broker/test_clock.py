"""The broker reads the time through the one clock `serve_broker` is given."""

from __future__ import annotations

import functools
from pathlib import Path

import trio

from broker.config import BrokerConfig
from broker.server import serve_broker
from tests.broker.rawconn import RawConn

# A moment no real clock shows during the test run (2001-09-09), so it cannot pass by luck.
FIXED_MS = 1_000_000_000_000


async def test_handlers_and_storage_use_the_injected_clock(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    config = BrokerConfig.from_props(
        {},
        data_dir=tmp_path / "data",
        listen=("127.0.0.1", 0),
        metrics_listen=("127.0.0.1", 0),
    )
    handle = await nursery.start(functools.partial(serve_broker, config, clock_ms=lambda: FIXED_MS))
    conn = await RawConn.open(handle)
    async with conn.stream:
        assert (await conn.call("create_topic", {"topic": "t", "partitions": 1}))["error"] is None
        explained = await conn.call("explain_retention", {"topic": "t", "partitions": None})
        assert explained["error"] is None, explained
        assert explained["body"]["partitions"][0]["now_ms"] == FIXED_MS
