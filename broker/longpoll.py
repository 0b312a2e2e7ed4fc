"""Wake long-polling fetches when a partition they wait on grows.

A fetch that finds fewer than `min_bytes` subscribes to its partitions' logs and
sleeps until an append to one of them, or its deadline: no polling loop. Logs call
their append listeners from whichever thread appended, after releasing their lock,
so the listener only hands a wake-up to the trio thread (`run_sync_soon` is
thread-safe and cheap) and does nothing at all when nobody waits on that log.

Ordering that makes a wake-up impossible to miss: subscribe, then read, then wait.
An append that lands after the read sets the subscription's event; one that lands
before it is already visible to the read.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

import trio

from storage.log import Log

# A fetch never parks longer than this, whatever `max_wait_ms` asks: a client
# asking for a year would otherwise pin a connection and its buffers forever.
FETCH_MAX_WAIT_MS_CAP = 300_000
# How often a waiting fetch checks that its client is still there: a client that
# pipelined frames behind a long poll and left must not pin them for the whole wait.
PEER_CHECK_INTERVAL_S = 0.5

# "Has the client of the current request gone?", set per connection by
# broker.connection (the handler tasks inherit it); never, outside a connection.
peer_gone: ContextVar[Callable[[], bool]] = ContextVar("peer_gone", default=lambda: False)


class Subscription:
    """One waiting fetch: an event set by appends to any of its logs."""

    def __init__(self) -> None:
        self.event = trio.Event()

    async def wait_until(self, deadline: float) -> bool:
        """Sleep until an append, `deadline` (trio time) or the client's disconnect
        (`peer_gone`, checked every PEER_CHECK_INTERVAL_S); True if woken by an append.

        Re-arms before returning, so an append during the caller's next read wakes
        the next wait instead of being lost.
        """
        gone = peer_gone.get()
        while True:
            with trio.move_on_at(min(deadline, trio.current_time() + PEER_CHECK_INTERVAL_S)):
                await self.event.wait()
            if self.event.is_set() or trio.current_time() >= deadline or gone():
                break
        woken = self.event.is_set()
        self.event = trio.Event()
        return woken


class AppendNotifier:
    """Routes `Log` append notifications to the fetches waiting on that log.

    Create inside the trio run (it captures the trio token). Logs are keyed by
    identity; each log gets one listener, registered the first time someone waits
    on it.
    """

    def __init__(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._waiting: dict[int, set[Subscription]] = {}
        self._watched: weakref.WeakSet[Log] = weakref.WeakSet()
        self._closed = False

    def _watch(self, log: Log) -> None:
        # A weak set, not ids: a recreated topic's new Log may reuse a dead one's id.
        if log not in self._watched:
            self._watched.add(log)
            log.add_append_listener(self._on_append)

    def _on_append(self, log: Log) -> None:
        # Any thread. A dict membership test is atomic under the GIL; a stale
        # answer only costs a spurious or a redundant wake-up, never a lost one,
        # because subscriptions are registered before their read.
        if id(log) in self._waiting:
            try:
                self._token.run_sync_soon(self._wake, id(log))
            except trio.RunFinishedError:
                pass

    def wake(self, log: Log) -> None:
        """Wake the fetches waiting on `log` now (its topic was deleted). Trio thread only."""
        self._wake(id(log))

    def _wake(self, key: int) -> None:
        for sub in self._waiting.get(key, ()):
            sub.event.set()

    @contextmanager
    def subscribe(self, logs: Iterable[Log]) -> Iterator[Subscription]:
        """Subscribe to appends on `logs` for the duration of the block."""
        sub = Subscription()
        keys = []
        for log in logs:
            self._watch(log)
            keys.append(id(log))
            self._waiting.setdefault(id(log), set()).add(sub)
        if self._closed:
            sub.event.set()
        try:
            yield sub
        finally:
            for key in keys:
                subs = self._waiting.get(key)
                if subs is not None:
                    subs.discard(sub)
                    if not subs:
                        del self._waiting[key]

    def close(self) -> None:
        """Wake every waiting fetch now and every later one at once (shutdown)."""
        self._closed = True
        for subs in self._waiting.values():
            for sub in subs:
                sub.event.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def waiting_count(self) -> int:
        """Subscriptions currently registered (for tests and metrics)."""
        return len({id(s) for subs in self._waiting.values() for s in subs})
