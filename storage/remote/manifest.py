"""The per-partition manifest: which segments are in the object store, in what state.

The broker's truth is `remote-manifest.json` in the partition directory, replaced
atomically (temp file, fsync, rename, fsync the directory: `FileIO.write_atomic`), so
a crash leaves the old or the new manifest, never a torn one. After every change the
same bytes are PUT to `<prefix>/<topic>-<partition>/manifest.json` for readers outside
the broker (Spark); that copy may lag the local one by the last change.

Format (JSON, version 1)::

    {"version": 1, "topic": "t", "partition": 0, "log_start_offset": 0,
     "segments": [
       {"segment_id": "<32 hex>", "base_offset": 0, "end_offset": 99,
        "size_bytes": 12345, "base_timestamp_ms": 1700000000000,
        "max_timestamp_ms": 1700000001000, "layouts": 1,
        "state": "COPY_SEGMENT_FINISHED", "updated_ms": 1700000002000}, ...]}

`end_offset` is the segment's last offset (inclusive), as Kafka's
RemoteLogSegmentMetadata has it. `layouts` is the bitmask of batch layouts the local
segment held (storage.segment). `log_start_offset` is the partition's log start
offset (it spans both tiers): segments wholly below it are deleted or being deleted.
Segments are listed by base offset, then `updated_ms`.

States follow KIP-405's RemoteLogSegmentState, with its transitions:
COPY_SEGMENT_STARTED -> COPY_SEGMENT_FINISHED | DELETE_SEGMENT_STARTED;
COPY_SEGMENT_FINISHED -> DELETE_SEGMENT_STARTED; DELETE_SEGMENT_STARTED ->
DELETE_SEGMENT_FINISHED. Readable segments are those COPY_SEGMENT_FINISHED.

Invariants (checked on every change and on decode):
- segment ids are unique;
- readable segments do not overlap, so an offset is served by at most one object;
- a COPY_SEGMENT_STARTED entry is written (durably) before any object of its id is
  PUT, so every object in the bucket is named by some entry or is an orphan the sweep
  may delete: after a crash, every COPY_SEGMENT_STARTED entry is an orphan.

A manifest is an immutable value; every change returns a new one. Not thread-safe
to write: one writer per partition (the broker's uploader and remote retention,
which hold the partition's remote lock).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Any

from storage.fileio import FileIO
from storage.files import REMOTE_MANIFEST_FILE

__all__ = [
    "FINISHED_DELETIONS_KEPT",
    "MANIFEST_VERSION",
    "Manifest",
    "ManifestFormatError",
    "RemoteSegment",
    "SegmentState",
    "manifest_path",
    "read_manifest",
    "write_manifest",
]

MANIFEST_VERSION = 1
# DELETE_SEGMENT_FINISHED entries kept so a reader holding an older listing learns the
# segment went; older ones are dropped so the manifest does not grow forever.
FINISHED_DELETIONS_KEPT = 100


class ManifestFormatError(ValueError):
    """A manifest that cannot be decoded or breaks an invariant; names the problem."""


class SegmentState(StrEnum):
    """KIP-405's RemoteLogSegmentState (the values are Kafka's names)."""

    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


_TRANSITIONS: dict[SegmentState, frozenset[SegmentState]] = {
    SegmentState.COPY_SEGMENT_STARTED: frozenset(
        {SegmentState.COPY_SEGMENT_FINISHED, SegmentState.DELETE_SEGMENT_STARTED}
    ),
    SegmentState.COPY_SEGMENT_FINISHED: frozenset({SegmentState.DELETE_SEGMENT_STARTED}),
    SegmentState.DELETE_SEGMENT_STARTED: frozenset({SegmentState.DELETE_SEGMENT_FINISHED}),
    SegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


def valid_transition(old: SegmentState, new: SegmentState) -> bool:
    return new in _TRANSITIONS[old]


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    """One manifest entry: an uploaded (or being uploaded / deleted) segment."""

    segment_id: str
    base_offset: int
    end_offset: int  # last offset, inclusive
    size_bytes: int
    base_timestamp_ms: int
    max_timestamp_ms: int
    layouts: int
    state: SegmentState
    updated_ms: int
    # Whether a `.txnindex` object was uploaded with it (the segment had aborted
    # transactions). Manifests written before the field say nothing: True, so a
    # reader still looks for the object.
    has_txn_index: bool = True

    @property
    def next_offset(self) -> int:
        return self.end_offset + 1

    @property
    def readable(self) -> bool:
        return self.state is SegmentState.COPY_SEGMENT_FINISHED

    def to_json(self) -> dict[str, Any]:
        return {
            "segment_id": self.segment_id,
            "base_offset": self.base_offset,
            "end_offset": self.end_offset,
            "size_bytes": self.size_bytes,
            "base_timestamp_ms": self.base_timestamp_ms,
            "max_timestamp_ms": self.max_timestamp_ms,
            "layouts": self.layouts,
            "state": self.state.value,
            "updated_ms": self.updated_ms,
            "has_txn_index": self.has_txn_index,
        }

    @classmethod
    def from_json(cls, raw: object) -> RemoteSegment:
        if not isinstance(raw, dict):
            raise ManifestFormatError(f"segment entry is not an object: {raw!r}")
        ints = ("base_offset", "end_offset", "size_bytes", "base_timestamp_ms",
                "max_timestamp_ms", "layouts", "updated_ms")  # fmt: skip
        values: dict[str, Any] = {}
        for name in ints:
            value = raw.get(name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise ManifestFormatError(f"segment field {name!r} is not an integer: {value!r}")
            values[name] = value
        segment_id = raw.get("segment_id")
        if not isinstance(segment_id, str) or not segment_id:
            raise ManifestFormatError(f"segment_id is not a string: {segment_id!r}")
        try:
            state = SegmentState(str(raw.get("state")))
        except ValueError as exc:
            raise ManifestFormatError(f"unknown segment state {raw.get('state')!r}") from exc
        has_txn_index = raw.get("has_txn_index", True)
        if not isinstance(has_txn_index, bool):
            raise ManifestFormatError(f"has_txn_index is not a boolean: {has_txn_index!r}")
        segment = cls(segment_id=segment_id, state=state, has_txn_index=has_txn_index, **values)
        if segment.end_offset < segment.base_offset or segment.base_offset < 0:
            raise ManifestFormatError(
                f"segment {segment_id}: offsets [{segment.base_offset}, {segment.end_offset}]"
            )
        if segment.size_bytes < 0:
            raise ManifestFormatError(f"segment {segment_id}: size_bytes {segment.size_bytes}")
        return segment


@dataclass(frozen=True, slots=True)
class Manifest:
    """A partition's remote segments (see the module docstring for the invariants)."""

    topic: str
    partition: int
    log_start_offset: int = 0
    segments: tuple[RemoteSegment, ...] = ()

    def __post_init__(self) -> None:
        ids = [s.segment_id for s in self.segments]
        if len(set(ids)) != len(ids):
            raise ManifestFormatError(f"{self.topic}-{self.partition}: duplicate segment ids")
        previous: RemoteSegment | None = None
        for segment in self.readable():
            if previous is not None and segment.base_offset <= previous.end_offset:
                raise ManifestFormatError(
                    f"{self.topic}-{self.partition}: readable segments overlap: "
                    f"{previous.segment_id} [{previous.base_offset}, {previous.end_offset}] and "
                    f"{segment.segment_id} [{segment.base_offset}, {segment.end_offset}]"
                )
            previous = segment

    # ---- queries ---------------------------------------------------------------

    def get(self, segment_id: str) -> RemoteSegment | None:
        for segment in self.segments:
            if segment.segment_id == segment_id:
                return segment
        return None

    def readable(self) -> tuple[RemoteSegment, ...]:
        """COPY_SEGMENT_FINISHED segments by base offset: what readers may serve."""
        return tuple(sorted((s for s in self.segments if s.readable), key=lambda s: s.base_offset))

    def in_state(self, state: SegmentState) -> tuple[RemoteSegment, ...]:
        return tuple(s for s in self.segments if s.state is state)

    def live(self) -> tuple[RemoteSegment, ...]:
        """Entries whose objects may exist (every state but DELETE_SEGMENT_FINISHED)."""
        return tuple(
            s for s in self.segments if s.state is not SegmentState.DELETE_SEGMENT_FINISHED
        )

    @property
    def remote_end_offset(self) -> int:
        """One past the last readable offset, or -1 when nothing is readable
        (Kafka's highest remote offset + 1)."""
        readable = self.readable()
        return readable[-1].next_offset if readable else -1

    def covers(self, base_offset: int, next_offset: int) -> bool:
        """Whether readable segments hold every offset in [base_offset, next_offset)."""
        position = base_offset
        for segment in self.readable():
            if segment.next_offset <= position:
                continue
            if segment.base_offset > position:
                return False
            position = segment.next_offset
            if position >= next_offset:
                return True
        return position >= next_offset

    # ---- changes (each returns a new manifest) ------------------------------------

    def with_segment(self, segment: RemoteSegment) -> Manifest:
        """Add a new entry; it must be COPY_SEGMENT_STARTED and its id new."""
        if segment.state is not SegmentState.COPY_SEGMENT_STARTED:
            raise ValueError(f"a new entry starts as COPY_SEGMENT_STARTED, not {segment.state}")
        if self.get(segment.segment_id) is not None:
            raise ValueError(f"segment id {segment.segment_id} is already in the manifest")
        return self._with_segments((*self.segments, segment))

    def with_state(self, segment_id: str, state: SegmentState, now_ms: int) -> Manifest:
        """Move one entry to `state` (a KIP-405 transition, else ValueError)."""
        current = self.get(segment_id)
        if current is None:
            raise ValueError(f"{self.topic}-{self.partition}: no segment {segment_id}")
        if not valid_transition(current.state, state):
            raise ValueError(
                f"{self.topic}-{self.partition} segment {segment_id}: "
                f"{current.state} -> {state} is not a valid transition"
            )
        updated = replace(current, state=state, updated_ms=now_ms)
        return self._with_segments(tuple(updated if s is current else s for s in self.segments))

    def with_log_start_offset(self, offset: int) -> Manifest:
        """Raise the log start offset (it never moves back)."""
        return replace(self, log_start_offset=max(self.log_start_offset, offset))

    def _with_segments(self, segments: tuple[RemoteSegment, ...]) -> Manifest:
        ordered = sorted(segments, key=lambda s: (s.base_offset, s.updated_ms, s.segment_id))
        finished = [s for s in ordered if s.state is SegmentState.DELETE_SEGMENT_FINISHED]
        if len(finished) > FINISHED_DELETIONS_KEPT:
            newest = sorted(finished, key=lambda s: s.updated_ms)[-FINISHED_DELETIONS_KEPT:]
            dropped = {s.segment_id for s in finished} - {s.segment_id for s in newest}
            ordered = [s for s in ordered if s.segment_id not in dropped]
        return replace(self, segments=tuple(ordered))

    # ---- encoding ----------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        return {
            "version": MANIFEST_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "log_start_offset": self.log_start_offset,
            "segments": [s.to_json() for s in self.segments],
        }

    def encode(self) -> bytes:
        return (json.dumps(self.to_json(), indent=1, sort_keys=False) + "\n").encode()

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        try:
            raw = json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ManifestFormatError(f"not JSON: {exc}") from exc
        if not isinstance(raw, dict):
            raise ManifestFormatError("manifest is not a JSON object")
        if raw.get("version") != MANIFEST_VERSION:
            raise ManifestFormatError(f"unsupported manifest version {raw.get('version')!r}")
        topic, partition = raw.get("topic"), raw.get("partition")
        start, segments = raw.get("log_start_offset"), raw.get("segments")
        if not isinstance(topic, str) or not topic:
            raise ManifestFormatError(f"topic is not a string: {topic!r}")
        for name, value in (("partition", partition), ("log_start_offset", start)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ManifestFormatError(f"{name} is not a non-negative integer: {value!r}")
        if not isinstance(segments, list):
            raise ManifestFormatError("segments is not a list")
        parsed = tuple(RemoteSegment.from_json(entry) for entry in segments)
        assert isinstance(partition, int) and isinstance(start, int)
        manifest = cls(topic=topic, partition=partition, log_start_offset=start)
        return manifest._with_segments(parsed)


def manifest_path(partition_dir: Path) -> Path:
    return partition_dir / REMOTE_MANIFEST_FILE


def read_manifest(io: FileIO, partition_dir: Path) -> Manifest | None:
    """The partition's manifest, or None if it has never uploaded anything.

    A manifest that exists but cannot be decoded raises ManifestFormatError: it is the
    only record of which remote segments are readable, so it is never silently reset."""
    try:
        data = io.read_file(manifest_path(partition_dir))
    except FileNotFoundError:
        return None
    try:
        return Manifest.decode(data)
    except ManifestFormatError as exc:
        raise ManifestFormatError(f"{manifest_path(partition_dir)}: {exc}") from exc


def write_manifest(io: FileIO, partition_dir: Path, manifest: Manifest) -> bytes:
    """Replace the local manifest atomically and durably; returns the bytes written
    (the caller PUTs the same bytes to the bucket). Failpoints `remote_manifest.*`."""
    data = manifest.encode()
    io.write_atomic(manifest_path(partition_dir), data, failpoint="remote_manifest")
    return data
