"""Producer ids: unique across restarts and crashes, InitProducerId's epoch rules."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest

from protocol.errors import InvalidRequest, StorageError
from storage.fileio import FileIO
from storage.files import PRODUCER_ID_BLOCK_FILE
from storage.producer_ids import (
    EPOCH_EXHAUSTED,
    RESERVED_PRODUCER_IDS_START,
    ProducerIdAllocator,
    ProducerIdAndEpoch,
    ProducerIdBlockFileError,
    ProducerIds,
    bump_epoch,
)
from tests.faulty_io import FaultyFileIO


def test_ids_increase_and_the_block_is_persisted_before_use(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(FileIO(), tmp_path, block_size=10)
    assert allocator.next_id() == 0
    assert (tmp_path / PRODUCER_ID_BLOCK_FILE).read_text() == "0\n10\n"
    assert [allocator.next_id() for _ in range(10)] == list(range(1, 11))
    assert (tmp_path / PRODUCER_ID_BLOCK_FILE).read_text() == "0\n20\n"


def test_a_restart_never_reuses_an_id(tmp_path: Path) -> None:
    seen: set[int] = set()
    for _ in range(4):  # each "process" takes a few ids and stops without notice
        allocator = ProducerIdAllocator(FileIO(), tmp_path, block_size=10)
        ids = [allocator.next_id() for _ in range(3)]
        assert seen.isdisjoint(ids)
        seen.update(ids)
    assert min(seen) == 0 and max(seen) == 32  # one block skipped per restart, no more


def test_a_failed_reservation_hands_out_nothing(tmp_path: Path) -> None:
    io = FaultyFileIO()
    allocator = ProducerIdAllocator(io, tmp_path, block_size=2)
    assert allocator.next_id() == 0
    assert allocator.next_id() == 1
    io.fail("fsync", errno.EIO)
    with pytest.raises(StorageError, match="cannot reserve"):
        allocator.next_id()
    # After the disk recovers the same id is still next, and it is persisted.
    assert allocator.next_id() == 2
    assert ProducerIdAllocator(FileIO(), tmp_path, block_size=2).next_id() == 4


@pytest.mark.parametrize(
    "content",
    [b"", b"0\n", b"1\n10\n", b"0\nten\n", b"0\n-5\n", b"\xff\n"],
    ids=["empty", "no-value", "version", "not-a-number", "negative", "not-ascii"],
)
def test_an_unreadable_block_file_is_an_error_not_zero(tmp_path: Path, content: bytes) -> None:
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_bytes(content)
    with pytest.raises(ProducerIdBlockFileError):
        ProducerIdAllocator(FileIO(), tmp_path)


def test_idempotent_producers_always_get_a_fresh_id_at_epoch_zero(tmp_path: Path) -> None:
    ids = ProducerIds(ProducerIdAllocator(FileIO(), tmp_path))
    first, second = ids.init_producer_id(), ids.init_producer_id()
    assert first == ProducerIdAndEpoch(0, 0)
    assert second == ProducerIdAndEpoch(1, 0)


def test_a_known_producer_gets_a_bumped_epoch(tmp_path: Path) -> None:
    ids = ProducerIds(ProducerIdAllocator(FileIO(), tmp_path))
    first = ids.init_producer_id()
    assert ids.init_producer_id(first.producer_id, 0) == ProducerIdAndEpoch(first.producer_id, 1)
    assert ids.init_producer_id(first.producer_id, 32766) == ProducerIdAndEpoch(1, 0)
    restarted = ProducerIds(ProducerIdAllocator(FileIO(), tmp_path))
    assert restarted.init_producer_id(first.producer_id, 4) == ProducerIdAndEpoch(0, 5)


@pytest.mark.parametrize(
    ("producer_id", "epoch", "transactional_id", "why"),
    [
        (5000, 0, None, "never issued"),
        (0, -1, None, "without its epoch"),
        (-1, 3, None, "without a producer id"),
        (-1, -1, "tx", "transactions are not supported"),
        (-1, -1, "", "transactions are not supported"),
    ],
    ids=["foreign-id", "id-without-epoch", "epoch-without-id", "transactional", "empty-tx"],
)
def test_requests_that_cannot_be_served(
    tmp_path: Path, producer_id: int, epoch: int, transactional_id: str | None, why: str
) -> None:
    ids = ProducerIds(ProducerIdAllocator(FileIO(), tmp_path))
    ids.init_producer_id()
    with pytest.raises(InvalidRequest, match=why):
        ids.init_producer_id(producer_id, epoch, transactional_id)


def test_an_exhausted_epoch_moves_to_a_new_id(tmp_path: Path) -> None:
    allocator = ProducerIdAllocator(FileIO(), tmp_path)
    allocator.next_id()
    assert EPOCH_EXHAUSTED == 32766
    assert bump_epoch(ProducerIdAndEpoch(0, 32765), allocator) == ProducerIdAndEpoch(0, 32766)
    assert bump_epoch(ProducerIdAndEpoch(0, 32766), allocator) == ProducerIdAndEpoch(1, 0)
    assert bump_epoch(ProducerIdAndEpoch(0, 32767), allocator) == ProducerIdAndEpoch(2, 0)


def test_ids_never_reach_the_reserved_range(tmp_path: Path) -> None:
    last_block = RESERVED_PRODUCER_IDS_START - 10
    (tmp_path / PRODUCER_ID_BLOCK_FILE).write_text(f"0\n{last_block}\n")
    allocator = ProducerIdAllocator(FileIO(), tmp_path, block_size=10)
    assert [allocator.next_id() for _ in range(10)][-1] == RESERVED_PRODUCER_IDS_START - 1
    with pytest.raises(StorageError, match="exhausted"):
        allocator.next_id()
    ids = ProducerIds(allocator)
    with pytest.raises(InvalidRequest, match="never issued"):  # a derived id is not ours
        ids.init_producer_id(RESERVED_PRODUCER_IDS_START + 5, 0)
