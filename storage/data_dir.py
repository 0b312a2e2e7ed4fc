"""A data directory's own files: the lock, topic metadata, checkpoints, and directories.

`LogManager` (storage/manager.py) decides what topics and partitions exist; this
class owns how that is laid out on disk (storage.files names every file) and the
order of writes that makes each change all or nothing across a crash:

- `topics/<topic>.json` holds `{"version": 1, "topic": ..., "partitions": N,
  "configs": {kafka key: str}}`, written atomically after every partition directory
  of a new topic (or of added partitions) is in place, and removed before they go;
- a deleted topic's partition directories are renamed `...-delete` before removal, so
  the next start finishes an interrupted deletion; a partition directory no topic
  claims is moved aside as `...-stray`, never deleted, and never resurrected by a new
  topic of the same name;
- a temp file of an interrupted atomic replacement is never the current content
  (`write_atomic` renames only a complete, fsynced one), so it is simply removed.

Not thread-safe on its own: the manager calls it under its lock.
"""

from __future__ import annotations

import fcntl
import json
import os
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import structlog

from protocol.errors import StorageError
from storage.checkpoint import read_checkpoint, write_checkpoint
from storage.fileio import FileIO
from storage.files import (
    CLEAN_SHUTDOWN_FILE,
    LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    TEMP_SUFFIX,
    TOPIC_METADATA_SUFFIX,
    TOPICS_DIR,
    capped_name,
    parse_partition_dir_name,
    partition_dir_name,
    topic_metadata_path,
    validate_topic_name,
)

log = structlog.get_logger("tidelog.storage")

# A request-level bound; what fits the process's descriptors is storage.fdbudget's call.
MAX_PARTITIONS_PER_TOPIC = 10_000
TOPIC_METADATA_VERSION = 1
# Suffix of a partition directory whose topic is being deleted (Kafka's naming).
DELETE_DIR_SUFFIX = "-delete"
# Suffix of a partition directory no topic claims, kept for an operator (Kafka: -stray).
STRAY_DIR_SUFFIX = "-stray"

Offsets = dict[tuple[str, int], int]


class DataDir:
    """One data directory's files; `lock()` before anything else, `unlock()` last."""

    def __init__(self, path: Path, io: FileIO) -> None:
        self.path = path
        self._io = io
        self._lock_fd: int | None = None

    # ---- the lock and the clean-shutdown marker ----------------------------

    def lock(self) -> None:
        """Create the directory if needed and hold its lock: two brokers never share it."""
        self._io.mkdir(self.path)
        self._io.mkdir(self.path / TOPICS_DIR)
        fd = os.open(self.path / LOCK_FILE, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            os.close(fd)
            raise StorageError(
                f"data directory {self.path} is locked by another process "
                f"({LOCK_FILE} is held); two brokers cannot share one data directory"
            ) from exc
        self._lock_fd = fd

    def unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def take_clean_shutdown_marker(self) -> bool:
        """Whether the last stop was clean; the marker goes before loading, so a crash
        while loading counts as an unclean stop."""
        marker = self.path / CLEAN_SHUTDOWN_FILE
        if not marker.exists():
            return False
        self._io.unlink(marker)
        self._io.fsync_dir(self.path)
        return True

    def write_clean_shutdown_marker(self) -> None:
        self._io.write_atomic(self.path / CLEAN_SHUTDOWN_FILE, b"", failpoint="checkpoint")

    # ---- checkpoints -------------------------------------------------------

    def read_checkpoints(self) -> tuple[Offsets, Offsets]:
        """(recovery points, log start offsets) per partition."""
        return (
            read_checkpoint(self._io, self.path / RECOVERY_POINT_CHECKPOINT),
            read_checkpoint(self._io, self.path / LOG_START_OFFSET_CHECKPOINT),
        )

    def write_checkpoints(self, recovery: Offsets, starts: Offsets) -> None:
        try:
            write_checkpoint(self._io, self.path / RECOVERY_POINT_CHECKPOINT, recovery)
            write_checkpoint(self._io, self.path / LOG_START_OFFSET_CHECKPOINT, starts)
        except OSError as exc:
            log.error("storage_error", operation="write_checkpoints", errno=exc.errno)
            raise StorageError(f"writing checkpoints failed: {exc}") from exc

    # ---- topic metadata ----------------------------------------------------

    def metadata_files(self) -> Iterator[tuple[str, Path]]:
        """(topic name the file claims, path) of every topic metadata file, sorted."""
        directory = self.path / TOPICS_DIR
        for entry in sorted(os.listdir(directory)):
            if entry.endswith(TOPIC_METADATA_SUFFIX):
                yield entry[: -len(TOPIC_METADATA_SUFFIX)], directory / entry

    def read_metadata(self, path: Path) -> dict[str, Any]:
        """A topic's name, partition count and stored overrides; StorageError if the file
        cannot be trusted (its name, its count, its shape)."""
        try:
            meta = json.loads(self._io.read_file(path))
            name, partitions, configs = meta["topic"], meta["partitions"], meta["configs"]
            if validate_topic_name(name) is not None or f"{name}{TOPIC_METADATA_SUFFIX}" != (
                path.name
            ):
                raise ValueError(f"topic name {name!r} does not match the file name")
            if type(partitions) is not int or not 1 <= partitions <= MAX_PARTITIONS_PER_TOPIC:
                raise ValueError(f"partitions must be in [1, {MAX_PARTITIONS_PER_TOPIC}]")
            if not isinstance(configs, dict):
                raise ValueError("configs must be a map")
            return {"topic": name, "partitions": partitions, "configs": dict(configs)}
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"topic metadata {path} is unreadable: {exc}") from exc

    def write_metadata(self, name: str, partitions: int, overrides: Mapping[str, str]) -> None:
        body = {
            "version": TOPIC_METADATA_VERSION,
            "topic": name,
            "partitions": partitions,
            "configs": dict(overrides),
        }
        data = json.dumps(body, sort_keys=True, indent=1).encode()
        self._io.write_atomic(
            topic_metadata_path(self.path, name), data, failpoint="topic_metadata"
        )

    # ---- partition directories ---------------------------------------------

    def partition_dir(self, topic: str, partition: int) -> Path:
        return self.path / partition_dir_name(topic, partition)

    def sync(self) -> None:
        """Make new or renamed partition directories durable."""
        self._io.fsync_dir(self.path)

    def remove_partition_dirs(self, topic: str, partitions: range) -> None:
        """Roll back a creation that failed: each directory made so far, best effort."""
        for partition in partitions:
            directory = self.partition_dir(topic, partition)
            try:
                self._io.rmtree(directory)
            except FileNotFoundError:
                pass
            except OSError as cleanup:
                log.error("topic_rollback_failed", path=str(directory), error=str(cleanup))

    def delete_topic(self, name: str, partitions: int) -> None:
        """Metadata first (a crash never resurrects the topic), then each partition
        directory, renamed `-delete` before removal (descriptors open on its files stay
        valid for readers inside)."""
        self._io.unlink(topic_metadata_path(self.path, name))
        self._io.fsync_dir(self.path / TOPICS_DIR)
        for partition in range(partitions):
            directory = self.partition_dir(name, partition)
            doomed = directory.with_name(
                capped_name(directory.name, f".{uuid.uuid4().hex}{DELETE_DIR_SUFFIX}")
            )
            self._io.rename(directory, doomed)
            self._io.rmtree(doomed)
        self._io.fsync_dir(self.path)

    def delete_unloaded_topic(self, name: str) -> None:
        """A topic that never loaded: its metadata, then whatever directories it has (the
        next start would move leftovers aside as strays)."""
        self._io.unlink(topic_metadata_path(self.path, name))
        self._io.fsync_dir(self.path / TOPICS_DIR)
        for entry in os.listdir(self.path):
            parsed = parse_partition_dir_name(entry)
            if parsed is not None and parsed[0] == name:
                self._io.rmtree(self.path / entry)

    # ---- start-up clean-up -------------------------------------------------

    def remove_temp_files(self) -> None:
        """Drop the temp files of replacements a crash interrupted."""
        for directory in (self.path, self.path / TOPICS_DIR):
            leftovers = [name for name in os.listdir(directory) if name.endswith(TEMP_SUFFIX)]
            for name in leftovers:
                self._io.unlink(directory / name)
                log.info("temp_file_deleted", path=str(directory / name))
            if leftovers:
                self._io.fsync_dir(directory)

    def sweep_dirs(self, claimed: Callable[[str, int], bool]) -> None:
        """Finish interrupted topic deletions; move aside partition directories that
        `claimed(topic, partition)` disowns (most likely a topic deletion that crashed
        after removing the metadata)."""
        for entry in os.listdir(self.path):
            path = self.path / entry
            if not path.is_dir() or entry == TOPICS_DIR:
                continue
            if entry.endswith(DELETE_DIR_SUFFIX):
                self._io.rmtree(path)
                log.info("topic_dir_removed", path=str(path))
                continue
            parsed = parse_partition_dir_name(entry)
            if parsed is None or claimed(*parsed):
                continue
            aside = path.with_name(capped_name(entry, f".{uuid.uuid4().hex}{STRAY_DIR_SUFFIX}"))
            self._io.rename(path, aside)
            log.warning("stray_partition_dir_moved", path=str(path), moved_to=str(aside))
