"""The file-descriptor budget storage works within (issue 23, finding 1).

Every segment holds descriptors for as long as it is open: its `.log` file, and
one for each memory-mapped, non-empty index (CPython's `mmap` keeps a duplicate
of the descriptor it maps, up to Python 3.13's `trackfd=False`); the active
segment also keeps one per index for appending entries. A request that opens
more than the process may hold used to fail half way with EMFILE and leave the
broker unable to start. So storage:

- raises the soft RLIMIT_NOFILE to the hard limit when a data directory opens
  (`raise_nofile_limit`);
- admits a new topic only if its partitions fit the budget, refusing it up front
  otherwise (`FdBudget.allows`);
- defers a segment roll that would not fit (the append goes to the active
  segment, which takes it as long as its positions still fit an int32);
- at start, leaves unloaded a topic whose segments would not fit, instead of
  failing the start.

The budget is the soft limit minus `FD_RESERVE` for everything else the broker
holds (connections, sendfile spans, worker threads). What is open is measured
(`/proc/self/fd`), not estimated, so descriptors anyone holds count. Each index
map is also a memory map, so the limit is capped by `vm.max_map_count` too (the
unit's LimitNOFILE of 1048576 is far above its usual 65530): past it, `mmap`
fails with ENOMEM instead of EMFILE, just as much for good.

Thread safety: `allows` may be called from any thread.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path

from storage.files import INDEX_SUFFIX, LOG_SUFFIX, TIME_INDEX_SUFFIX

# The active segment: its `.log`, two index maps and two index writers (see above).
FDS_PER_ACTIVE_SEGMENT = 5
# Descriptors kept free for everything but segments and connections: sendfile
# spans (MAX_OPEN_SPANS, 256), worker threads' pipes, checkpoints, slack.
FD_RESERVE_BESIDES_CONNECTIONS = 1048
# The reserve with max.connections at its default (1000); the broker passes its own.
FD_RESERVE = 1000 + FD_RESERVE_BESIDES_CONNECTIONS


def fd_reserve_for(max_connections: int) -> int:
    """Descriptors storage leaves free when the broker accepts `max_connections`."""
    return max_connections + FD_RESERVE_BESIDES_CONNECTIONS


# A measured count is reused this long (plus what was admitted since): a roll on
# every append must not list /proc/self/fd on every append.
FD_COUNT_CACHE_S = 0.1
# ... and this long while at least half the budget was free at the last count. The
# listing costs ~0.45 µs per open descriptor (1.5 ms at 3,400: a log of ~1,100
# segments), which every 0.1 s was 1.5% of a partition rolling on every append.
# What others open meanwhile (connections, spans, threads) is what the reserve is for.
FD_COUNT_CACHE_FAR_S = 2.0
_PROC_FDS = Path("/proc/self/fd")
_NR_OPEN = Path("/proc/sys/fs/nr_open")
_MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")


def raise_nofile_limit() -> int:
    """Raise the soft RLIMIT_NOFILE to the hard limit (capped by fs.nr_open when the
    hard limit is infinite); returns the soft limit in force afterwards."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        target = _read_int(_NR_OPEN) or soft
    if soft != resource.RLIM_INFINITY and target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (OSError, ValueError):
            pass
    return soft


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def storage_limit(nofile: int, max_map_count: int | None) -> tuple[int, str]:
    """The binding limit on segment descriptors and what it is, for messages."""
    if max_map_count is not None and max_map_count < nofile:
        return max_map_count, "vm.max_map_count"
    return nofile, "RLIMIT_NOFILE"


def partition_fds(directory: Path) -> int:
    """Descriptors a partition directory will hold once loaded: one per `.log`, one
    per non-empty index (mapped), and an active segment's full set."""
    total = FDS_PER_ACTIVE_SEGMENT
    try:
        entries = list(os.scandir(directory))
    except FileNotFoundError:
        return total
    for entry in entries:
        if entry.name.endswith(LOG_SUFFIX):
            total += 1
        elif entry.name.endswith((INDEX_SUFFIX, TIME_INDEX_SUFFIX)):
            try:
                total += entry.stat().st_size > 0
            except FileNotFoundError:
                pass
    return total


def open_fd_count() -> int:
    """Descriptors this process holds now (Linux: entries of /proc/self/fd)."""
    try:
        with os.scandir(_PROC_FDS) as entries:
            return sum(1 for _ in entries) - 1  # the scandir's own descriptor
    except OSError:
        return 0  # no /proc: nothing measured, the limit alone applies


class FdBudget:
    """How many more descriptors storage may open: `limit - reserve - open now`."""

    def __init__(
        self,
        limit: int | None = None,
        *,
        reserve: int = FD_RESERVE,
        count: Callable[[], int] = open_fd_count,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if limit is None:
            limit, self.limit_name = storage_limit(
                resource.getrlimit(resource.RLIMIT_NOFILE)[0], _read_int(_MAX_MAP_COUNT)
            )
        else:
            self.limit_name = "the limit"
        self.limit = limit
        # A small limit (tests, containers) still leaves storage a quarter of it.
        self.reserve = min(reserve, limit * 3 // 4)
        self._count = count
        self._clock = clock
        self._lock = threading.Lock()
        self._measured = 0
        self._measured_at: float | None = None
        self._admitted = 0  # descriptors admitted since the last measurement

    def headroom(self) -> int:
        """Descriptors storage may still open (negative when over budget)."""
        with self._lock:
            return self._headroom_locked()

    def _headroom_locked(self) -> int:
        now = self._clock()
        if self._measured_at is None or now - self._measured_at >= self._trusted_for():
            self._measured, self._measured_at, self._admitted = self._count(), now, 0
        return self.limit - self.reserve - self._measured - self._admitted

    def _trusted_for(self) -> float:
        """Seconds the last count stands: longer while half the budget was free then."""
        budget = self.limit - self.reserve
        far = budget - self._measured >= budget / 2
        return FD_COUNT_CACHE_FAR_S if far else FD_COUNT_CACHE_S

    def allows(self, descriptors: int) -> bool:
        """Admit `descriptors` more if they fit (counted until the next measurement)."""
        with self._lock:
            if descriptors > self._headroom_locked():
                return False
            self._admitted += descriptors
            return True

    def describe(self) -> str:
        """For error messages: the numbers behind a refusal."""
        return (
            f"{max(self.headroom(), 0)} of {self.limit_name} {self.limit} are free for storage "
            f"({self.reserve} kept for connections and the rest of the broker)"
        )
