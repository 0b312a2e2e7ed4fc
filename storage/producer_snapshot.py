"""Producer state snapshots: `<offset>.snapshot` files in the partition directory.

A snapshot holds the producer state of a partition as it was just before
`offset` (its map end offset); Kafka names and places them the same way and
takes one at every segment roll and at clean shutdown. On disk (big-endian):

    offset  type    field
    0       int16   version            SNAPSHOT_VERSION (2; version 1 files still load)
    2       uint32  crc                CRC-32C of bytes 6 .. end of file
    6       int64   offset             the snapshot's offset, also in its name
    14      int32   producer_count
    18      producer_count entries:
              int64 producer_id, int16 epoch, int64 last_timestamp,
              (version 2:) int32 coordinator_epoch, int64 current_txn_first_offset (-1: none),
              int8 batch_count, then batch_count batches (oldest first):
              int32 first_sequence, int32 last_sequence, int64 first_offset,
              int64 last_offset, int64 max_timestamp

Version 2 keeps what Kafka's snapshot keeps for transactions (its
CoordinatorEpoch and CurrentTxnFirstOffset fields), so an open transaction stays open
across a restart and the LSO stays below it until its marker comes. Unlike Kafka's
(one batch per producer), all retained batches are kept, so a
retry of any of the last `BATCHES_RETAINED` batches is still a duplicate after a restart.

Crash safety: written to a temp file, fsynced, renamed, directory fsynced
(`FileIO.write_atomic`); at a roll the two fsyncs wait for the log's next flush,
as Kafka defers them (a roll stays as cheap as creating three files). A torn or
corrupt file (length, version, CRC, offset or structure wrong) raises
CorruptSnapshotError; `restore` then deletes it and falls back to an older snapshot
or to the log itself, so damage costs a longer scan, never wrong state.
"""

from __future__ import annotations

import contextlib
import struct
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import crc32c
import structlog

from storage.fileio import FileIO
from storage.files import PRODUCER_SNAPSHOT_SUFFIX, offset_prefix
from storage.producer_state import (
    BATCHES_RETAINED,
    BatchFacts,
    BatchMetadata,
    CompletedTxn,
    Marker,
    ProducerEntry,
    ProducerState,
)

__all__ = [
    "SNAPSHOT_VERSION",
    "CorruptSnapshotError",
    "LoadedSnapshot",
    "decode_snapshot",
    "delete_snapshots_below",
    "encode_snapshot",
    "list_snapshots",
    "load_latest_snapshot",
    "read_snapshot",
    "remove_stray_snapshots",
    "restore",
    "snapshot_path",
    "write_snapshot",
]

log = structlog.get_logger("tidelog.storage")

SNAPSHOT_VERSION: Final = 2
_HEADER = struct.Struct(">hIqi")
_ENTRY_V1 = struct.Struct(">qhqb")
_ENTRY = struct.Struct(">qhqiqb")
_BATCH = struct.Struct(">iiqqq")
_CRC_START = 6  # the CRC covers everything after the version and the CRC itself
assert _HEADER.size == 18 and _ENTRY_V1.size == 19 and _ENTRY.size == 31 and _BATCH.size == 32


class CorruptSnapshotError(ValueError):
    """A snapshot file that is torn or damaged; the caller rebuilds from the log."""


@dataclass(frozen=True, slots=True)
class LoadedSnapshot:
    offset: int
    entries: dict[int, ProducerEntry]


def snapshot_path(directory: Path, offset: int) -> Path:
    return directory / f"{offset_prefix(offset)}{PRODUCER_SNAPSHOT_SUFFIX}"


def encode_snapshot(offset: int, entries: Mapping[int, ProducerEntry]) -> bytes:
    out = bytearray(_HEADER.pack(SNAPSHOT_VERSION, 0, offset, len(entries)))
    for producer_id in sorted(entries):
        entry = entries[producer_id]
        out += _ENTRY.pack(
            producer_id,
            entry.epoch,
            entry.last_timestamp,
            entry.coordinator_epoch,
            entry.txn_first_offset,
            len(entry.batches),
        )
        for b in entry.batches:
            out += _BATCH.pack(
                b.first_sequence, b.last_sequence, b.first_offset, b.last_offset, b.max_timestamp
            )
    struct.pack_into(">I", out, 2, crc32c.crc32c(memoryview(out)[_CRC_START:]))
    return bytes(out)


def decode_snapshot(data: bytes, expected_offset: int | None = None) -> dict[int, ProducerEntry]:
    """Parse and verify a snapshot; raises CorruptSnapshotError."""
    if len(data) < _HEADER.size:
        raise CorruptSnapshotError(
            f"{len(data)} bytes, shorter than the {_HEADER.size}-byte header"
        )
    version, crc, offset, count = _HEADER.unpack_from(data, 0)
    if version not in (1, SNAPSHOT_VERSION):
        raise CorruptSnapshotError(f"unknown version {version}")
    actual = crc32c.crc32c(memoryview(data)[_CRC_START:])
    if actual != crc:
        raise CorruptSnapshotError(f"CRC {crc:#010x} stored, {actual:#010x} computed")
    if expected_offset is not None and offset != expected_offset:
        raise CorruptSnapshotError(f"holds offset {offset}, its name says {expected_offset}")
    entries: dict[int, ProducerEntry] = {}
    pos = _HEADER.size
    try:
        for _ in range(count):
            if version == 1:
                producer_id, epoch, last_timestamp, batch_count = _ENTRY_V1.unpack_from(data, pos)
                coordinator_epoch, txn_first = -1, -1
                pos += _ENTRY_V1.size
            else:
                producer_id, epoch, last_timestamp, coordinator_epoch, txn_first, batch_count = (
                    _ENTRY.unpack_from(data, pos)
                )
                pos += _ENTRY.size
            if not 0 <= batch_count <= BATCHES_RETAINED or producer_id < 0:
                raise CorruptSnapshotError(f"bad entry for producer {producer_id} at byte {pos}")
            batches = tuple(
                BatchMetadata(*_BATCH.unpack_from(data, pos + i * _BATCH.size))
                for i in range(batch_count)
            )
            pos += batch_count * _BATCH.size
            entries[producer_id] = ProducerEntry(
                epoch, batches, last_timestamp, coordinator_epoch, txn_first
            )
    except struct.error as exc:
        raise CorruptSnapshotError(f"ends inside entry {len(entries)}: {exc}") from exc
    if pos != len(data) or len(entries) != count:
        raise CorruptSnapshotError(f"{len(data) - pos} bytes after {count} entries")
    return entries


def write_snapshot(
    io: FileIO,
    directory: Path,
    offset: int,
    entries: Mapping[int, ProducerEntry],
    *,
    sync: bool = True,
) -> Path:
    """Write the snapshot at `offset` atomically, replacing one already there.

    `sync=False` (a roll, as Kafka's `takeSnapshot(sync = false)`) leaves the fsyncs
    to the log's next flush: a power cut before it costs a longer scan, never state.
    """
    path = snapshot_path(directory, offset)
    io.write_atomic(
        path, encode_snapshot(offset, entries), failpoint="producer_snapshot", sync=sync
    )
    return path


def read_snapshot(io: FileIO, path: Path, offset: int) -> dict[int, ProducerEntry]:
    """The entries of one snapshot; CorruptSnapshotError names the path."""
    data = io.read_file(path)
    try:
        return decode_snapshot(data, offset)
    except CorruptSnapshotError as exc:
        raise CorruptSnapshotError(f"{path}: {exc}") from exc


def list_snapshots(directory: Path) -> list[tuple[int, Path]]:
    """(offset, path) of every snapshot file, lowest offset first."""
    found = []
    with contextlib.suppress(FileNotFoundError):
        for path in directory.iterdir():
            stem, suffix = path.name[: -len(PRODUCER_SNAPSHOT_SUFFIX)], path.suffix
            if suffix == PRODUCER_SNAPSHOT_SUFFIX and len(stem) == 20 and stem.isdigit():
                found.append((int(stem), path))
    return sorted(found)


def _unlink(io: FileIO, path: Path) -> bool:
    try:
        io.unlink(path)
        return True
    except FileNotFoundError:
        return False


def load_latest_snapshot(io: FileIO, directory: Path, max_offset: int) -> LoadedSnapshot | None:
    """The newest readable snapshot at or below `max_offset`, or None.

    Corrupt snapshots met on the way are deleted (logged), as Kafka's
    loadFromSnapshot does, so the next start does not trip on them again.
    """
    for offset, path in reversed(list_snapshots(directory)):
        if offset > max_offset:
            continue
        try:
            return LoadedSnapshot(offset, read_snapshot(io, path, offset))
        except CorruptSnapshotError as exc:
            log.warning("producer_snapshot_corrupt", path=str(path), reason=str(exc))
            _unlink(io, path)
        except FileNotFoundError:
            continue
    return None


def delete_snapshots_below(io: FileIO, directory: Path, offset: int) -> list[Path]:
    """Delete snapshots whose offset is below `offset` (those of deleted segments)."""
    return [path for at, path in list_snapshots(directory) if at < offset and _unlink(io, path)]


def remove_stray_snapshots(
    io: FileIO, directory: Path, segment_base_offsets: Iterable[int]
) -> list[Path]:
    """Kafka's removeStraySnapshots: delete snapshots that match no segment base,
    except the newest one if it lies above every segment base (the one a clean
    shutdown wrote at the log end)."""
    bases = set(segment_base_offsets)
    strays = [(at, path) for at, path in list_snapshots(directory) if at not in bases]
    if strays and bases and strays[-1][0] > max(bases):
        strays.pop()
    return [path for _, path in strays if _unlink(io, path)]


def restore(
    io: FileIO,
    directory: Path,
    state: ProducerState,
    *,
    log_start_offset: int,
    log_end_offset: int,
    now_ms: int,
    read_headers: Callable[[int], Iterable[BatchFacts]],
    read_marker: Callable[[BatchFacts], Marker | None] | None = None,
    on_completed: Callable[[CompletedTxn, int], None] | None = None,
    on_replay_start: Callable[[int], None] | None = None,
) -> int:
    """Rebuild `state` from the newest snapshot at or below `log_end_offset` plus the log.

    `read_headers(offset)` yields the header facts of the logged batches from
    the batch holding `offset` on (e.g. `protocol.batch.iter_headers` over the
    segments' bytes). Expired producers and those entirely below the log start
    are dropped. Snapshots above `log_end_offset` (after a truncation) are
    deleted. Returns the offset the replay started from. `read_marker`,
    `on_completed`: as `ProducerState.replay`; `on_replay_start(offset)` is called
    before the replay (the `.txnindex` entries from there on are rebuilt by it).
    """
    for at, path in list_snapshots(directory):
        if at > log_end_offset:
            _unlink(io, path)
    loaded = load_latest_snapshot(io, directory, log_end_offset)
    if loaded is None or loaded.offset < log_start_offset:
        state.truncate_fully_and_start_at(log_start_offset)
    else:
        state.load(loaded.entries, loaded.offset)
    start = state.map_end_offset
    if on_replay_start is not None:
        on_replay_start(start)
    state.replay(
        (
            h
            for h in read_headers(start)
            if h.base_offset + h.last_offset_delta >= start and h.base_offset < log_end_offset
        ),
        read_marker,
        on_completed,
    )
    state.map_end_offset = log_end_offset
    state.remove_expired(now_ms)
    state.truncate_head(log_start_offset)
    return start
