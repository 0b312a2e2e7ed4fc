"""The one offload policy: priced work on the event loop or in a worker thread, and
every worker thread under one limiter.

Work that may take long is priced before it starts, in nanoseconds of CPU time, by a
cost model that lives beside what it prices and reads only what is cheap to read
(sizes, batch headers): `protocol.batch.append_cost_ns` (validating an append's
msgpack payloads), `protocol.kafka.convert.conversion_cost_ns` (converting Kafka
batches either way), each codec's `frame_cost_ns` (decoding a request frame;
broker/native/codec.py, broker/kafka/connection.py).
`run` does work priced within `INLINE_BUDGET_NS` on the event loop, where it skips
two thread hops (~20% of produce throughput under GIL contention), and anything
dearer, or unpriced (`protocol.batch.UNPRICED_NS`: a compressed batch's decoded size
is unknown until it is inflated), in a worker thread. Blocking I/O (fsync, cold
reads, `sendfile`, topic files) always goes to a worker (`to_worker`).

Every worker thread the request path starts borrows from one `trio.CapacityLimiter`
of `WORKER_THREADS` per trio run (trio's own default limiter holds 40 too; this one
is the broker's, so no other user of trio's default competes with it). A worker never
waits for another worker, so a full limiter only queues work. The log cleaner's
threads are the one exception (broker/server.py): `log.cleaner.threads` sizes them
and a pass runs for minutes, so they keep trio's default limiter.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, TypeVarTuple

import trio

__all__ = ["INLINE_BUDGET_NS", "WORKER_THREADS", "inline", "limiter", "run", "to_worker"]

# The event-loop time one priced piece of work may take (every other client waits
# meanwhile): a default 1 MiB producer request is validated within it (~15 ms at
# the models' prices, ~3 ms in practice), a 1 MiB Kafka request of 100-byte records
# is converted within it (~14 ms priced).
INLINE_BUDGET_NS = 16_000_000
# Worker threads the broker's request path may run at once (trio's default).
WORKER_THREADS = 40

_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("offload_limiter")

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


def limiter() -> trio.CapacityLimiter:
    """The worker-thread limiter of the current trio run (created on first use)."""
    try:
        return _LIMITER.get()
    except LookupError:
        created = trio.CapacityLimiter(WORKER_THREADS)
        _LIMITER.set(created)
        return created


def inline(cost_ns: int) -> bool:
    """Whether work of this price runs on the event loop."""
    return cost_ns <= INLINE_BUDGET_NS


async def to_worker(fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """`fn(*args)` in a worker thread under the shared limiter (blocking or dear work)."""
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter())


async def run(cost_ns: int, fn: Callable[[*Ts], T], *args: *Ts) -> T:
    """`fn(*args)` on the event loop if `cost_ns` is within the budget, else in a
    worker thread (`to_worker`)."""
    if cost_ns <= INLINE_BUDGET_NS:
        return fn(*args)
    return await trio.to_thread.run_sync(fn, *args, limiter=limiter())
