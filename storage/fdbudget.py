"""The file-descriptor budget storage works within (issue 23, finding 1; issue 34, item 7).

Storage keeps no descriptor or index map per partition for good: each segment's
`.log`, index writers and index maps are opened on demand and kept in the bounded
caches of `storage.fdcache` (released least recently used first), and the maps
keep no descriptor (`storage.mapping`). So how many partitions a broker holds is
no longer a matter of descriptors, and what was accepted always loads at start
(issue 38, item 4: creation and loading used to estimate one cost twice, and
loading refused topics creation had accepted). What the budget guards:

- the caches' capacities (`size_caches`, when a data directory opens): what
  storage may keep open is the soft limit minus `FD_RESERVE` for everything else
  the broker holds (connections, sendfile spans, worker threads), and maps are
  capped below `vm.max_map_count`;
- the descriptors a new segment needs at once (`FDS_PER_ACTIVE_SEGMENT`), for a
  topic's creation and a segment roll: when even releasing every cached one would
  not make room (connections hold the rest), a topic is refused up front and a
  roll is deferred (the append goes to the active segment while its positions
  still fit an int32), instead of failing half way with EMFILE.

It also raises the soft RLIMIT_NOFILE to the hard limit when a data directory
opens (`raise_nofile_limit`). What is open is measured (`/proc/self/fd`), not
estimated, so descriptors anyone holds count.

Thread safety: `allows` may be called from any thread.
"""

from __future__ import annotations

import os
import resource
import threading
import time
from collections.abc import Callable
from pathlib import Path

from storage.fdcache import FILES, MAPS

# What creating or writing a segment needs open at once: its `.log`, and an index's
# file while it is sized or written. The one estimate of a partition's cost, for its
# creation and its rolls alike; loading needs none (the caches make room).
FDS_PER_ACTIVE_SEGMENT = 3
# Maps left to the rest of the process (heap arenas, thread stacks, libraries) below
# vm.max_map_count, as a share of it.
MAP_RESERVE_SHARE = 4
# Descriptors kept free for everything but segments and connections: sendfile
# spans (MAX_OPEN_SPANS, 256), worker threads' pipes, checkpoints, slack.
FD_RESERVE_BESIDES_CONNECTIONS = 1048
# The reserve with max.connections at its default (1000); the broker passes its own.
FD_RESERVE = 1000 + FD_RESERVE_BESIDES_CONNECTIONS


def fd_reserve_for(max_connections: int) -> int:
    """Descriptors storage leaves free when the broker accepts `max_connections`."""
    return max_connections + FD_RESERVE_BESIDES_CONNECTIONS


# A measured count is reused this long: a roll on every append must not list
# /proc/self/fd on every append.
FD_COUNT_CACHE_S = 0.1
# ... and this long while at least half the budget was free at the last count. The
# listing costs ~0.45 µs per open descriptor (1.5 ms at 3,400: a log of ~1,100
# segments), which every 0.1 s was 1.5% of a partition rolling on every append.
# What others open meanwhile (connections, spans, threads) is what the reserve is for.
FD_COUNT_CACHE_FAR_S = 2.0
_PROC_FDS = Path("/proc/self/fd")
_NR_OPEN = Path("/proc/sys/fs/nr_open")
_MAX_MAP_COUNT = Path("/proc/sys/vm/max_map_count")
_PROC_MAPS = Path("/proc/self/maps")


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


def open_fd_count() -> int:
    """Descriptors this process holds now (Linux: entries of /proc/self/fd)."""
    try:
        with os.scandir(_PROC_FDS) as entries:
            return sum(1 for _ in entries) - 1  # the scandir's own descriptor
    except OSError:
        return 0  # no /proc: nothing measured, the limit alone applies


def open_map_count() -> int:
    """Memory maps this process holds now (Linux: lines of /proc/self/maps)."""
    try:
        with _PROC_MAPS.open("rb") as maps:
            return sum(1 for _ in maps)
    except OSError:
        return 0


class FdBudget:
    """How many more descriptors storage may open: `limit - reserve - open now`."""

    def __init__(
        self,
        limit: int | None = None,
        *,
        reserve: int = FD_RESERVE,
        count: Callable[[], int] = open_fd_count,
        clock: Callable[[], float] = time.monotonic,
        releasable: Callable[[], int] = FILES.__len__,
    ) -> None:
        """`releasable`: how many of the counted descriptors storage's cache would
        release to make room (they are storage's, not a limit on it)."""
        if limit is None:
            limit, self.limit_name = resource.getrlimit(resource.RLIMIT_NOFILE)[0], "RLIMIT_NOFILE"
        else:
            self.limit_name = "the limit"
        self.limit = limit
        # A small limit (tests, containers) still leaves storage a quarter of it.
        self.reserve = min(reserve, limit * 3 // 4)
        self._count = count
        self._clock = clock
        self._releasable = releasable
        self._lock = threading.Lock()
        self._measured = 0
        self._measured_at: float | None = None

    def headroom(self) -> int:
        """Descriptors storage may still open, releasing what its cache keeps if need
        be (negative when over budget)."""
        with self._lock:
            return self._headroom_locked()

    def _headroom_locked(self) -> int:
        now = self._clock()
        if self._measured_at is None or now - self._measured_at >= self._trusted_for():
            self._measured, self._measured_at = self._count(), now
        return self.limit - self.reserve - self._measured + self._releasable()

    def storage_share(self) -> int:
        """How many descriptors storage may keep open: the cache's capacity."""
        with self._lock:
            self._measured_at = None  # count now, not from a stale measurement
            return self._headroom_locked()

    def _trusted_for(self) -> float:
        """Seconds the last count stands: longer while half the budget was free then."""
        budget = self.limit - self.reserve
        far = budget - self._measured >= budget / 2
        return FD_COUNT_CACHE_FAR_S if far else FD_COUNT_CACHE_S

    def allows(self, descriptors: int) -> bool:
        """Whether storage may open `descriptors` more at once now. Nothing is admitted
        for good: what storage keeps is bounded by its cache, not by each opening."""
        with self._lock:
            return descriptors <= self._headroom_locked()

    def describe(self) -> str:
        """For error messages: the numbers behind a refusal."""
        return (
            f"{max(self.headroom(), 0)} of {self.limit_name} {self.limit} are free for storage "
            f"({self.reserve} kept for connections and the rest of the broker)"
        )


def size_caches(budget: FdBudget) -> None:
    """Bound storage's caches by the budget: descriptors by what it leaves storage, maps
    below vm.max_map_count (less a share for the rest of the process)."""
    FILES.resize(budget.storage_share())
    max_maps = _read_int(_MAX_MAP_COUNT)
    if max_maps is not None:
        baseline = open_map_count() - len(MAPS)
        MAPS.resize(max_maps - max_maps // MAP_RESERVE_SHARE - baseline)
