"""`max.connections.per.ip` (broker/server.py's accept path), on a real in-process broker."""

from __future__ import annotations

from typing import Any

import trio

from tidelog.aio import open_client


async def test_connections_beyond_the_per_ip_limit_are_closed_at_once(
    secured_broker: Any,
) -> None:
    async with secured_broker("max.connections.per.ip=2") as handle:
        address = f"{handle.host}:{handle.port}"
        async with open_client(address) as first, open_client(address) as second:
            await first.api_versions()
            await second.api_versions()
            third = await trio.open_tcp_stream(handle.host, handle.port)
            with trio.fail_after(5):
                assert await third.receive_some(10) == b""  # closed without a word
            await third.aclose()
            closed = handle.context.metrics.get("tidelog_connections_closed")
            assert closed.labels("ip_limit")._value.get() == 1
        with trio.fail_after(5):  # the broker notices the two closes
            while handle.context.connections:
                await trio.sleep(0.01)
        async with open_client(address) as again:  # so the slots are free again
            await again.api_versions()
