"""The readers' view of a partition's manifest: its readable segments, kept current.

The uploader and remote retention replace `remote-manifest.json` atomically after
every change (storage.remote.manifest). A reader asks for the readable segments
(COPY_SEGMENT_FINISHED, by base offset) on every fetch of the partition, so this view
re-reads the file only when its identity changed (inode, size, mtime: one `stat`),
and otherwise answers from memory. A manifest that cannot be decoded keeps the last
good view (and is logged once per change): readers go on serving what they served.

Thread safety: any thread; a refresh swaps one tuple (a reader sees the old or the
new list, both valid).
"""

from __future__ import annotations

import os
from pathlib import Path

import structlog

from storage.fileio import FileIO
from storage.files import OFFSET_DIGITS
from storage.remote.keys import partition_prefix
from storage.remote.manifest import Manifest, ManifestFormatError, manifest_path
from storage.remote.remote_segment import RemoteSegmentRef

__all__ = ["ManifestView", "refs_of"]

log = structlog.get_logger("tidelog.storage.remote")


def refs_of(manifest: Manifest, prefix: str) -> tuple[RemoteSegmentRef, ...]:
    """The readable segments of `manifest` as the reader addresses them."""
    directory = partition_prefix(prefix, manifest.topic, manifest.partition)
    return tuple(
        RemoteSegmentRef(
            f"{directory}{s.base_offset:0{OFFSET_DIGITS}d}-{s.segment_id}",
            s.base_offset,
            s.end_offset,
            s.size_bytes,
            s.base_timestamp_ms,
            s.max_timestamp_ms,
            s.layouts,
            s.has_txn_index,
        )
        for s in manifest.readable()
    )


class ManifestView:
    """The readable segments of the manifest file in one partition directory."""

    def __init__(self, io: FileIO, partition_dir: Path, prefix: str) -> None:
        self._io = io
        self._path = manifest_path(partition_dir)
        self._prefix = prefix
        self._stamp: tuple[int, int, int] | None = None
        self._refs: tuple[RemoteSegmentRef, ...] = ()

    def __call__(self) -> tuple[RemoteSegmentRef, ...]:
        try:
            stat = os.stat(self._path)
        except OSError:  # none yet (nothing uploaded), or the directory is going away
            return self._refs
        stamp = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if stamp != self._stamp:
            self._stamp = stamp
            try:
                manifest = Manifest.decode(self._io.read_file(self._path))
            except (OSError, ManifestFormatError) as exc:
                log.error("remote_manifest_unreadable", path=str(self._path), error=str(exc))
                return self._refs
            self._refs = refs_of(manifest, self._prefix)
        return self._refs
