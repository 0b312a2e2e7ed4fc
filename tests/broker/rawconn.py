"""Frames over a trio stream to an in-process broker (tests/broker helpers)."""

from __future__ import annotations

import time
from typing import Any

import trio

from broker.server import BrokerHandle
from protocol.batch import encode_batch
from protocol.framing import FrameDecoder, encode_frame


class RawConn:
    """Frames over a trio stream, for in-process tests."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.decoder = FrameDecoder()
        self.next_id = 0

    @classmethod
    async def open(cls, handle: BrokerHandle) -> RawConn:
        return cls(await trio.open_tcp_stream(handle.host, handle.port))

    async def send(self, api: str, body: dict[str, Any]) -> int:
        self.next_id += 1
        await self.stream.send_all(
            encode_frame({"api": api, "v": 1, "id": self.next_id, "body": body})
        )
        return self.next_id

    async def recv(self) -> dict[str, Any] | None:
        while True:
            ready, obj = self.decoder.next_message()
            if ready:
                return obj
            data = await self.stream.receive_some(65536)
            if not data:
                return None
            self.decoder.feed(data)

    async def call(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        request_id = await self.send(api, body)
        response = await self.recv()
        assert response is not None and response["id"] == request_id
        return response


def batch(*values: bytes) -> bytes:
    return encode_batch([(None, v, (), None) for v in values], now_ms=int(time.time() * 1000))
