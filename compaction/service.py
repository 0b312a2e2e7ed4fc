"""The log cleaner as the broker runs it: N cleaner workers over one CleanerManager.

Synchronous on purpose (compaction never imports trio): the broker's scheduler runs
`run_worker(i)` for each worker in a thread (`trio.to_thread`), every
`log.cleaner.backoff.ms`. A run cleans logs one after another while some log is
eligible and returns when none is (Kafka's CleanerThread loop: clean, and back off
only when nothing was cleaned). All workers share one I/O throttler, so
`log.cleaner.io.max.bytes.per.second` limits the whole cleaner.

Shutdown: `request_stop()` (thread-safe) makes every worker abandon its cleaning at
the next batch chunk, removing its `.cleaned` files; the log is left as it was before
the group in progress. The broker calls it before waiting for the threads.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path

from compaction.cleaner import Cleaner, CleaningResult
from compaction.config import CleanerConfig
from compaction.manager import CleanerManager, CleanerStatistics
from compaction.ports import CleanableLog
from compaction.throttle import Throttler
from storage import FileIO

__all__ = ["MAX_CLEANINGS_PER_RUN", "CleanerService"]

# Cleanings one run may do before yielding its thread back: bounds how long a run
# keeps a worker thread (and delays shutdown) when many logs are dirty.
MAX_CLEANINGS_PER_RUN = 100


class CleanerService:
    """Owns the cleaner workers, their shared throttle and the manager. Thread-safe."""

    def __init__(
        self,
        config: CleanerConfig,
        data_dir: Path,
        logs: Callable[[], Iterable[CleanableLog]],
        *,
        io: FileIO | None = None,
        clock_ms: Callable[[], int],
    ) -> None:
        self.config = config
        io = io or FileIO()
        self.throttler = Throttler(config.io_max_bytes_per_second)
        self.manager = CleanerManager(
            data_dir, logs, io=io, clock_ms=clock_ms, backoff_ms=config.backoff_ms
        )
        self._stop = threading.Event()
        self.workers = [
            Cleaner(config, self.throttler, stop=self._stop)
            for _ in range(config.threads if config.enable else 0)
        ]

    @property
    def backoff_s(self) -> float:
        return self.config.backoff_ms / 1000.0

    def run_worker(self, index: int) -> list[CleaningResult]:
        """Clean eligible logs with worker `index` until none is left (blocking)."""
        done: list[CleaningResult] = []
        while not self._stop.is_set() and len(done) < MAX_CLEANINGS_PER_RUN:
            result = self.manager.clean_one(self.workers[index])
            if result is None:
                break
            done.append(result)
        return done

    def request_stop(self) -> None:
        """Make running cleanings stop at their next chunk (shutdown)."""
        self._stop.set()

    def statistics(self) -> CleanerStatistics:
        return self.manager.statistics()
