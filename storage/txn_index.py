"""A segment's `.txnindex`: the aborted transactions whose ABORT marker it holds.

Kafka's TxnIndex / AbortedTxn, byte for byte (Kafka's `kafka-dump-log.sh --files
<base>.txnindex` reads ours): entries of 34 bytes, big-endian, appended in marker order:

    offset  type    field
    0       int16   version            0
    2       int64   producer_id
    10      int64   first_offset       the transaction's first offset in the partition
    18      int64   last_offset        its ABORT marker's offset
    26      int64   last_stable_offset the partition's LSO right after the marker

The file is created with the first entry (most segments have none, as in Kafka) and
is written with the marker, fsynced with the segment (`flush`). Recovery rebuilds
the entries of every batch it replays (`truncate_from` drops those, the replay appends
them again), so a torn tail costs nothing: a load keeps whole entries only.

`collect(fetch_offset, upper)` is Kafka's `collectAbortedTxns`: the entries whose
range [first_offset, last_offset] meets [fetch_offset, upper), and whether the
search may stop here (an entry's LSO reached `upper`). Entries are kept in memory
(34 bytes on disk, a tuple in memory: a partition has few aborted transactions) so a
fetch reads no file. Thread safety: appends under the log's lock; readers see a
list that only grows by `append` (a new list on truncation), so a reader's copy of
the attribute stays consistent.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Final, NamedTuple

import structlog

from storage.fileio import FileIO

__all__ = ["ENTRY_SIZE", "AbortedTxn", "TxnIndex", "encode_entries", "parse_entries"]

log = structlog.get_logger("tidelog.storage")

ENTRY_SIZE: Final = 34
_ENTRY = struct.Struct(">hqqqq")
assert _ENTRY.size == ENTRY_SIZE


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


def encode_entries(entries: list[AbortedTxn]) -> bytes:
    """The bytes of a `.txnindex` holding `entries`."""
    return b"".join(_ENTRY.pack(0, *e) for e in entries)


def parse_entries(data: bytes) -> list[AbortedTxn]:
    """The whole version-0 entries of a `.txnindex`'s bytes, up to the first other one
    (a remote copy: what `TxnIndex.load` keeps of a local file)."""
    entries = []
    for pos in range(0, len(data) - len(data) % ENTRY_SIZE, ENTRY_SIZE):
        version, *fields = _ENTRY.unpack_from(data, pos)
        if version != 0:
            break
        entries.append(AbortedTxn(*fields))
    return entries


class TxnIndex:
    """The `.txnindex` of one segment (see the module doc)."""

    __slots__ = ("_fd", "_io", "_unsynced", "entries", "path")

    def __init__(self, path: Path, io: FileIO) -> None:
        self.path = path
        self._io = io
        self._fd = -1
        self._unsynced = False
        self.entries: list[AbortedTxn] = []

    @classmethod
    def load(cls, path: Path, io: FileIO) -> TxnIndex:
        """The index at `path` (none there: empty); whole entries only."""
        index = cls(path, io)
        try:
            data = io.read_file(path)
        except FileNotFoundError:
            return index
        whole = len(data) - len(data) % ENTRY_SIZE
        for pos in range(0, whole, ENTRY_SIZE):
            version, *fields = _ENTRY.unpack_from(data, pos)
            if version != 0:
                log.warning("txn_index_entry_refused", path=str(path), position=pos)
                whole = pos
                break
            index.entries.append(AbortedTxn(*fields))
        if whole != len(data):
            index._rewrite()
        return index

    def __len__(self) -> int:
        return len(self.entries)

    def _open(self) -> int:
        if self._fd < 0:
            self._fd = self._io.open(self.path, create=True)
        return self._fd

    def append(self, txn: AbortedTxn) -> None:
        """Add one entry at the end of the file (an ABORT marker was written)."""
        fd = self._open()
        position = len(self.entries) * ENTRY_SIZE
        self._io.write_all(fd, _ENTRY.pack(0, *txn), position)
        self.entries = [*self.entries, txn]
        self._unsynced = True

    def truncate_from(self, offset: int) -> None:
        """Forget the entries whose marker lies at or after `offset` (a replay from
        there appends them again; a truncation took them away)."""
        kept = [e for e in self.entries if e.last_offset < offset]
        if len(kept) != len(self.entries):
            self.entries = kept
            self._rewrite()

    def _rewrite(self) -> None:
        if not self.entries:
            self.close()
            try:
                self._io.unlink(self.path)
            except FileNotFoundError:
                pass
            return
        data = encode_entries(self.entries)
        self.close()
        self._io.write_atomic(self.path, data, failpoint="txn_index", sync=False)
        self._unsynced = True

    def collect(self, fetch_offset: int, upper: int) -> tuple[list[AbortedTxn], bool]:
        """Kafka's collectAbortedTxns: entries meeting [fetch_offset, upper), and whether
        the search is complete (an entry's LSO is at or past `upper`)."""
        found = []
        for entry in self.entries:
            if entry.last_offset >= fetch_offset and entry.first_offset < upper:
                found.append(entry)
            if entry.last_stable_offset >= upper:
                return found, True
        return found, False

    def flush(self) -> None:
        """fsync what was appended (the segment's flush)."""
        if self._unsynced and self._fd >= 0:
            self._io.fsync(self._fd)
        self._unsynced = False

    def rename(self, path: Path) -> None:
        self.path = path
        self.close()

    def close(self) -> None:
        if self._fd >= 0:
            self._io.close(self._fd)
            self._fd = -1
