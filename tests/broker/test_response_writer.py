"""The connection's in-order writer: answers complete when it gets to them share a send."""

from __future__ import annotations

from pathlib import Path

import trio

from broker import connection
from broker.codecs import MSGPACK
from broker.context import ConnectionState
from tests.broker.contexts import open_context


class RecordingStream(trio.abc.Stream):
    """A stream that keeps every `send_all` call as one entry (trio's, not ours)."""

    def __init__(self) -> None:
        self.sends: list[bytes] = []

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sends.append(bytes(data))

    async def wait_send_all_might_not_block(self) -> None:
        return None

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return b""

    async def aclose(self) -> None:
        return None


async def _written(tmp_path: Path, items: list[connection._Outgoing]) -> RecordingStream:
    stream = RecordingStream()
    async with trio.open_nursery() as nursery:
        ctx = open_context(tmp_path, nursery)
        state = ConnectionState(conn_id=1, peer="test")
        state.inflight = len(items)
        send, recv = trio.open_memory_channel[connection._Outgoing](len(items))
        for item in items:
            send.send_nowait(item)
        send.close()
        await connection._write_responses(stream, ctx, state, MSGPACK, recv)
        assert state.inflight == 0  # every answer, sent or empty, is accounted
        ctx.manager.close()
        nursery.cancel_scope.cancel()
    return stream


async def test_ready_answers_go_out_in_one_send_in_order(tmp_path: Path) -> None:
    stream = await _written(tmp_path, [b"one", None, b"two", b"three"])
    assert stream.sends == [b"onetwothree"]


async def test_a_slot_still_filling_ends_the_shared_send(tmp_path: Path) -> None:
    waiting = connection._Slot()
    done = connection._Slot()
    done.body = b"done"
    done.done.set()

    async def fill_later() -> None:
        await trio.sleep(0.01)
        waiting.body = b"later"
        waiting.done.set()

    stream = RecordingStream()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(fill_later)
        ctx = open_context(tmp_path, nursery)
        state = ConnectionState(conn_id=1, peer="test")
        items: list[connection._Outgoing] = [b"a", done, waiting, b"b"]
        state.inflight = len(items)
        send, recv = trio.open_memory_channel[connection._Outgoing](len(items))
        for item in items:
            send.send_nowait(item)
        send.close()
        await connection._write_responses(stream, ctx, state, MSGPACK, recv)
        ctx.manager.close()
    assert stream.sends == [b"adone", b"laterb"]


async def test_a_large_answer_is_not_joined_past_the_cap(tmp_path: Path) -> None:
    big = b"x" * connection.COALESCE_MAX_BYTES
    stream = await _written(tmp_path, [b"small", big, b"after"])
    assert stream.sends == [b"small" + big, b"after"]
