"""Group commit: acks -1 producers share fsyncs of a real log, off the event loop."""

from __future__ import annotations

import errno
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from broker.groupcommit import GroupCommitter
from protocol.batch import encode_batch
from protocol.errors import StorageError
from storage.manager import LogManager
from tests.faulty_io import FaultyFileIO


@pytest.fixture
def faulty_io() -> FaultyFileIO:
    return FaultyFileIO()


@pytest.fixture
def manager(tmp_path: Path, faulty_io: FaultyFileIO) -> Iterator[LogManager]:
    m = LogManager(tmp_path / "data", io=faulty_io)
    m.open()
    m.create_topic("t", 2)
    yield m
    try:
        m.close()
    except StorageError:
        pass


def _batch(n: int = 1) -> bytes:
    return encode_batch([(b"k", b"v", (), None)] * n, now_ms=int(time.time() * 1000))


async def test_wait_durable_advances_the_recovery_point(manager: LogManager) -> None:
    plog = manager.get_log("t", 0)
    info = plog.append(_batch(3))
    async with trio.open_nursery() as nursery:
        committer = GroupCommitter(nursery)
        await committer.wait_durable(plog, info.last_offset + 1)
        assert plog.recovery_point >= 3
        await committer.wait_durable(plog, 3)  # already durable: no new fsync
        assert committer.fsyncs == 1


async def test_concurrent_producers_share_fsyncs(manager: LogManager) -> None:
    plog = manager.get_log("t", 0)
    rounds: list[int] = []
    async with trio.open_nursery() as nursery:
        committer = GroupCommitter(nursery, on_flush=lambda _s, n: rounds.append(n))

        async def producer() -> None:
            for _ in range(5):
                info = plog.append(_batch())
                await committer.wait_durable(plog, info.last_offset + 1)
                assert plog.recovery_point > info.last_offset

        async with trio.open_nursery() as producers:
            for _ in range(8):
                producers.start_soon(producer)
    assert sum(rounds) == 40  # every acknowledgement came from some fsync round
    assert committer.fsyncs < 40  # ... and rounds were shared
    assert max(rounds) > 1


async def test_partitions_are_flushed_independently(manager: LogManager) -> None:
    a, b = manager.get_log("t", 0), manager.get_log("t", 1)
    async with trio.open_nursery() as nursery:
        committer = GroupCommitter(nursery)
        ia, ib = a.append(_batch()), b.append(_batch(2))
        async with trio.open_nursery() as waits:
            waits.start_soon(committer.wait_durable, a, ia.last_offset + 1)
            waits.start_soon(committer.wait_durable, b, ib.last_offset + 1)
    assert (a.recovery_point, b.recovery_point) == (1, 2)


async def test_fsync_error_fails_the_round_and_poisons_the_log(
    manager: LogManager, faulty_io: FaultyFileIO
) -> None:
    plog = manager.get_log("t", 0)
    faulty_io.fail("fsync", errno.EIO, path_contains="t-0")
    async with trio.open_nursery() as nursery:
        committer = GroupCommitter(nursery)
        info = plog.append(_batch())
        with pytest.raises(StorageError):
            await committer.wait_durable(plog, info.last_offset + 1)
    assert plog.poisoned
    with pytest.raises(StorageError):
        plog.append(_batch())


async def test_flush_soon_runs_in_the_background(manager: LogManager) -> None:
    plog = manager.get_log("t", 1)
    plog.append(_batch(4))
    async with trio.open_nursery() as nursery:
        committer = GroupCommitter(nursery)
        committer.flush_soon(plog)
    assert plog.recovery_point == 4
