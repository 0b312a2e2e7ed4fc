"""The request dispatch of an in-process broker: crash isolation."""

from __future__ import annotations

from typing import Any

import pytest

from broker import dispatch
from broker.server import BrokerHandle
from tests.broker.rawconn import RawConn


async def test_unexpected_handler_exception_is_unknown_server_error(
    inprocess_broker: BrokerHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(ctx: Any, body: dict[str, Any]) -> dict[str, Any]:
        raise ZeroDivisionError("a bug")

    # Only this API's row of the table is swapped: the dispatch around it is real.
    monkeypatch.setitem(dispatch.HANDLERS, "metadata", broken)
    conn = await RawConn.open(inprocess_broker)
    async with conn.stream:
        response = await conn.call("metadata", {})
        assert response["error"] == "UNKNOWN_SERVER_ERROR"
        assert "ZeroDivisionError" in response["message"]
        # the connection and the broker carry on
        assert (await conn.call("api_versions", {}))["error"] is None
