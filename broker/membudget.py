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
- a fetch (any request whose answer may be large) starts only with a grant
  (`grant`): bytes reserved for its answer before it reads (no more than the fetch's
  own `max_bytes`, which its codec reads: `answer_room`), within which its reads
  stay (`room` is the grant while it runs, so it is answered smaller rather than
  overrun the budget). A grant never exceeds a connection's share
  (`share_bytes`, an eighth of the budget) less what that connection already holds,
  so one peer cannot take it all; a connection that holds queued answers gets none
  while the budget is over `capacity - reserve_bytes` (the last quarter is kept for
  connections that hold nothing), and one that holds nothing never waits: when the
  budget is full it gets `GRANT_MIN_BYTES` (its answer is then that, or one whole
  batch). So a consumer that reads its answers is served beside peers that never
  read theirs (issue 38 #5), each of which holds at most its share, or one small
  answer past a full budget. Concurrent grants are each reserved;
- an encoded answer is charged when it is queued and released once it is sent (the
  grant is given back then): a peer that never reads holds at most its share.

Trio thread only. Invariant: `used_bytes` is the sum of what is held; it exceeds the
capacity only by charged answers and small requests. Freed memory is handed back to
the OS (`malloc_trim`) once enough has been released, because glibc keeps freed heap
pages, and raises its mmap threshold after large frees, so RSS would stay high. The
trim is the broker's `memory-trim` task (`trim_if_due`, every second), never a
release: under a steady load the pages it hands back are the ones the next requests
fault in again (a trim every 64 MiB cost ~12% of pre-encoded produce throughput).
"""

from __future__ import annotations

import gc
import math
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
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
# After this many connections have ended, a trim is due (with a collection first):
# churning short connections leaves their buffers in cycles and fragments the heap.
TRIM_AFTER_CONNECTIONS = 256
# How often the broker's `memory-trim` task asks `trim_if_due`.
TRIM_CHECK_INTERVAL_S = 1.0
# A connection's share of the budget (what its answers and a grant may hold together).
SHARE_DIVISOR = 8
# The part of the budget kept for connections that hold nothing (1/4).
RESERVE_DIVISOR = 4
# The smallest grant worth waking for on a connection that already holds answers:
# smaller, it waits for its own answers to drain (a lone batch is read whole anyway).
GRANT_MIN_BYTES = 64 * 1024

# The grant of the request the current task runs, if any: what `room` answers then.
_GRANT: ContextVar[int | None] = ContextVar("tidelog_memory_grant", default=None)


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
        self._abandoned = False  # a connection ended holding answers: collect before a trim
        self._ended = 0  # connections ended since the last trim
        self.share_bytes = max(capacity_bytes // SHARE_DIVISOR, GRANT_MIN_BYTES)
        self.reserve_bytes = capacity_bytes // RESERVE_DIVISOR

    def room(self) -> int:
        """Bytes that may still be taken: the current request's grant while one runs
        (`granted`), else what is left before the budget is full (never negative)."""
        granted = _GRANT.get()
        if granted is not None:
            return granted
        return max(self.capacity_bytes - self.used_bytes, 0)

    def _grantable(self, held: int, wanted: int) -> int | None:
        floor = min(GRANT_MIN_BYTES, wanted)
        if not held:  # holds nothing: never waits (a small grant when the budget is full)
            room = self.capacity_bytes - self.used_bytes
            return max(min(wanted, self.share_bytes, room), floor)
        ceiling = self.capacity_bytes - self.reserve_bytes
        size = min(wanted, self.share_bytes - held, ceiling - self.used_bytes)
        return size if size >= floor else None

    async def grant(self, held: int, wanted: int) -> int:
        """Reserve room for an answer of up to `wanted` bytes on a connection that holds
        `held`, waiting until there is some (see the module docstring); the bytes
        reserved, to be given back with `release(size, freed=False)`."""
        wanted = max(wanted, 1)
        size = self._grantable(held, wanted)
        if size is None:
            self._waits += 1
            while (size := self._grantable(held, wanted)) is None:
                await self._park()
        self.charge(size)
        return size

    @contextmanager
    def granted(self, size: int) -> Iterator[None]:
        """While this runs, `room` in this task (and the threads it starts) is `size`;
        0: no grant (`room` is the budget's)."""
        if not size:
            yield
            return
        token = _GRANT.set(size)
        try:
            yield
        finally:
            _GRANT.reset(token)

    async def acquire(self, size: int) -> None:
        """Take `size` bytes, waiting while they do not fit (alone, anything fits)."""
        if size > SMALL_REQUEST_BYTES and self.used_bytes and size > self.room():
            self._waits += 1
            while self.used_bytes and size > self.room():
                await self._park()
        self.charge(size)

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

    def abandon(self, size: int) -> None:
        """A connection has ended: release what it still held (answers it never read).

        Its tasks ended by exceptions whose tracebacks keep their frames, and with them
        those answers and its TLS and read buffers, in reference cycles that only a
        full collection frees: the next trim collects first when the connection held
        answers, or once `TRIM_AFTER_CONNECTIONS` have ended (measured: 40 MiB left
        resident after 30 non-readers had gone, ~100 KiB per refused TLS connection)."""
        self.release(size)
        self._ended += 1
        if size:
            self._abandoned = True

    def trim_if_due(self, now: float) -> bool:
        """Hand freed heap pages back to the OS if `TRIM_AFTER_FREED_BYTES` were released
        or `TRIM_AFTER_CONNECTIONS` ended since the last trim, usage is under a quarter
        of the budget, and the last trim was `TRIM_MIN_INTERVAL_S` before `now` (trio's
        clock); True if it trimmed."""
        churned = self._ended >= TRIM_AFTER_CONNECTIONS
        if (
            (self._freed < TRIM_AFTER_FREED_BYTES and not churned)
            or self.used_bytes > self.capacity_bytes // 4
            or now - self._last_trim < TRIM_MIN_INTERVAL_S
        ):
            return False
        self._freed, self._last_trim, self._ended = 0, now, 0
        if self._abandoned or churned:
            self._abandoned = False
            gc.collect()
        if not malloc_trim():
            return False
        self._trims += 1
        return True

    def statistics(self) -> MemoryBudgetStatistics:
        return MemoryBudgetStatistics(
            self.capacity_bytes, self.used_bytes, self._peak, self._waits, self._trims
        )
