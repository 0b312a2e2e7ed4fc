"""Producer ids unique across restarts, and InitProducerId's epoch rules.

Ids are handed out from blocks, as Kafka's ProducerIdManager does: before the
first id of a block is given, the block's end is written to the data
directory's `producer-id-block` file (temp, fsync, rename, fsync dir). After a
crash the next start begins at that end, so no id is ever handed out twice;
at most one block of ids is skipped. On disk (text, like the checkpoints):

    0                  version
    123000             the next unallocated producer id

A missing file means a new data directory (start at 0); an unreadable one is an
error, never silently 0, which could reissue live ids.

Thread-safe: `next_id` and `issued` take a lock (handlers of several connections
call them).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from protocol.errors import InvalidRequest, StorageError
from storage.fileio import FileIO
from storage.files import PRODUCER_ID_BLOCK_FILE

__all__ = [
    "EPOCH_EXHAUSTED",
    "PRODUCER_ID_BLOCK_SIZE",
    "RESERVED_PRODUCER_IDS_START",
    "ProducerIdAllocator",
    "ProducerIdAndEpoch",
    "ProducerIdBlockFileError",
    "ProducerIds",
    "bump_epoch",
]

BLOCK_FILE_VERSION: Final = 0
# Kafka's PRODUCER_ID_BLOCK_SIZE: one fsync per 1000 ids; a crash skips at most 1000.
PRODUCER_ID_BLOCK_SIZE: Final = 1000
# Producer ids are int64 on the wire; -1 means "none".
PRODUCER_ID_MAX: Final = 2**63 - 1
# Ids from here on are never allocated: reserved for producers that derive their id
# (the exactly-once Spark sink's design, docs/idempotence.md), so the two never collide.
RESERVED_PRODUCER_IDS_START: Final = 2**62
# Kafka's isEpochExhausted: an epoch of 32766 or more cannot be bumped, because
# fencing needs one more value below Short.MAX_VALUE (32767).
EPOCH_EXHAUSTED: Final = 2**15 - 2


class ProducerIdBlockFileError(StorageError):
    """The producer id block file exists but cannot be read as written."""


@dataclass(frozen=True, slots=True)
class ProducerIdAndEpoch:
    producer_id: int
    epoch: int


class ProducerIdAllocator:
    """Hands out increasing producer ids, persisting each block before using it."""

    def __init__(self, io: FileIO, data_dir: Path, *, block_size: int = PRODUCER_ID_BLOCK_SIZE):
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, not {block_size}")
        self._io = io
        self.path = data_dir / PRODUCER_ID_BLOCK_FILE
        self._block_size = block_size
        self._lock = threading.Lock()
        self._next = self._read_next()
        self._block_end = self._next  # nothing reserved yet in this process

    def _read_next(self) -> int:
        try:
            data = self._io.read_file(self.path)
        except FileNotFoundError:
            return 0
        except OSError as exc:
            raise ProducerIdBlockFileError(f"{self.path}: cannot read: {exc}") from exc
        try:
            version, value = data.decode("ascii").split()
            if int(version) != BLOCK_FILE_VERSION:
                raise ValueError(f"unknown version {version}")
            next_id = int(value)
        except ValueError as exc:
            raise ProducerIdBlockFileError(f"{self.path}: unreadable: {exc}") from exc
        if not 0 <= next_id <= PRODUCER_ID_MAX:
            raise ProducerIdBlockFileError(f"{self.path}: next id {next_id} is out of range")
        return next_id

    def issued(self, producer_id: int) -> bool:
        """True if `producer_id` may have been handed out by this data directory (it is
        below the next id; ids of a block reserved before a crash count as issued)."""
        with self._lock:
            return 0 <= producer_id < self._next

    def next_id(self) -> int:
        """A producer id never handed out before by this data directory."""
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + self._block_size
                if end > RESERVED_PRODUCER_IDS_START:
                    raise StorageError(f"{self.path}: producer ids are exhausted")
                try:
                    self._io.write_atomic(
                        self.path,
                        f"{BLOCK_FILE_VERSION}\n{end}\n".encode(),
                        failpoint="producer_ids",
                    )
                except OSError as exc:
                    raise StorageError(f"{self.path}: cannot reserve producer ids: {exc}") from exc
                self._block_end = end
            producer_id = self._next
            self._next += 1
            return producer_id


def bump_epoch(current: ProducerIdAndEpoch, allocator: ProducerIdAllocator) -> ProducerIdAndEpoch:
    """The next epoch of a producer, or a new id at epoch 0 once the epoch is exhausted."""
    if current.epoch >= EPOCH_EXHAUSTED:
        return ProducerIdAndEpoch(allocator.next_id(), 0)
    return ProducerIdAndEpoch(current.producer_id, current.epoch + 1)


class ProducerIds:
    """InitProducerId for idempotent producers.

    * no previous id (-1): a fresh id at epoch 0;
    * a previous id and epoch this data directory issued: the same id at the next
      epoch (a new id at epoch 0 once the epoch is exhausted). The partitions then
      fence the old epoch (INVALID_PRODUCER_EPOCH) and take the new one from
      sequence 0: how a producer starts over after OUT_OF_ORDER_SEQUENCE_NUMBER
      without losing its id (Kafka's coordinator does this for transactional ids;
      for idempotent ones Kafka 2.5+ producers bump the epoch themselves);
    * an id this directory never issued: INVALID_REQUEST (it may belong to another
      broker's data, whose epochs this one cannot know);
    * a transactional id: INVALID_REQUEST, transactions are not implemented.

    Thread-safe (the allocator locks; the rest is pure).
    """

    def __init__(self, allocator: ProducerIdAllocator) -> None:
        self._allocator = allocator

    def init_producer_id(
        self,
        producer_id: int = -1,
        producer_epoch: int = -1,
        transactional_id: str | None = None,
    ) -> ProducerIdAndEpoch:
        """Raises StorageError when the block file cannot be written, InvalidRequest
        as the class doc says."""
        if transactional_id is not None:
            raise InvalidRequest(
                f"transactional id {transactional_id!r}: transactions are not supported; "
                "send none for an idempotent producer"
            )
        if producer_id < 0:
            if producer_epoch >= 0:
                raise InvalidRequest(f"producer epoch {producer_epoch} without a producer id")
            return ProducerIdAndEpoch(self._allocator.next_id(), 0)
        if producer_epoch < 0:
            raise InvalidRequest(f"producer id {producer_id} without its epoch")
        if not self._allocator.issued(producer_id):
            raise InvalidRequest(f"producer id {producer_id} was never issued by this broker")
        return bump_epoch(ProducerIdAndEpoch(producer_id, producer_epoch), self._allocator)
