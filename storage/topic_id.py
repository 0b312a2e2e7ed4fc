"""A topic's id (a UUID, Kafka's topic id), kept as Kafka keeps it: `partition.metadata`.

Kafka writes one small text file in every partition directory (its
`PartitionMetadataFile`), read back at start:

    version: 0
    topic_id: <the id in Kafka's base64url form, no padding: 22 characters>

Tidelog writes the same file, so a data directory carries its topic ids as Kafka's
does (and an operator's tools that read it find them). The id is made when the topic
is created (a random v4 UUID, never one Kafka reserves: the zero UUID, the metadata
topic's, or one whose text starts with "-", which Kafka's tools would read as an
option) and written into each partition before the topic's metadata; a topic found
without one at load (created by an older Tidelog) gets one then. A partition added
later gets its topic's id. The ids are what Metadata v10+ answers and Fetch v13+
names topics by (broker/kafka/).
"""

from __future__ import annotations

import base64
import uuid
from collections.abc import Iterable
from pathlib import Path

import structlog

from storage.fileio import FileIO

__all__ = [
    "PARTITION_METADATA_FILE",
    "ZERO_TOPIC_ID",
    "decode_topic_id",
    "encode_topic_id",
    "ensure_partition_metadata",
    "find_topic_id",
    "new_topic_id",
    "read_partition_metadata",
    "write_partition_metadata",
]

log = structlog.get_logger("tidelog.storage")

PARTITION_METADATA_FILE = "partition.metadata"
_VERSION = 0
# Kafka's reserved ids (org.apache.kafka.common.Uuid): ZERO_UUID and METADATA_TOPIC_ID.
ZERO_TOPIC_ID = bytes(16)
_METADATA_TOPIC_ID = bytes(15) + b"\x01"
_RESERVED = frozenset({ZERO_TOPIC_ID, _METADATA_TOPIC_ID})


def encode_topic_id(topic_id: bytes) -> str:
    """Kafka's text form of a UUID (`Uuid.toString`): base64url of its 16 bytes, no padding."""
    return base64.urlsafe_b64encode(topic_id).decode().rstrip("=")


def decode_topic_id(text: str) -> bytes:
    """The 16 bytes of Kafka's text form; ValueError if it is not one."""
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16 or encode_topic_id(raw) != text:
        raise ValueError(f"not a topic id: {text!r}")
    return raw


def new_topic_id() -> bytes:
    """A random id, as Kafka's `Uuid.randomUuid` draws it (never a reserved one)."""
    while True:
        candidate = uuid.uuid4().bytes
        if candidate not in _RESERVED and not encode_topic_id(candidate).startswith("-"):
            return candidate


def read_partition_metadata(io: FileIO, directory: Path) -> bytes | None:
    """The topic id in `directory`'s partition.metadata, or None when there is none or
    it cannot be read (logged: the topic's other partitions, or a new id, stand in)."""
    path = directory / PARTITION_METADATA_FILE
    if not path.exists():
        return None
    try:
        text = io.read_file(path).decode()
        fields = dict(
            line.split(": ", 1) for line in text.splitlines() if line.strip() and ": " in line
        )
        if int(fields["version"]) != _VERSION:
            raise ValueError(f"version {fields['version']}")
        return decode_topic_id(fields["topic_id"].strip())
    except (OSError, UnicodeDecodeError, KeyError, ValueError) as exc:
        log.warning("partition_metadata_unreadable", path=str(path), error=str(exc))
        return None


def write_partition_metadata(io: FileIO, directory: Path, topic_id: bytes) -> None:
    """Write (atomically, fsynced) `directory`'s partition.metadata naming `topic_id`."""
    text = f"version: {_VERSION}\ntopic_id: {encode_topic_id(topic_id)}\n"
    io.write_atomic(
        directory / PARTITION_METADATA_FILE, text.encode(), failpoint="partition_metadata"
    )


def find_topic_id(io: FileIO, directories: Iterable[Path]) -> bytes | None:
    """The id the first of a topic's partition directories names, or None if none does."""
    for directory in directories:
        found = read_partition_metadata(io, directory)
        if found is not None:
            return found
    return None


def ensure_partition_metadata(io: FileIO, directory: Path, topic_id: bytes) -> None:
    """Write `directory`'s partition.metadata unless it already names `topic_id` (a
    partition naming another id, which Kafka refuses to load, is logged and rewritten:
    one broker holds the topic, and its partitions agree on the first one found)."""
    found = read_partition_metadata(io, directory)
    if found == topic_id:
        return
    if found is not None:
        log.warning(
            "partition_metadata_topic_id_replaced",
            path=str(directory),
            found=encode_topic_id(found),
            topic_id=encode_topic_id(topic_id),
        )
    write_partition_metadata(io, directory, topic_id)
