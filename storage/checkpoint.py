"""Offset checkpoint files in Kafka's text format (docs/storage.md "File layout").

    0                      version
    2                      number of entries
    orders 0 1234          "<topic> <partition> <offset>", one per line
    clicks 3 99

Written atomically (temp file, fsync, rename, fsync the directory), so a crash
leaves the old or the new file. Reading is forgiving: a missing file is empty,
and a malformed one (including an offset outside [0, int64 max] or a partition
outside int32) is reported and treated as empty, which only makes the next start
rescan more (recovery point 0), never lose data.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import structlog

from storage.fileio import FileIO
from storage.files import MAX_BASE_OFFSET

CHECKPOINT_VERSION = 0
# Partitions are int32 on the wire.
_MAX_PARTITION = 2**31 - 1

log = structlog.get_logger("tidelog.storage")

TopicPartition = tuple[str, int]


class CheckpointFormatError(ValueError):
    """A checkpoint file that does not follow the format above."""


def encode_checkpoint(entries: Mapping[TopicPartition, int]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))]
    lines += [
        f"{topic} {partition} {offset}" for (topic, partition), offset in sorted(entries.items())
    ]
    return ("\n".join(lines) + "\n").encode()


def decode_checkpoint(data: bytes) -> dict[TopicPartition, int]:
    """Parse checkpoint text; raises CheckpointFormatError."""
    try:
        lines = data.decode("utf-8").splitlines()
        if len(lines) < 2 or int(lines[0]) != CHECKPOINT_VERSION:
            raise CheckpointFormatError("bad version line")
        count = int(lines[1])
        body = [line for line in lines[2:] if line.strip()]
        if count != len(body):
            raise CheckpointFormatError(f"header says {count} entries, file has {len(body)}")
        entries: dict[TopicPartition, int] = {}
        for line in body:
            topic, partition_text, offset_text = line.split()
            partition, offset = int(partition_text), int(offset_text)
            # Load trusts nothing it did not check: an offset past int64 would start a
            # log where no offset can be encoded (and delete every segment below it).
            if not 0 <= partition <= _MAX_PARTITION or not 0 <= offset <= MAX_BASE_OFFSET:
                raise CheckpointFormatError(f"entry {line!r} is out of range")
            entries[(topic, partition)] = offset
        return entries
    except CheckpointFormatError:
        raise
    except (UnicodeDecodeError, ValueError) as exc:
        raise CheckpointFormatError(str(exc)) from exc


def read_checkpoint(io: FileIO, path: Path) -> dict[TopicPartition, int]:
    """The entries of `path`; {} when it is missing or malformed (logged)."""
    try:
        data = io.read_file(path)
    except FileNotFoundError:
        return {}
    try:
        return decode_checkpoint(data)
    except CheckpointFormatError as exc:
        log.error("checkpoint_unreadable", path=str(path), reason=str(exc))
        return {}


def write_checkpoint(io: FileIO, path: Path, entries: Mapping[TopicPartition, int]) -> None:
    io.write_atomic(path, encode_checkpoint(entries), failpoint="checkpoint")
