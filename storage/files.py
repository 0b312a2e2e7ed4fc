"""Every file name of the data directory, in one place (docs/storage.md "File layout", docs/style.md
item 4).

Layout::

    <data_dir>/
      .lock                              held with flock while a LogManager is open
      .tidelog_cleanshutdown             present only between a clean close and the next open
      recovery-point-offset-checkpoint   Kafka's checkpoint text format (storage.checkpoint)
      log-start-offset-checkpoint
      cleaner-offset-checkpoint          written by the compaction package
      producer-id-block                  next unallocated producer id (storage.producer_ids)
      topics/<topic>.json                partition count + config overrides (storage.topics)
      <topic>-<partition>/
        00000000000000000000.log         record batches, back to back
        00000000000000000000.index       offset index (8-byte entries)
        00000000000000000000.timeindex   time index (12-byte entries)
        00000000000000000000.snapshot    producer state at that offset (storage.producer_snapshot)
        ... plus transient `.deleted`, `.cleaned`, `.swap` suffixes after the normal one,
        and `.quarantined` on files load refused (overlapping, out of order or out of
        range); load ignores them, an operator decides what to do with them

Also the delayed deletion queue: segments chosen for deletion are renamed with
`.deleted` at once and unlinked `file.delete.delay.ms` later by whoever drains
the queue (the broker's scheduler).
"""

from __future__ import annotations

import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
PRODUCER_SNAPSHOT_SUFFIX = ".snapshot"  # producer state at an offset (storage.producer_snapshot)
SEGMENT_SUFFIXES = (LOG_SUFFIX, INDEX_SUFFIX, TIME_INDEX_SUFFIX)
DELETED_SUFFIX = ".deleted"
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
TEMP_SUFFIX = ".tmp"
# Segment files load refused; never read again, kept for an operator.
QUARANTINED_SUFFIX = ".quarantined"

LOCK_FILE = ".lock"
CLEAN_SHUTDOWN_FILE = ".tidelog_cleanshutdown"
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
# Which segments are in the object store, and in what state (storage.remote.manifest).
REMOTE_MANIFEST_FILE = "remote-manifest.json"
PRODUCER_ID_BLOCK_FILE = "producer-id-block"  # next unallocated producer id (storage.producer_ids)
TOPICS_DIR = "topics"
TOPIC_METADATA_SUFFIX = ".json"

# Base offsets are printed in 20 digits: enough for any int64, and names sort as numbers.
OFFSET_DIGITS = 20
# Offsets are int64: a segment file named above this cannot hold a valid batch.
MAX_BASE_OFFSET = 2**63 - 1
# Kafka's limit: a partition directory name `<topic>-<partition>` must fit in 255 bytes.
TOPIC_NAME_MAX_CHARS = 249
_TOPIC_NAME_RE = re.compile(r"[a-zA-Z0-9._-]+")
_SEGMENT_NAME_RE = re.compile(r"^(\d{20})(\.[a-z]+)((?:\.[a-z]+)?)$")


def offset_prefix(base_offset: int) -> str:
    """`00000000000000000123` for 123."""
    return f"{base_offset:0{OFFSET_DIGITS}d}"


def log_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{LOG_SUFFIX}{suffix}"


def index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{INDEX_SUFFIX}{suffix}"


def time_index_path(directory: Path, base_offset: int, suffix: str = "") -> Path:
    return directory / f"{offset_prefix(base_offset)}{TIME_INDEX_SUFFIX}{suffix}"


def segment_paths(directory: Path, base_offset: int, suffix: str = "") -> list[Path]:
    """The `.log`, `.index` and `.timeindex` paths of one segment, with an optional suffix."""
    return [
        log_path(directory, base_offset, suffix),
        index_path(directory, base_offset, suffix),
        time_index_path(directory, base_offset, suffix),
    ]


@dataclass(frozen=True, slots=True)
class SegmentFileName:
    """A parsed segment file name: `<base>.<kind>[.<transient suffix>]`."""

    base_offset: int
    kind: str  # one of SEGMENT_SUFFIXES
    transient: str  # "" or DELETED_SUFFIX / CLEANED_SUFFIX / SWAP_SUFFIX


def parse_segment_file_name(name: str) -> SegmentFileName | None:
    """Parse a segment file name; None for anything that is not one of ours."""
    match = _SEGMENT_NAME_RE.match(name)
    if match is None:
        return None
    kind, transient = match.group(2), match.group(3)
    if kind not in SEGMENT_SUFFIXES:
        return None
    if transient and transient not in (DELETED_SUFFIX, CLEANED_SUFFIX, SWAP_SUFFIX):
        return None
    return SegmentFileName(int(match.group(1)), kind, transient)


def validate_topic_name(name: str) -> str | None:
    """Why `name` is not a legal topic name (Kafka's rules), or None when it is.

    Legal names cannot contain a path separator or be `.`/`..`, so no topic can
    escape the data directory.
    """
    if not name:
        return "topic name is empty"
    if name in (".", ".."):
        return f"topic name cannot be {name!r}"
    if len(name) > TOPIC_NAME_MAX_CHARS:
        return f"topic name is longer than {TOPIC_NAME_MAX_CHARS} characters"
    if _TOPIC_NAME_RE.fullmatch(name) is None:
        return f"topic name {name!r} has characters outside [a-zA-Z0-9._-]"
    return None


def partition_dir_name(topic: str, partition: int) -> str:
    return f"{topic}-{partition}"


def parse_partition_dir_name(name: str) -> tuple[str, int] | None:
    """Split at the last `-` (Kafka's rule); None when it is not `<legal topic>-<int>`."""
    topic, sep, number = name.rpartition("-")
    if not sep or not number.isdigit() or validate_topic_name(topic) is not None:
        return None
    return topic, int(number)


def topic_metadata_path(data_dir: Path, topic: str) -> Path:
    return data_dir / TOPICS_DIR / f"{topic}{TOPIC_METADATA_SUFFIX}"


# Longest file name most file systems accept (ext4, xfs, tmpfs).
NAME_MAX = 255


def capped_name(stem: str, suffix: str) -> str:
    """`stem + suffix`, cutting `stem` so the result fits NAME_MAX (Kafka caps its
    `-delete` directory names the same way: a 249-character topic must still work)."""
    return stem[: NAME_MAX - len(suffix)] + suffix


def quarantined_name(path: Path) -> Path:
    """`<name>.quarantined`, or `<name>.<random>.quarantined` if that exists already
    (a second quarantine of the same name never overwrites the first)."""
    target = path.with_name(path.name + QUARANTINED_SUFFIX)
    if target.exists():
        target = path.with_name(capped_name(path.name, f".{uuid.uuid4().hex}{QUARANTINED_SUFFIX}"))
    return target


def delete_marked_files(paths: list[Path]) -> int:
    """Unlink files already renamed with `.deleted`; returns how many existed.

    Open file descriptors (a reader still serving an old segment) stay valid:
    POSIX unlink removes only the name.
    """
    removed = 0
    for path in paths:
        try:
            path.unlink()
            removed += 1
        except FileNotFoundError:
            pass
    return removed


class DeletionQueue:
    """Files renamed `.deleted` and the time (ms) after which they may be unlinked.

    Thread-safe: logs add from worker threads, the broker's scheduler drains.
    After a crash the queue is lost; startup deletes every `.deleted` file anyway.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: list[tuple[Path, int]] = []

    def add(self, paths: list[Path], due_ms: int) -> None:
        with self._lock:
            self._entries.extend((path, due_ms) for path in paths)

    def pending(self) -> list[tuple[Path, int]]:
        with self._lock:
            return list(self._entries)

    def take_due(self, now_ms: int) -> list[Path]:
        """Remove and return the paths whose delay has passed."""
        with self._lock:
            due = [path for path, at in self._entries if at <= now_ms]
            self._entries = [(path, at) for path, at in self._entries if at > now_ms]
            return due
