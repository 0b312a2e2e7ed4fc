"""The broker-wide memory budget for queued requests and answers (`queued.max.request.bytes`).

Per-connection caps alone let N connections hold N times as much (issue 23 #6: 40
connections pipelining 40 MiB fetches took the broker to 3.8 GB). Every connection
draws from this one budget instead:

- a request body larger than `SMALL_REQUEST_BYTES` is reserved (`acquire`) when its
  length header arrives, before it is buffered: while the budget is full that
  connection is not read, and TCP pushes back on its client (Kafka mutes the channel
  when its memory pool is exhausted). One request larger than the whole budget is
  still let in, alone. Smaller requests are charged without waiting, so a small
  request from another client is never stuck behind the abusers;
- a fetch is not started while the budget is full (`wait_for_room`), and its reads
  are limited to the room left;
- an encoded answer is charged when it is queued and released once it is sent.

Trio thread only. Invariant: `used_bytes` is the sum of what is held; it exceeds the
capacity only by charged answers and small requests. Freed memory is handed back to
the OS (`malloc_trim`) once enough has been released, because glibc keeps freed heap
pages, and raises its mmap threshold after large frees, so RSS would stay high. The
trim is the broker's `memory-trim` task (`trim_if_due`, every second), never a
release: under a steady load the pages it hands back are the ones the next requests
fault in again (a trim every 64 MiB cost ~12% of pre-encoded produce throughput).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import trio

from broker.memory import malloc_trim

# Requests up to this size are charged without waiting for room: bounded by the
# per-connection in-flight cap, and they keep small clients served while the
# budget is held by large ones.
SMALL_REQUEST_BYTES = 64 * 1024
# After this many bytes are released, and once usage is low, freed heap pages are
# returned to the OS (a trim walks the heap: a few ms, so not after every answer).
TRIM_AFTER_FREED_BYTES = 64 * 1024 * 1024
# At most one trim this often: a steady load refaults what a trim gives back, so
# trimming after every 64 MiB (four times a second at 260 MB/s) made it pay that on
# every request, while memory left by clients that have gone is back within this.
TRIM_MIN_INTERVAL_S = 5.0
# How often the broker's `memory-trim` task asks `trim_if_due`.
TRIM_CHECK_INTERVAL_S = 1.0


@dataclass(frozen=True, slots=True)
class MemoryBudgetStatistics:
    capacity_bytes: int
    used_bytes: int
    peak_bytes: int
    waits: int  # times a connection was muted (a read or a fetch waited for room)
    trims: int  # times freed memory was returned to the OS


class MemoryBudget:
    """Bytes of queued requests and unsent answers over every connection."""

    def __init__(self, capacity_bytes: int) -> None:
        if capacity_bytes < 1:
            raise ValueError("capacity_bytes must be positive")
        self.capacity_bytes = capacity_bytes
        self.used_bytes = 0
        self._peak = 0
        self._waits = 0
        self._trims = 0
        self._freed = 0
        self._last_trim = -math.inf  # never: trio's clock starts at an arbitrary value
        self._lot = trio.lowlevel.ParkingLot()
        self._parked = 0  # tasks in `_lot`: the lot's own count is a Python call away

    def room(self) -> int:
        """Bytes that may still be taken before the budget is full (never negative)."""
        return max(self.capacity_bytes - self.used_bytes, 0)

    async def acquire(self, size: int) -> None:
        """Take `size` bytes, waiting while they do not fit (alone, anything fits)."""
        if size > SMALL_REQUEST_BYTES and self.used_bytes and size > self.room():
            self._waits += 1
            while self.used_bytes and size > self.room():
                await self._park()
        self.charge(size)

    async def wait_for_room(self) -> None:
        """Wait until the budget is not full (before work that will allocate)."""
        if not self.room():
            self._waits += 1
            while not self.room():
                await self._park()

    async def _park(self) -> None:
        self._parked += 1
        try:
            await self._lot.park()
        finally:
            self._parked -= 1

    def charge(self, size: int) -> None:
        """Take `size` bytes at once (memory that already exists)."""
        self.used_bytes += size
        if self.used_bytes > self._peak:
            self._peak = self.used_bytes

    def release(self, size: int, *, freed: bool = True) -> None:
        """Give back `size` bytes and wake whoever waits for room; `freed=False` when no
        memory was actually let go (a reservation that was never filled)."""
        self.used_bytes -= size
        if self._parked:  # nobody waits, nearly always: skip trio's wake-up machinery
            self._lot.unpark_all()
        if freed:
            self._freed += size

    def trim_if_due(self, now: float) -> bool:
        """Hand freed heap pages back to the OS if `TRIM_AFTER_FREED_BYTES` were released
        since the last trim, usage is under a quarter of the budget, and the last trim
        was `TRIM_MIN_INTERVAL_S` before `now` (trio's clock); True if it trimmed."""
        if (
            self._freed < TRIM_AFTER_FREED_BYTES
            or self.used_bytes > self.capacity_bytes // 4
            or now - self._last_trim < TRIM_MIN_INTERVAL_S
        ):
            return False
        self._freed, self._last_trim = 0, now
        if not malloc_trim():
            return False
        self._trims += 1
        return True

    def statistics(self) -> MemoryBudgetStatistics:
        return MemoryBudgetStatistics(
            self.capacity_bytes, self.used_bytes, self._peak, self._waits, self._trims
        )
