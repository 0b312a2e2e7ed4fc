"""The group coordinator's driver: runs the pure `GroupCoordinator` inside the trio broker.

The coordinator (broker/groups/) does no I/O; this service performs its effects:

- `Deliver(ticket, response)` wakes the handler waiting on that ticket (a JoinGroup
  waiting for the join phase to end, a SyncGroup for the leader's assignment, a
  commit for its append). A ticket whose handler is gone (client disconnected) is
  dropped. A handler stops waiting as soon as its client is seen gone
  (`broker.longpoll.peer_gone`, checked every PEER_CHECK_INTERVAL_S): a JoinGroup
  parked for a rebalance that waits minutes for other members would otherwise keep a
  dead connection, and the graceful shutdown's drain, waiting as long.
- `Append(ticket, records)` is written to `__consumer_offsets` (broker/offsets_log.py)
  by one writer at a time, in emission order, then acknowledged with
  `append_completed` (with an error code if the write failed).

`serve()` (one task in the broker's nursery) loads the coordinator from the log
before the broker listens, then calls `tick()` whenever `next_deadline()` passes:
sessions, join and sync timeouts, offsets retention. Without `serve()` (handlers
called directly in tests) the first request loads the coordinator.

Thread safety: none needed. Every coordinator call happens in the trio thread with
no checkpoint between the call and the draining of its effects, so calls never
interleave; log writes run in a worker thread under `_write_lock`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

import trio

from broker import offload
from broker.groups import (
    Append,
    Deliver,
    GroupConfig,
    GroupCoordinator,
    Pending,
    load_records,
)
from broker.groups.messages import GroupStatistics, Response
from broker.logging import get_logger
from broker.longpoll import PEER_CHECK_INTERVAL_S, peer_gone
from broker.offsets_log import OffsetsLog
from protocol.clock import ClockMs
from protocol.errors import (
    CoordinatorNotAvailable,
    RebalanceInProgress,
    StorageError,
    TidelogError,
)

log = get_logger(component="groups")

R = TypeVar("R")

# Longest sleep between deadline checks: the wall clock may jump (NTP, a test's
# injected clock), so one long sleep computed from it is never trusted.
MAX_TICK_SLEEP_S = 1.0


@dataclass(frozen=True, slots=True)
class GroupServiceStatistics:
    """What the load found and what the writer did (docs/style.md item 11)."""

    loaded_records: int  # records replayed at start
    malformed_records: int  # records skipped: not a valid key/value, or undecodable batch
    unreadable_ranges: int  # reads that failed (fenced damage); skipped to the next segment
    groups: int
    failed_appends: int  # appends whose write or fsync failed


class _Slot:
    """Where a Deliver meets the handler waiting for it."""

    __slots__ = ("done", "response")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.response: Response | None = None


class GroupService:
    """One broker's coordinator, its waiting requests and its log writer."""

    def __init__(self, config: GroupConfig, offsets_log: OffsetsLog, clock_ms: ClockMs) -> None:
        self._config = config
        self._log = offsets_log
        self._clock_ms = clock_ms
        self._coordinator: GroupCoordinator | None = None
        self._load_lock = trio.Lock()
        self._write_lock = trio.Lock()
        self._slots: dict[int, _Slot] = {}
        self._queued: deque[Append] = deque()
        self._wake = trio.Event()
        self._sleeping_until_ms: int | None = None
        self._loaded = 0
        self._malformed = 0
        self._unreadable = 0
        self._failed_appends = 0
        self._serve_scope = trio.CancelScope()
        self._closed = False

    # --- what handlers call -----------------------------------------------------

    async def call(self, fn: Callable[[GroupCoordinator], R | Pending]) -> R:
        """Run `fn` on the coordinator, perform the effects, and return its answer,
        waiting for the Deliver if it answered Pending."""
        coordinator = await self._ready()
        result = fn(coordinator)
        slot = None
        if isinstance(result, Pending):
            slot = self._slots[result.ticket] = _Slot()
        self._apply(coordinator)
        self._nudge(coordinator)
        try:
            await self._write_queued(coordinator)
            if slot is None:
                return result  # type: ignore[return-value]
            await self._wait_for(slot)
            return slot.response  # type: ignore[return-value]
        finally:
            if isinstance(result, Pending):
                self._slots.pop(result.ticket, None)

    @staticmethod
    async def _wait_for(slot: _Slot) -> None:
        """Until the Deliver, or the client is gone (then RebalanceInProgress, which
        nobody reads; a half-closed client still there would join again)."""
        gone = peer_gone.get()
        while not slot.done.is_set():
            with trio.move_on_after(PEER_CHECK_INTERVAL_S):
                await slot.done.wait()
            if not slot.done.is_set() and gone():
                raise RebalanceInProgress("the client left before the group answered")

    async def query(self, fn: Callable[[GroupCoordinator], R]) -> R:
        """A read of the coordinator's state (no effects)."""
        return fn(await self._ready())

    def group_statistics(self) -> list[GroupStatistics]:
        """Every group's state, members, rebalances and offsets (empty until loaded)."""
        return self._coordinator.statistics() if self._coordinator is not None else []

    def statistics(self) -> GroupServiceStatistics:
        groups = len(self._coordinator.list_groups()) if self._coordinator is not None else 0
        return GroupServiceStatistics(
            self._loaded, self._malformed, self._unreadable, groups, self._failed_appends
        )

    # --- the task ------------------------------------------------------------------

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Load, report started, then tick at every deadline until cancelled."""
        coordinator = await self._ready()
        task_status.started()
        with self._serve_scope:
            await self._tick_forever(coordinator)

    def close(self) -> None:
        """Stop ticking (before the logs close); requests still arriving are refused."""
        self._closed = True
        self._serve_scope.cancel()

    async def _tick_forever(self, coordinator: GroupCoordinator) -> None:
        while True:
            deadline_ms = coordinator.next_deadline()
            now_ms = self._clock_ms()
            if now_ms >= deadline_ms:
                coordinator.tick()
                self._apply(coordinator)
                await self._write_queued(coordinator)
                if coordinator.next_deadline() <= deadline_ms:  # a bug; never spin on it
                    log.error("groups_deadline_stuck", deadline_ms=deadline_ms)
                    await trio.sleep(MAX_TICK_SLEEP_S)
                continue
            self._sleeping_until_ms = deadline_ms
            with trio.move_on_after(min((deadline_ms - now_ms) / 1000, MAX_TICK_SLEEP_S)):
                await self._wake.wait()
            self._wake = trio.Event()

    # --- plumbing --------------------------------------------------------------------

    async def _ready(self) -> GroupCoordinator:
        if self._closed:
            raise CoordinatorNotAvailable("the broker is shutting down")
        if self._coordinator is not None:
            return self._coordinator
        async with self._load_lock:
            if self._coordinator is None:
                self._coordinator = await self._load()
        return self._coordinator

    async def _load(self) -> GroupCoordinator:
        read = await offload.to_worker(self._log.read_all)
        state = load_records(read.records)
        self._loaded = state.records - state.malformed
        self._malformed = state.malformed + read.undecodable_records
        self._unreadable = read.unreadable_ranges
        if self._malformed or self._unreadable:
            log.warning(
                "offsets_load_skipped",
                malformed_records=self._malformed,
                first_undecodable_offset=read.first_skipped_offset,
                unreadable_ranges=self._unreadable,
            )
        log.info(
            "groups_loaded",
            groups=len(set(state.groups) | set(state.offsets)),
            records=state.records,
        )
        return GroupCoordinator(self._config, self._clock_ms, loaded=state)

    def _apply(self, coordinator: GroupCoordinator) -> None:
        """Drain the effects: answer waiting handlers, queue appends (in order)."""
        for effect in coordinator.take_effects():
            if isinstance(effect, Deliver):
                slot = self._slots.get(effect.ticket)
                if slot is not None:  # else its handler is gone: dropped
                    slot.response = effect.response
                    slot.done.set()
            else:
                self._queued.append(effect)

    def _nudge(self, coordinator: GroupCoordinator) -> None:
        """Wake the ticking task if a call brought the next deadline forward."""
        until = self._sleeping_until_ms
        if until is not None and coordinator.next_deadline() < until:
            self._sleeping_until_ms = None
            self._wake.set()

    async def _write_queued(self, coordinator: GroupCoordinator) -> None:
        """Write every queued Append (one writer, in order) and acknowledge each.

        Shielded: once taken from the queue an append is written and acknowledged
        even if the handler that started the write is cancelled.
        """
        if not self._queued:
            return
        with trio.CancelScope(shield=True):
            async with self._write_lock:
                while self._queued:
                    batch = list(self._queued)
                    self._queued.clear()
                    error = await self._write(batch)
                    for append in batch:
                        coordinator.append_completed(append.ticket, error)
                    self._apply(coordinator)
                self._nudge(coordinator)

    async def _write(self, batch: list[Append]) -> str | None:
        try:
            await offload.to_worker(self._log.append, [a.records for a in batch], self._clock_ms())
        except (TidelogError, OSError) as exc:
            self._failed_appends += len(batch)
            code = exc.code if isinstance(exc, TidelogError) else StorageError.code
            log.error("offsets_append_failed", appends=len(batch), error=code, reason=str(exc))
            return code
        return None
