"""serve_broker in-process: startup report, graceful shutdown, listener checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from broker import dispatch
from broker.config import BrokerConfig
from broker.server import BrokerHandle, serve_broker
from tests.broker.rawconn import RawConn, batch


async def test_reports_bound_ports_and_serves(inprocess_broker: BrokerHandle) -> None:
    assert inprocess_broker.port > 0 and inprocess_broker.metrics_port > 0
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        response = await conn.call("api_versions", {})
        assert response["error"] is None
        assert set(dispatch.HANDLERS) <= set(response["body"]["apis"])


async def test_graceful_shutdown_answers_queued_requests_then_closes(tmp_path: Path) -> None:
    config = BrokerConfig.from_props(
        {}, data_dir=tmp_path / "d", listen=("127.0.0.1", 0), metrics_listen=("127.0.0.1", 0)
    )
    tasks_before = trio.lowlevel.current_statistics().tasks_living
    async with trio.open_nursery() as nursery:
        handle: BrokerHandle = await nursery.start(serve_broker, config)
        conn = await RawConn.open(handle)
        assert (await conn.call("create_topic", {"topic": "t"}))["error"] is None
        produce = {
            "acks": 1,
            "timeout_ms": 1000,
            "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": batch(b"a")}]}],
        }
        assert (await conn.call("produce", produce))["error"] is None
        fetch_id = await conn.send(
            "fetch",
            {
                "max_wait_ms": 3_600_000,
                "min_bytes": 1,
                "max_bytes": 1 << 20,
                "topics": [
                    {"topic": "t", "partitions": [{"partition": 0, "offset": 1, "max_bytes": 4096}]}
                ],
            },
        )
        await trio.testing.wait_all_tasks_blocked()
        handle.request_shutdown()
        response = await conn.recv()
        assert response is not None and response["id"] == fetch_id
        assert response["body"]["topics"][0]["partitions"][0]["records"] == b""
        assert await conn.recv() is None  # then the broker closed the connection
        await conn.stream.aclose()
    assert (tmp_path / "d" / ".tidelog_cleanshutdown").exists()
    assert trio.lowlevel.current_statistics().tasks_living == tasks_before
    with pytest.raises(OSError):
        await trio.open_tcp_stream(handle.host, handle.port)


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("0.0.0.0", False), ("", False)],
)
def test_non_loopback_listeners_are_flagged(host: str, loopback: bool) -> None:
    from broker.server import _is_loopback

    assert _is_loopback(host) is loopback
