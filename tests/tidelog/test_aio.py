"""The trio AsyncClient over an in-memory stream pair with the fake broker's server half."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing

from protocol.batch import decode_records, encode_batch, iter_records
from protocol.errors import RequestTimedOut, TopicAlreadyExists, UnknownTopicOrPartition
from tests.protocol.fakebroker import FakeBroker, ServerConnection
from tidelog.aio import AsyncClient, stream_client


async def serve(stream: trio.abc.Stream, broker: FakeBroker) -> None:
    server = ServerConnection(broker)
    async with stream:
        while not server.closed:
            data = await stream.receive_some(65536)
            if not data:
                return
            out = server.receive_data(data)
            if out:
                await stream.send_all(out)


@pytest.fixture
async def client() -> AsyncIterator[AsyncClient]:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, server_end, FakeBroker())
        async with stream_client(client_end, client_id="aio-test") as client:
            yield client
        nursery.cancel_scope.cancel()


def batch(value: bytes) -> bytes:
    return encode_batch([(b"k", value, [("h", b"1")], 5)])


async def test_typed_calls(client: AsyncClient) -> None:
    await client.create_topic("t", partitions=1)
    with pytest.raises(TopicAlreadyExists):
        await client.create_topic("t")
    result = await client.produce("t", 0, batch(b"v"))
    assert result is not None and result.base_offset == 0
    fetched = await client.fetch("t", 0, 0)
    [record] = decode_records(fetched.records)
    assert (record.key, record.value, record.headers) == (b"k", b"v", (("h", b"1"),))
    assert (await client.list_offsets("t", 0, "latest")).offset == 1
    assert (await client.offset_for_time("t", 0, 0)).offset == 0
    assert await client.delete_records("t", 0, -1) == 1
    assert (await client.metadata(["t"]))[0]["partitions"][0]["log_start_offset"] == 1
    with pytest.raises(UnknownTopicOrPartition):
        await client.fetch("t", 3, 0)
    await client.alter_configs("t", set={"retention.ms": 5})
    assert (await client.describe_configs("t"))["retention.ms"]["source"] == "topic"
    await client.delete_topic("t")
    assert (await client.api_versions())["server"] == "fake"


async def test_concurrent_callers_share_one_connection_in_order(client: AsyncClient) -> None:
    await client.create_topic("t")
    offsets: dict[int, int] = {}

    async def produce(i: int) -> None:
        result = await client.produce("t", 0, batch(b"%d" % i))
        assert result is not None
        offsets[i] = result.base_offset

    async with trio.open_nursery() as nursery:
        for i in range(30):
            nursery.start_soon(produce, i)
    assert sorted(offsets.values()) == list(range(30))
    # Each record landed at the offset its own answer reported.
    fetched = await client.fetch("t", 0, 0, max_bytes=1 << 20)
    by_offset = {r.offset: r.value for r in iter_records(fetched.records)}
    assert all(by_offset[offset] == b"%d" % i for i, offset in offsets.items())


async def test_acks_zero_sends_without_waiting(client: AsyncClient) -> None:
    await client.create_topic("t")
    assert await client.produce("t", 0, batch(b"x"), acks=0) is None
    assert (await client.list_offsets("t", 0, "latest")).offset == 1


async def test_unanswered_request_times_out_and_later_answers_are_skipped() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with stream_client(client_end, request_timeout_ms=100) as client:
        with pytest.raises(RequestTimedOut):
            await client.api_versions()
        # Now the server answers both the abandoned request and a new one.
        server = ServerConnection(FakeBroker())
        pending = await server_end.receive_some(65536)
        call = trio.Event()

        async def second() -> None:
            call.set()
            assert (await client.api_versions())["server"] == "fake"

        async with trio.open_nursery() as nursery:
            nursery.start_soon(second)
            await call.wait()
            await trio.testing.wait_all_tasks_blocked()
            pending += await server_end.receive_some(65536)
            await server_end.send_all(server.receive_data(pending))


async def test_broker_hang_up_fails_waiting_callers() -> None:
    client_end, server_end = trio.testing.memory_stream_pair()
    async with stream_client(client_end) as client:

        async def hang_up() -> None:
            await server_end.receive_some(65536)
            await server_end.aclose()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(hang_up)
            with pytest.raises(ConnectionResetError):
                await client.api_versions()
        with pytest.raises(ConnectionResetError, match="unusable"):
            await client.api_versions()


async def test_call_cancelled_before_sending_does_not_disturb_the_next(client: AsyncClient) -> None:
    await client.create_topic("t")
    with trio.CancelScope() as scope:
        scope.cancel()  # cancelled at its first checkpoint, before anything is written
        await client.api_versions()
    assert scope.cancelled_caught
    # Nothing half-written: the stream is still in step.
    assert (await client.list_offsets("t", 0, "latest")).offset == 0
    assert (await client.metadata(["t"]))[0]["topic"] == "t"
