"""Group commit for `acks: -1`: concurrent producers of a partition share fsyncs.

A producer that needs its append durable registers the offset it must see
flushed and waits. One flusher task per partition runs `Log.flush()` in a worker
thread (never on the event loop); every waiter whose append happened before
that fsync started is released by it. Appends that arrive while an fsync runs
queue for the next one, so N concurrent producers cost about one fsync per
round instead of N.

After an fsync error the log itself refuses further writes (storage poisons the
partition); the waiters of the failed round get `StorageError`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import trio

from broker import offload
from broker.logging import get_logger
from protocol.errors import StorageError, TidelogError, UnknownServerError
from storage.log import Log

log = get_logger(component="groupcommit")

FlushObserver = Callable[[float, int], None]


@dataclass(eq=False)
class _Waiter:
    end_offset: int
    event: trio.Event = field(default_factory=trio.Event)
    error: TidelogError | None = None


@dataclass(eq=False)
class _PartitionSync:
    pending: list[_Waiter] = field(default_factory=list)
    running: bool = False


class GroupCommitter:
    """Shares `Log.flush()` calls among concurrent waiters, per log.

    `nursery` hosts the flusher tasks (the broker's long-lived nursery);
    `on_flush(duration_s, waiters)` is told about every fsync round.
    """

    def __init__(self, nursery: trio.Nursery, on_flush: FlushObserver | None = None) -> None:
        self._nursery = nursery
        self._on_flush = on_flush
        self._syncs: dict[int, _PartitionSync] = {}
        self.fsyncs = 0

    async def wait_durable(self, plog: Log, end_offset: int) -> None:
        """Return once every offset below `end_offset` of `plog` is fsynced.

        Raises `StorageError` if the fsync that should cover it failed.
        """
        if plog.recovery_point >= end_offset:
            return
        waiter = _Waiter(end_offset)
        self._enqueue(plog, waiter)
        await waiter.event.wait()
        if waiter.error is not None:
            raise waiter.error

    def flush_soon(self, plog: Log) -> None:
        """Flush `plog` in the background, sharing a round with any waiters (flush.messages)."""
        self._enqueue(plog, _Waiter(plog.log_end_offset))

    def _enqueue(self, plog: Log, waiter: _Waiter) -> None:
        sync = self._syncs.get(id(plog))
        if sync is None:
            sync = self._syncs[id(plog)] = _PartitionSync()
        sync.pending.append(waiter)
        if not sync.running:
            sync.running = True
            self._nursery.start_soon(self._flush_rounds, plog, sync)

    async def _flush_rounds(self, plog: Log, sync: _PartitionSync) -> None:
        try:
            while sync.pending:
                batch, sync.pending = sync.pending, []
                started = time.perf_counter()
                error: TidelogError | None = None
                try:
                    await offload.to_worker(plog.flush)
                except TidelogError as exc:
                    error = exc
                except OSError as exc:
                    error = StorageError(f"fsync failed: {exc}")
                except Exception as exc:  # a bug: fail this round's waiters, keep the broker
                    log.exception("group_commit_flush_crashed")
                    error = UnknownServerError(f"flush failed: {type(exc).__name__}: {exc}")
                self.fsyncs += 1
                if self._on_flush is not None:
                    self._on_flush(time.perf_counter() - started, len(batch))
                if error is not None:
                    log.error("group_commit_fsync_failed", error=str(error))
                durable = plog.recovery_point if error is None else -1
                for waiter in batch:
                    if error is not None:
                        waiter.error = error
                    elif waiter.end_offset > durable:
                        # Appended after the flush captured its position: next round.
                        sync.pending.append(waiter)
                        continue
                    waiter.event.set()
        finally:
            sync.running = False
            if not sync.pending:
                self._syncs.pop(id(plog), None)
