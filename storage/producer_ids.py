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

Thread-safe: `next_id` takes a lock (handlers of several connections call it).
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

    def next_id(self) -> int:
        """A producer id never handed out before by this data directory."""
        with self._lock:
            if self._next >= self._block_end:
                end = self._next + self._block_size
                if end > PRODUCER_ID_MAX:
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
    """InitProducerId: a fresh id at epoch 0 for an idempotent producer (no
    transactional id), as Kafka's coordinator answers even when the request names
    a previous id and epoch (KIP-360); a bumped epoch for a known transactional id.

    Transactional ids are remembered in memory only: transactions are not
    implemented yet, and a restart then gives a known transactional id a new id,
    as a lost transaction log would in Kafka (docs/idempotence.md).
    """

    def __init__(self, allocator: ProducerIdAllocator) -> None:
        self._allocator = allocator
        self._lock = threading.Lock()
        self._transactional: dict[str, ProducerIdAndEpoch] = {}

    def init_producer_id(self, transactional_id: str | None = None) -> ProducerIdAndEpoch:
        """Raises StorageError when the block file cannot be written, InvalidRequest
        for an empty transactional id (Kafka's rule)."""
        if transactional_id == "":
            raise InvalidRequest("transactional id must not be empty; use none for idempotence")
        if transactional_id is None:
            return ProducerIdAndEpoch(self._allocator.next_id(), 0)
        with self._lock:
            known = self._transactional.get(transactional_id)
            if known is None:
                fresh = ProducerIdAndEpoch(self._allocator.next_id(), 0)
            else:
                fresh = bump_epoch(known, self._allocator)
            self._transactional[transactional_id] = fresh
            return fresh
