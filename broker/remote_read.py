"""Reads that need the object store (tiered storage): in their own threads, timed out.

A read below a partition's local log start blocks on the network (storage.remote).
It never runs on the event loop and never in `broker.offload`'s worker pool: a slow
or dead store would then hold the threads local reads and fsyncs need. Here every
remote read borrows one of `remote.log.reader.threads` threads (10) and is given
`tidelog.remote.fetch.timeout.ms` (10 s); past it the caller gets RemoteStorageError
(retriable) and the thread is abandoned: it ends when the store client's own socket
timeout fires, and holds its limiter slot until then, so a dead store ties up those
threads only. Only the partitions that need the store wait or fail; every other
partition of the request, and every other client, is served as before.

`prefetch` reads a fetch's remote partitions concurrently (bounded by the same
threads), so a fetch of several cold partitions costs about one round trip, not one
per partition (Kafka serves one remote partition per fetch).
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

import trio

from broker.config import BrokerConfig
from broker.tiered.runner import settings_with_credentials
from protocol.errors import RemoteStorageError
from storage.fileio import FileIO
from storage.log import FetchData, Log
from storage.remote import BlockingObjectStore
from storage.remote.manifest_view import ManifestView
from storage.remote.remote_reader import RemoteLog, RemoteReader

if TYPE_CHECKING:
    from broker.context import BrokerContext
    from protocol.api_types import FetchPartition

__all__ = [
    "REMOTE_READ_THREADS",
    "call",
    "ensure_attached",
    "limiter",
    "open_reader",
    "prefetch",
    "read",
    "set_threads",
]

# Threads reading the store at once, broker-wide, unless remote.log.reader.threads says
# otherwise (Kafka's key and default): enough to overlap a fetch's cold partitions, few
# enough that a hung store ties up only these.
REMOTE_READ_THREADS = 10

T = TypeVar("T")

_LIMITER: trio.lowlevel.RunVar[trio.CapacityLimiter] = trio.lowlevel.RunVar("remote_limiter")
_threads = REMOTE_READ_THREADS


def set_threads(count: int) -> None:
    """remote.log.reader.threads, before the first remote read of a run."""
    global _threads
    _threads = count


def limiter() -> trio.CapacityLimiter:
    """The remote-read thread limiter of the current trio run (created on first use)."""
    try:
        return _LIMITER.get()
    except LookupError:
        created = trio.CapacityLimiter(_threads)
        _LIMITER.set(created)
        return created


def _timeout_s(ctx: BrokerContext) -> float:
    return ctx.config.tidelog_remote_fetch_timeout_ms / 1000


def open_reader(config: BrokerConfig) -> RemoteReader | None:
    """The broker's remote reader (its chunk cache wiped: blocking, run it in a worker),
    or None when tiered storage is off."""
    settings = config.remote_store_settings
    if settings is None:
        return None
    settings = settings_with_credentials(settings, config.tidelog_remote_storage_credentials_file)
    return RemoteReader(
        BlockingObjectStore(settings),
        Path(config.data_dir),
        chunk_cache_bytes=config.tidelog_remote_cache_bytes,
        chunk_bytes=config.tidelog_remote_cache_chunk_bytes,
        index_cache_bytes=config.tidelog_remote_index_cache_bytes,
    )


async def call(ctx: BrokerContext, fn: Callable[[], T], what: str) -> T:
    """`fn()` (a blocking read that may touch the store) in a remote-read thread under
    the timeout; its latency observed, its failure counted. `what` names the
    partition for the timeout's message."""
    timeout_s = _timeout_s(ctx)
    started = trio.current_time()
    try:
        with trio.fail_after(timeout_s):
            return await trio.to_thread.run_sync(fn, limiter=limiter(), abandon_on_cancel=True)
    except trio.TooSlowError as exc:
        reader = getattr(ctx, "remote_reader", None)
        if reader is not None:
            reader.failed()
        raise RemoteStorageError(
            f"{what}: the object store did not answer within {timeout_s:g} s"
        ) from exc
    finally:
        ctx.metrics.get("tidelog_remote_read_duration_seconds").observe(
            trio.current_time() - started
        )


async def read(
    ctx: BrokerContext, plog: Log, offset: int, limit: int, *, min_one: bool
) -> FetchData:
    """`Log.read` of an offset below the local log start, through `call`."""
    fn = functools.partial(plog.read, offset, limit, min_one=min_one)
    return await call(ctx, fn, f"{plog.topic}-{plog.partition} offset {offset}")


async def prefetch(
    ctx: BrokerContext,
    wanted: Sequence[tuple[str, FetchPartition, Log | None]],
    max_bytes: int,
) -> dict[int, FetchData | Exception]:
    """The remote partitions of a fetch read concurrently: by position in `wanted`,
    each one's records (up to its own max_bytes, at least one batch) or the error it
    met. Partitions the local log serves are left out."""
    # Their limits share the answer's room (max_bytes, and the memory grant): the
    # pass over the partitions after this one reads again any that did not fit.
    room = min(max_bytes, ctx.memory.room())
    jobs = []
    for i, (_, p, plog) in enumerate(wanted):
        if room <= 0:
            break
        if plog is not None and plog.needs_remote(p["offset"]):
            limit = max(min(p["max_bytes"], room), 1)
            jobs.append((i, plog, p["offset"], limit))
            room -= limit
    found: dict[int, FetchData | Exception] = {}
    if not jobs:
        return found

    async def one(i: int, plog: Log, offset: int, limit: int) -> None:
        ctx.memory.charge(limit)
        try:
            found[i] = await read(ctx, plog, offset, limit, min_one=True)
        except Exception as exc:  # answered as that partition's error
            found[i] = exc
        finally:
            ctx.memory.release(limit, freed=False)

    async with trio.open_nursery() as nursery:
        for job in jobs:
            nursery.start_soon(one, *job)
    return found


# Logs already looked at for a remote tier (a topic without one is not looked at again
# until its config turns remote storage on).
_CHECKED: weakref.WeakSet[Log] = weakref.WeakSet()


def ensure_attached(ctx: BrokerContext, plog: Log) -> None:
    """Give `plog` its remote tier once (its manifest's readable segments), if its topic
    has remote.storage.enable or its directory holds a manifest. Called by
    `broker.handlers.common.get_log`: one set look-up for a log already seen."""
    reader = ctx.remote_reader
    if reader is None or plog.remote is not None:
        return
    enabled = bool(getattr(plog.config, "remote_storage_enable", False))
    if plog in _CHECKED and not enabled:
        return
    _CHECKED.add(plog)
    view = ManifestView(FileIO(), plog.directory, _prefix(ctx))
    refs = view()
    if not enabled and not refs:
        return
    plog.attach_remote(RemoteLog(reader, view, f"{plog.topic}-{plog.partition}"))


def _prefix(ctx: BrokerContext) -> str:
    return str(getattr(ctx.config, "tidelog_remote_storage_prefix", "tidelog"))
