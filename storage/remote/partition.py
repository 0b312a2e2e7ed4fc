"""One tiered partition's remote tier: its manifest, its uploads, its deletions.

`RemotePartition` owns the partition's manifest (storage.remote.manifest) and is the
only writer of it and of the partition's objects. Every method blocks (file reads,
store calls): the broker runs them in worker threads. One operation at a time per
partition (`_lock`); different partitions proceed in parallel.

Upload of one segment (KIP-405's copy), each step durable before the next:

1. `log.flush(up_to=segment end)`: the segment and its indexes are fsynced, so the
   store never holds records the local disk could lose to a power cut;
2. manifest + COPY_SEGMENT_STARTED (fresh segment id), written atomically;
3. PUT `.log`, `.index`, `.timeindex`, `.snapshot` (the producer snapshot at the
   segment's end, when the log has one), `.txnindex` (when present), then HEAD the
   `.log` to check its size;
4. manifest + COPY_SEGMENT_FINISHED. Only now may local retention delete the local copy.

Deletion of one remote segment: DELETE_SEGMENT_STARTED, delete every object of its id,
DELETE_SEGMENT_FINISHED. Total retention raises the log start offset (in the log and
in the manifest) before it marks anything, so no offset at or above the log start is
ever in neither tier.

After a crash (`open`): the manifest is the truth. COPY_SEGMENT_STARTED entries are
orphans (their upload may have put some objects): they go through deletion, and their
segment, still local, is uploaded again under a new id. DELETE_SEGMENT_STARTED entries
are deleted again (deletes are idempotent). Objects under the partition's prefix that
no entry names (a manifest lost with its disk) are deleted. The log start offset is
restored from the manifest when readable remote segments cover the range below the
first local segment.

After every manifest change the same bytes are PUT to `<partition>/manifest.json`; a
failed PUT is retried at the next change or `sync_remote_manifest`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from storage import failpoints
from storage.fileio import FileIO
from storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX, offset_prefix
from storage.log import Log
from storage.producer_snapshot import snapshot_path
from storage.remote.errors import RemoteErrorKind, RemoteStorageError
from storage.remote.keys import (
    SEGMENT_OBJECT_SUFFIXES,
    TXN_INDEX_SUFFIX,
    manifest_key,
    new_segment_id,
    parse_segment_key,
    partition_prefix,
    segment_keys,
)
from storage.remote.manifest import (
    Manifest,
    RemoteSegment,
    SegmentState,
    read_manifest,
    write_manifest,
)
from storage.remote.object_store import BlockingObjectStore, ProgressFn
from storage.segment import SegmentInfo

__all__ = ["OpenReport", "RemotePartition", "UploadCandidate"]

log = structlog.get_logger("tidelog.remote")

# Failpoints of the upload and deletion steps (crash tests sweep them; tests/tiered).
COPY_POINTS = (
    "remote.copy.after_started",
    "remote.copy.after_log_put",
    "remote.copy.before_finished",
    "remote.copy.after_finished",
)
DELETE_POINTS = (
    "remote.delete.after_started",
    "remote.delete.after_objects",
    "remote.delete.after_finished",
)


@dataclass(frozen=True, slots=True)
class UploadCandidate:
    """A rolled local segment the store does not hold yet."""

    base_offset: int
    next_offset: int
    size_bytes: int
    largest_timestamp_ms: int


@dataclass(frozen=True, slots=True)
class OpenReport:
    """What `open` found and repaired."""

    orphans_swept: int
    deletions_resumed: int
    stray_objects_deleted: int
    log_start_restored: int | None


def upload_bound(plog: Log) -> int:
    """Offsets below this may be uploaded: the high watermark and the last stable
    offset (an open transaction's records may still be aborted and must not reach the
    store's history before they are decided)."""
    return min(plog.high_watermark, plog.last_stable_offset)


class RemotePartition:
    """See the module docstring. Thread-safe (one operation at a time)."""

    def __init__(
        self,
        plog: Log,
        store: BlockingObjectStore,
        *,
        io: FileIO,
        clock_ms: Callable[[], int],
    ) -> None:
        self.log = plog
        self.store = store
        self.io = io
        self.clock_ms = clock_ms
        self.prefix = store.settings.prefix
        self.topic, self.partition = plog.topic, plog.partition
        self._lock = threading.Lock()
        self._manifest = Manifest(plog.topic, plog.partition)
        self._remote_copy_stale = False
        self._loaded = False
        self._log = log.bind(topic=plog.topic, partition=plog.partition)

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def directory(self) -> Path:
        return self.log.directory

    # ---- manifest --------------------------------------------------------------

    def _save(self, manifest: Manifest) -> None:
        """Write the manifest durably (the truth), then its copy in the bucket."""
        write_manifest(self.io, self.directory, manifest)
        self._manifest = manifest
        self._remote_copy_stale = True
        self._put_remote_copy()

    def _put_remote_copy(self) -> None:
        try:
            key = manifest_key(self.prefix, self.topic, self.partition)
            self.store.put_bytes(key, self._manifest.encode(), "application/json")
            self._remote_copy_stale = False
        except RemoteStorageError as exc:
            self._log.warning("remote_manifest_put_failed", error=str(exc))

    def sync_remote_manifest(self) -> None:
        """PUT the bucket's copy of the manifest again if the last PUT failed."""
        with self._lock:
            if self._remote_copy_stale:
                self._put_remote_copy()

    # ---- open: restart from the manifest -----------------------------------------

    def load(self, checkpoint_start: int | None = None) -> int | None:
        """Read the local manifest and restore the log start offset from it (no store
        call: the broker does this before it serves, even with the store down).
        `checkpoint_start`: the log-start-offset checkpoint's value for the partition
        (recovery clamps the log start to the first local segment; the higher of the
        manifest's and the checkpoint's is the true one, so a delete-records the
        manifest had not recorded yet is kept). Returns the restored log start, if
        any. ManifestFormatError propagates."""
        with self._lock:
            if self._loaded:
                return None
            loaded = read_manifest(self.io, self.directory)
            if loaded is not None:
                if (loaded.topic, loaded.partition) != (self.topic, self.partition):
                    raise RemoteStorageError(
                        f"{self.directory}: manifest is for {loaded.topic}-{loaded.partition}",
                        RemoteErrorKind.CLIENT_ERROR,
                    )
                self._manifest = loaded
            self._loaded = True
            return self._restore_log_start(checkpoint_start)

    def open(self) -> OpenReport:
        """`load`, then resume deletions, sweep orphans and stray objects. Store
        errors propagate (the caller retries)."""
        restored = self.load()
        with self._lock:
            orphans = self._manifest.in_state(SegmentState.COPY_SEGMENT_STARTED)
            resumed = self._manifest.in_state(SegmentState.DELETE_SEGMENT_STARTED)
            self._delete_locked([*orphans, *resumed], "orphan_sweep")
            strays = self._delete_strays()
            if self._manifest.segments:
                self._put_remote_copy()
        report = OpenReport(len(orphans), len(resumed), strays, restored)
        self._log.info(
            "remote_partition_opened",
            readable_segments=len(self._manifest.readable()),
            remote_end_offset=self._manifest.remote_end_offset,
            orphans_swept=report.orphans_swept,
            deletions_resumed=report.deletions_resumed,
            stray_objects_deleted=strays,
            log_start_restored=restored,
        )
        return report

    def _restore_log_start(self, checkpoint_start: int | None) -> int | None:
        manifest, plog = self._manifest, self.log
        target = max(manifest.log_start_offset, checkpoint_start or 0)
        local_start = plog.local_log_start_offset
        if target < plog.log_start_offset and manifest.covers(target, local_start):
            plog.restore_log_start_offset(target)
            return target
        if not manifest.readable() or plog.log_start_offset <= manifest.log_start_offset:
            return None
        # The log start is above the manifest's (a delete_records the manifest missed).
        self._save(manifest.with_log_start_offset(plog.log_start_offset))
        return None

    def _delete_strays(self) -> int:
        """Delete objects under the partition's prefix that no live entry names."""
        named = {s.segment_id for s in self._manifest.live()}
        listing = self.store.list(partition_prefix(self.prefix, self.topic, self.partition))
        strays = []
        for obj in listing:
            parsed = parse_segment_key(obj.key)
            if parsed is not None and parsed.segment_id not in named:
                strays.append(obj.key)
        if strays:
            self.store.delete(strays)
            self._log.warning("remote_stray_objects_deleted", objects=len(strays))
        return len(strays)

    # ---- upload ----------------------------------------------------------------

    def next_candidate(self) -> UploadCandidate | None:
        """The oldest rolled segment, wholly below the upload bound, above what the
        store holds; None when there is none."""
        remote_end = self._manifest.remote_end_offset
        bound = upload_bound(self.log)
        start = self.log.log_start_offset
        for info in self.log.segments_info():
            if info.is_active or info.next_offset > bound:
                return None
            if info.next_offset <= max(remote_end, start) or info.size_bytes == 0:
                continue
            if remote_end > info.base_offset:
                # Overlaps the remote range without matching it: never upload an
                # offset twice (readable segments must not overlap).
                self._log.error(
                    "remote_upload_misaligned",
                    base_offset=info.base_offset,
                    remote_end_offset=remote_end,
                )
                return None
            return UploadCandidate(
                info.base_offset, info.next_offset, info.size_bytes, info.largest_timestamp_ms
            )
        return None

    def uploaded_end(self, segments: Sequence[SegmentInfo]) -> int:
        """Where the local segments the store holds end: local retention may delete
        local copies below it (the first local base when it holds none of them)."""
        end = segments[0].base_offset if segments else 0
        for info in segments:
            if info.is_active or not self._manifest.covers(info.base_offset, info.next_offset):
                break
            end = info.next_offset
        return end

    def pending(self) -> list[SegmentInfo]:
        """Rolled local segments not yet in the store (what the upload lag counts)."""
        remote_end = self._manifest.remote_end_offset
        start = self.log.log_start_offset
        return [
            info
            for info in self.log.segments_info()
            if not info.is_active and info.next_offset > max(remote_end, start)
        ]

    def _segment_files(self, candidate: UploadCandidate) -> dict[str, Path]:
        stem = offset_prefix(candidate.base_offset)
        files = {
            LOG_SUFFIX: self.directory / f"{stem}{LOG_SUFFIX}",
            INDEX_SUFFIX: self.directory / f"{stem}{INDEX_SUFFIX}",
            TIME_INDEX_SUFFIX: self.directory / f"{stem}{TIME_INDEX_SUFFIX}",
        }
        snapshot = snapshot_path(self.directory, candidate.next_offset)
        if snapshot.exists():
            files[".snapshot"] = snapshot
        txn_index = self.directory / f"{stem}{TXN_INDEX_SUFFIX}"
        if txn_index.exists():
            files[TXN_INDEX_SUFFIX] = txn_index
        return files

    def upload(
        self, candidate: UploadCandidate, on_progress: ProgressFn | None = None
    ) -> RemoteSegment:
        """Copy one segment (the module docstring's four steps); returns its entry.

        A failure after step 2 leaves a COPY_SEGMENT_STARTED entry that is swept
        (objects deleted, entry DELETE_SEGMENT_FINISHED) before this returns the
        error, when the store lets us; else at the next `open`."""
        with self._lock:
            self.log.flush(up_to=candidate.next_offset)
            files = self._segment_files(candidate)
            entry = RemoteSegment(
                segment_id=new_segment_id(),
                base_offset=candidate.base_offset,
                end_offset=candidate.next_offset - 1,
                size_bytes=candidate.size_bytes,
                base_timestamp_ms=self.log.segment_files.first_batch_timestamp_ms(
                    candidate.base_offset
                ),
                max_timestamp_ms=candidate.largest_timestamp_ms,
                layouts=self.log.segment_files.layouts(candidate.base_offset),
                state=SegmentState.COPY_SEGMENT_STARTED,
                updated_ms=self.clock_ms(),
                has_txn_index=TXN_INDEX_SUFFIX in files,
            )
            self._save(self._manifest.with_segment(entry))
            failpoints.hit("remote.copy.after_started")
            try:
                self._put_objects(entry, files, on_progress)
            except BaseException:
                self._abandon(entry)
                raise
            failpoints.hit("remote.copy.before_finished")
            finished = SegmentState.COPY_SEGMENT_FINISHED
            self._save(self._manifest.with_state(entry.segment_id, finished, self.clock_ms()))
            failpoints.hit("remote.copy.after_finished")
        self._log.info(
            "remote_segment_uploaded",
            segment_id=entry.segment_id,
            base_offset=entry.base_offset,
            end_offset=entry.end_offset,
            bytes=entry.size_bytes,
            objects=len(files),
        )
        found = self._manifest.get(entry.segment_id)
        assert found is not None
        return found

    def _put_objects(
        self, entry: RemoteSegment, files: dict[str, Path], on_progress: ProgressFn | None
    ) -> None:
        keys = segment_keys(
            self.prefix, self.topic, self.partition, entry.base_offset, entry.segment_id
        )
        for suffix, path in files.items():
            self.store.put_file(keys[suffix], path, on_progress)
            if suffix == LOG_SUFFIX:
                failpoints.hit("remote.copy.after_log_put")
        head = self.store.head(keys[LOG_SUFFIX])
        if head is None or head.size_bytes != entry.size_bytes:
            raise RemoteStorageError(
                f"{keys[LOG_SUFFIX]}: the store holds "
                f"{'nothing' if head is None else head.size_bytes} bytes after the upload "
                f"of {entry.size_bytes}",
                RemoteErrorKind.CORRUPT,
                key=keys[LOG_SUFFIX],
            )

    def _abandon(self, entry: RemoteSegment) -> None:
        """A failed upload: sweep its entry now if the store allows (else at open)."""
        try:
            self._delete_locked([entry], "upload_failed")
        except (RemoteStorageError, OSError) as exc:
            self._log.warning(
                "remote_upload_sweep_deferred", segment_id=entry.segment_id, error=str(exc)
            )

    # ---- deletion --------------------------------------------------------------

    def delete_segments(
        self, segments: Sequence[RemoteSegment], reason: str, *, log_start_offset: int | None = None
    ) -> list[RemoteSegment]:
        """Delete remote segments; with `log_start_offset`, first raise the log start
        (log and manifest) to it. Returns the entries deleted."""
        with self._lock:
            if log_start_offset is not None:
                start = self.log.raise_log_start_offset(log_start_offset, f"remote_{reason}")
                if start > self._manifest.log_start_offset:
                    self._save(self._manifest.with_log_start_offset(start))
            wanted = {s.segment_id for s in segments}
            live = [s for s in self._manifest.live() if s.segment_id in wanted]
            self._delete_locked(live, reason)
            return live

    def record_log_start(self) -> None:
        """Bring the manifest's log start up to the log's (after delete_records)."""
        with self._lock:
            start = self.log.log_start_offset
            if start > self._manifest.log_start_offset and self._manifest.segments:
                self._save(self._manifest.with_log_start_offset(start))

    def _delete_locked(self, segments: Sequence[RemoteSegment], reason: str) -> None:
        for segment in segments:
            current = self._manifest.get(segment.segment_id)
            if current is None or current.state is SegmentState.DELETE_SEGMENT_FINISHED:
                continue
            if current.state is not SegmentState.DELETE_SEGMENT_STARTED:
                started = SegmentState.DELETE_SEGMENT_STARTED
                self._save(self._manifest.with_state(current.segment_id, started, self.clock_ms()))
                failpoints.hit("remote.delete.after_started")
            keys = segment_keys(
                self.prefix, self.topic, self.partition, current.base_offset, current.segment_id,
                SEGMENT_OBJECT_SUFFIXES,
            )  # fmt: skip
            self.store.delete(keys.values())
            failpoints.hit("remote.delete.after_objects")
            finished = SegmentState.DELETE_SEGMENT_FINISHED
            self._save(self._manifest.with_state(current.segment_id, finished, self.clock_ms()))
            failpoints.hit("remote.delete.after_finished")
            self._log.info(
                "remote_segment_deleted",
                reason=reason,
                segment_id=current.segment_id,
                base_offset=current.base_offset,
                end_offset=current.end_offset,
                was=current.state.value,
            )

    # ---- local retention -------------------------------------------------------

    def delete_local_copies(self, count: int, reason: str) -> list[SegmentInfo]:
        """Delete the oldest `count` local segments, checked again under the lock: each
        must be wholly inside readable remote segments (COPY_SEGMENT_FINISHED, durable)."""
        with self._lock:
            infos = self.log.segments_info()[:count]
            start = self.log.log_start_offset
            allowed = 0
            for info in infos:
                gone = info.next_offset <= start  # below the log start: deleted anyway
                held = self._manifest.covers(info.base_offset, info.next_offset)
                if info.is_active or not (gone or held):
                    break
                allowed += 1
            return self.log.delete_local_segments(allowed, reason)
