"""One partition's producer state and the `<offset>.snapshot` files that keep it.

Kafka's ProducerStateManager: the state itself (storage.producer_state) and the
ordering of its snapshot files around rolls, flushes and deletions. A roll only
keeps the state it would snapshot (`snapshot_at_roll`): creating a file is a roll's
dearest step (~0.2 ms, a third of it), so the file is written off the append path
(`write_pending`: the broker's `producer-snapshots` task, a flush, a deletion) and
only the newest roll's, since an older one only shortens a rebuild the newer one
shortens more. That file is written without its fsyncs (Kafka's `takeSnapshot(sync =
false)`); the next flush makes it durable (`take_unsynced`), and so does a deletion of
segments (`sync_before_deletion`), which must not leave only snapshots that describe
deleted batches. A power cut before that costs a longer rebuild scan, never state.

Snapshot failures are logged, never raised: the state is still in memory, and a
restart rebuilds it from an older snapshot and the log, only with a longer scan.

Thread safety: none of its own; the owning `storage.log.Log` calls it under its lock
(`sync_file` may run outside it: it touches one file).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import structlog

from storage.config import LogConfig
from storage.fileio import FileIO
from storage.producer_log import rebuild_producer_state
from storage.producer_snapshot import delete_snapshots_below, snapshot_path, write_snapshot
from storage.producer_state import ProducerEntry, ProducerState
from storage.segment import Segment

log = structlog.get_logger("tidelog.storage")


class ProducerStateManager:
    """The producer state of one partition directory, with its snapshot files."""

    def __init__(
        self, directory: Path, io: FileIO, state: ProducerState, *, topic: str, partition: int
    ) -> None:
        self.directory = directory
        self.state = state
        self._io = io
        self._log = log.bind(topic=topic, partition=partition)
        # The state at the newest roll, not yet written (see the module doc).
        self._pending: tuple[int, dict[int, ProducerEntry]] | None = None
        # The newest snapshot written without its fsyncs, for the next flush.
        self._unsynced: Path | None = None

    @property
    def has_unsynced(self) -> bool:
        """A snapshot file waits for its fsyncs (the directory's entry among them)."""
        return self._unsynced is not None

    @property
    def has_pending(self) -> bool:
        return self._pending is not None

    def batch_ends(self) -> frozenset[int]:
        """The last offset of each known producer's newest batch."""
        return frozenset(e.last_offset for e in self.state.entries().values())

    def marker_epochs(self) -> dict[int, int]:
        """Producer id -> epoch of each producer whose newest entry in the log is a
        marker (its epoch bump forgot its batches): that marker alone carries the epoch."""
        return {pid: e.epoch for pid, e in self.state.entries().items() if not e.batches}

    def remove_expired(self, now_ms: int, expiration_ms: int) -> int:
        """Forget producers idle for `expiration_ms`; returns how many."""
        self.state.expiration_ms = expiration_ms
        removed = self.state.remove_expired(now_ms)
        if removed:
            self._log.info("producers_expired", count=removed)
        return removed

    def segments_deleted(self, log_start_offset: int, first_base: int) -> None:
        """Segments below `first_base` went and the log start rose: drop what the state
        knows of batches below it, make the newest snapshot durable and delete the
        snapshots of the deleted segments."""
        self.state.truncate_head(log_start_offset)
        self.sync_before_deletion()
        self.delete_below(first_base)

    def snapshot_at_roll(self) -> None:
        """Keep the state as it is at a roll; its file waits for `write_pending`."""
        self._pending = (self.state.map_end_offset, self.state.entries())

    def write_pending(self) -> bool:
        """Write the newest roll's snapshot if it waits (no fsync); whether one did."""
        pending, self._pending = self._pending, None
        if pending is None:
            return False
        self._write("roll", *pending, sync=False)
        return True

    def snapshot_now(self, when: str) -> None:
        """`<map end>.snapshot` with its fsyncs (a clean close)."""
        self._write(when, self.state.map_end_offset, self.state.entries(), sync=True)

    def _write(
        self, when: str, offset: int, entries: dict[int, ProducerEntry], *, sync: bool
    ) -> None:
        try:
            path = write_snapshot(self._io, self.directory, offset, entries, sync=sync)
        except OSError as exc:
            self._log.warning("producer_snapshot_failed", when=when, offset=offset, errno=exc.errno)
            return
        if not sync:
            self._unsynced = path

    def take_unsynced(self) -> Path | None:
        """The snapshot a flush is to fsync (with the directory), handed over once."""
        path, self._unsynced = self._unsynced, None
        return path

    def sync_file(self, path: Path | None) -> None:
        """fsync a snapshot written at a roll (its directory entry: the caller's
        directory fsync). A failure is logged: a torn snapshot costs a longer scan."""
        if path is None:
            return
        try:
            self._io.fsync_file(path)
        except FileNotFoundError:
            pass  # deleted since (retention, a newer snapshot at the same offset)
        except OSError as exc:
            self._log.warning("producer_snapshot_fsync_failed", path=str(path), errno=exc.errno)

    def sync_before_deletion(self) -> None:
        """Before segments go: the newest snapshot must survive a power cut, for the
        older ones are deleted with the segments and a restart would otherwise forget
        producers whose batches lived only there."""
        self.write_pending()
        snapshot = self.take_unsynced()
        if snapshot is None:
            return
        self.sync_file(snapshot)
        try:
            self._io.fsync_dir(self.directory)
        except OSError as exc:
            self._unsynced = self._unsynced or snapshot
            self._log.warning(
                "producer_snapshot_fsync_failed", path=str(self.directory), errno=exc.errno
            )

    def delete_below(self, offset: int) -> None:
        """The snapshots of deleted segments go with them (Kafka's
        deleteProducerSnapshots); a failure leaves strays the next open removes."""
        try:
            delete_snapshots_below(self._io, self.directory, offset)
        except OSError as exc:
            self._log.warning("producer_snapshot_delete_failed", offset=offset, errno=exc.errno)

    def delete_merged(self, bases: set[int]) -> None:
        """Kafka's deleteProducerSnapshots for segments the cleaner merged away: their
        snapshots match no segment any more (an open removes such strays too), and a
        compacted topic rolling often would otherwise gather one file per roll."""
        for base in sorted(bases):
            try:
                self._io.unlink(snapshot_path(self.directory, base))
            except FileNotFoundError:
                pass  # none was written at that roll (or a restart removed it)
            except OSError as exc:  # a stray the next open removes
                self._log.warning("producer_snapshot_delete_failed", offset=base, errno=exc.errno)

    def rebuild_after_truncation(
        self,
        segments: Sequence[Segment],
        config: LogConfig,
        *,
        log_start_offset: int,
        log_end_offset: int,
        now_ms: int,
    ) -> None:
        """The log was cut back to `log_end_offset`: rebuild the state from the newest
        snapshot at or below it and the batches after (a pending roll's state past the
        end is dropped, the others written first so the rebuild starts from them)."""
        if self._pending is not None and self._pending[0] > log_end_offset:
            self._pending = None  # a state the truncation took back
        self.write_pending()
        self.state = rebuild_producer_state(
            self._io,
            self.directory,
            segments,
            config,
            name=self.state.name,
            log_start_offset=log_start_offset,
            now_ms=now_ms,
        )
