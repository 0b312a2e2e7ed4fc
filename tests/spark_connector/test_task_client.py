"""The task's connection: fetch answers as views of one reused buffer, same replies as Client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from protocol import calls
from protocol.batch import encode_batch
from protocol.errors import OffsetOutOfRange, UnknownTopicOrPartition
from spark_connector.arrow_convert import records_to_arrow
from spark_connector.task_client import TaskClient
from tests.protocol.fakebroker import FakeBroker, serve_in_thread
from tidelog.client import Client

TOPIC = "t"


@pytest.fixture
def address() -> Iterator[str]:
    broker = FakeBroker()
    with serve_in_thread(broker) as address, Client(address) as client:
        client.create_topic(TOPIC, 2)
        for i in range(6):
            values = [f"{i}-{n}".encode() * 20 for n in range(300)]
            records = encode_batch([(None, v, None, 1_000 + n) for n, v in enumerate(values)])
            client.produce(TOPIC, 0, records)
        yield address


def _task_client(address: str) -> TaskClient:
    return TaskClient(address, client_id="tests", request_timeout_ms=10_000)


def _fetch(client: TaskClient, offset: int, partition: int = 0) -> calls.FetchResult:
    call = calls.fetch(TOPIC, partition, offset, max_bytes=50_000)
    client.send(call.api, call.body)
    return call.extract(client.receive().result())


def test_fetch_answers_equal_the_clients_and_are_views(address: str) -> None:
    with Client(address) as plain, _task_client(address) as task:
        for offset in (0, 450, 1799):
            expected = plain.fetch(TOPIC, 0, offset, max_bytes=50_000)
            got = _fetch(task, offset)
            assert isinstance(got.records, memoryview)
            assert bytes(got.records) == bytes(expected.records)
            assert got[1:] == tuple(expected)[1:]


def test_the_buffer_is_reused_and_converted_batches_do_not_depend_on_it(address: str) -> None:
    with _task_client(address) as task:
        first = _fetch(task, 0)
        batch = records_to_arrow(
            first.records, topic=TOPIC, partition=0, start=0, end=10**6, include_headers=False
        ).batch
        assert batch is not None
        values = batch.column("value").to_pylist()
        second = _fetch(task, 900)  # lands in the same buffer, over the first answer
        assert first.records.obj is second.records.obj
        assert bytes(first.records[:64]) == bytes(second.records[:64])
        assert batch.column("value").to_pylist() == values
        assert values[0] == b"0-0" * 20


def test_pipelined_answers_come_back_in_order(address: str) -> None:
    with Client(address) as plain, _task_client(address) as task:
        offsets = [0, 300, 600]
        fetches = [calls.fetch(TOPIC, 0, o, max_bytes=1) for o in offsets]
        for call in fetches:
            task.send(call.api, call.body)
        assert task.in_flight == 3
        for call, offset in zip(fetches, offsets, strict=True):
            got = call.extract(task.receive().result())
            assert bytes(got.records) == plain.fetch(TOPIC, 0, offset, max_bytes=1).records


def test_errors_and_other_apis_read_as_the_clients(address: str) -> None:
    with _task_client(address) as task:
        assert task.list_offsets(TOPIC, 0, "latest").offset == 1800
        assert task.list_offsets(TOPIC, 1, "earliest").offset == 0
        with pytest.raises(OffsetOutOfRange):
            _fetch(task, 5000)
        with pytest.raises(UnknownTopicOrPartition):
            call = calls.fetch("missing", 0, 0)
            task.send(call.api, call.body)
            call.extract(task.receive().result())
        assert bytes(_fetch(task, 1799).records)  # the connection is still in step
        empty = _fetch(task, 0, partition=1)
        assert empty.records == b""
