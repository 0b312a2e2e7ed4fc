"""Segment files opened on demand: bounded LRU caches of descriptors and index maps.

A broker with 20,000 partitions cannot keep every segment's `.log`, index writers
and index maps open under a 20,000-descriptor limit (issue 34, item 7). As Kafka's
lazy indexes do, storage holds each of them as a `Lazy` resource: opened on first
use, kept in a process-wide LRU cache, and released when the cache is over its
capacity (the least recently used goes first; LRU and not idle time, because the
bound is what protects the limit and a busy broker never idles). Busy partitions
keep their files open; idle ones hold nothing and reopen in microseconds.

Releasing never closes a descriptor under a reader: the cache only drops its
reference to the `Descriptor` (or map), and the descriptor is closed (the map
unmapped) when its last user lets go. So the cache bounds what is *kept*; what
readers hold at one moment is bounded by the threads that read.

Reopening checks the file is the one first opened (device and inode): a segment
replaced under its name by a cleaned one (written beside it, then renamed over
it) fails with ENOENT instead of serving another file's bytes. A file unlinked
and only then recreated may get its inode number back; storage never does that
to a segment a reader may hold (deleted segments are renamed `.deleted` first).

One cache per process, not per data directory: the descriptor table and the
map count are per process. `FILES` holds descriptors, `MAPS` index maps; their
capacities are set by `storage.fdbudget` when a data directory opens.

Thread safety: all of it. A resource may be opened twice by two racing threads;
the loser's copy is simply dropped.
"""

from __future__ import annotations

import errno
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any, Generic, TypeVar

from storage.fileio import FileIO

T = TypeVar("T")

# Descriptors and maps kept at least, whatever the budget says: a tiny limit still works.
MIN_CAPACITY = 16
# What a failed open (EMFILE, ENFILE; ENOMEM past vm.max_map_count) releases before
# its one retry: a share of the cache, so a burst of opens does not retry one by one.
RELEASE_SHARE_ON_EXHAUSTION = 8
_EXHAUSTED = (errno.EMFILE, errno.ENFILE, errno.ENOMEM)


class Descriptor:
    """An open file descriptor closed when its last user lets go (or explicitly)."""

    __slots__ = ("__weakref__", "_finalizer", "fd")

    def __init__(self, io: FileIO, fd: int) -> None:
        self.fd = fd
        self._finalizer = weakref.finalize(self, _close_quietly, io, fd)

    def close(self) -> None:
        self._finalizer()


def _close_quietly(io: FileIO, fd: int) -> None:
    try:
        io.close(fd)
    except OSError:
        pass


class LruCache:
    """Which `Lazy` resources stay open: at most `capacity`, least recently used out.

    Holds its resources weakly: an owner that goes away (a deleted topic's segment)
    takes its descriptors with it at once, not at the next release.
    """

    def __init__(self, name: str, capacity: int) -> None:
        self.name = name
        self.capacity = max(capacity, MIN_CAPACITY)
        self._lock = threading.Lock()
        self._open: OrderedDict[int, weakref.ref[Lazy[Any]]] = OrderedDict()
        self.opened = 0  # resources opened (first time or again), for statistics
        self.released = 0  # resources released to stay within capacity

    def __len__(self) -> int:
        return len(self._open)

    def resize(self, capacity: int) -> None:
        """A new bound (the budget's); releases the excess at once."""
        with self._lock:
            self.capacity = max(capacity, MIN_CAPACITY)
            victims = self._over_capacity_locked(0)
        _release_all(victims)

    def touch(self, resource: Lazy[Any]) -> None:
        """Mark `resource` most recently used (lock-free: one atomic dict operation)."""
        try:
            self._open.move_to_end(id(resource))
        except KeyError:
            pass  # released meanwhile: the caller still holds its value

    def admit(self, resource: Lazy[Any]) -> None:
        key = id(resource)
        with self._lock:
            self.opened += 1
            self._open[key] = weakref.ref(resource, self._gone(key))
            victims = self._over_capacity_locked(0)
        _release_all(victims)

    def _gone(self, key: int) -> Callable[[weakref.ref[Lazy[Any]]], None]:
        def forget(ref: weakref.ref[Lazy[Any]]) -> None:
            # Lock-free (this may run inside a locked section of this thread); called
            # before the object's memory is freed, so no other resource has its id yet.
            if self._open.get(key) is ref:
                self._open.pop(key, None)

        return forget

    def forget(self, resource: Lazy[Any]) -> None:
        self._open.pop(id(resource), None)

    def release_share(self) -> int:
        """Release a share of what is open (an open ran out of descriptors or maps)."""
        with self._lock:
            share = max(len(self._open) // RELEASE_SHARE_ON_EXHAUSTION, 1)
            victims = self._over_capacity_locked(share)
        _release_all(victims)
        return len(victims)

    def _over_capacity_locked(self, extra: int) -> list[Lazy[Any]]:
        victims: list[Lazy[Any]] = []
        while self._open and (len(self._open) > self.capacity or len(victims) < extra):
            _, ref = self._open.popitem(last=False)
            victim = ref()
            if victim is not None:
                victims.append(victim)
        self.released += len(victims)
        return victims


def _release_all(victims: list[Lazy[Any]]) -> None:
    for victim in victims:
        victim.drop()


class Lazy(Generic[T]):
    """One resource (a descriptor, a map) opened on demand through an `LruCache`."""

    __slots__ = ("__weakref__", "_cache", "_value")

    def __init__(self, cache: LruCache, value: T | None = None) -> None:
        self._cache = cache
        self._value: T | None = None
        if value is not None:
            self._keep(value)

    def get(self) -> T:
        """The resource, opened if it is not; hold the value while using it."""
        value = self._value
        if value is not None:
            self._cache.touch(self)
            return value
        return self._keep(exhaustion_retried(self._cache, self._open))

    def _keep(self, value: T) -> T:
        self._value = value
        self._cache.admit(self)
        return value

    @property
    def is_open(self) -> bool:
        return self._value is not None

    def drop(self) -> None:
        """Stop keeping the resource (it closes when its last user lets go)."""
        self._value = None

    def close(self) -> None:
        """Drop the resource and leave the cache (the owner is done with it)."""
        self._cache.forget(self)
        self._value = None

    def _open(self) -> T:
        raise NotImplementedError


def exhaustion_retried(cache: LruCache, opener: Callable[[], T]) -> T:
    """`opener()`, retried once after releasing a share of `cache` when the process ran
    out of descriptors or maps (another caller's, or a connection's, may be the cause)."""
    try:
        return opener()
    except OSError as exc:
        if exc.errno not in _EXHAUSTED or not cache.release_share():
            raise
    return opener()


class LazyFile(Lazy[Descriptor]):
    """A file reopened by path on demand; the same inode, or ENOENT."""

    __slots__ = ("_identity", "_io", "_writable", "path")

    def __init__(
        self, io: FileIO, path: Path, *, fd: int | None = None, writable: bool = True
    ) -> None:
        self._io = io
        self.path = path
        self._writable = writable
        self._identity: tuple[int, int] | None = None
        descriptor = None
        if fd is not None:
            descriptor = Descriptor(io, fd)
            self._identity = _identity(fd)
        super().__init__(FILES, descriptor)

    def _open(self) -> Descriptor:
        return Descriptor(self._io, self._open_checked())

    def open_transient(self) -> int:
        """A descriptor of the same file for one use, not kept (the caller closes it)."""
        return exhaustion_retried(FILES, self._open_checked)

    def _open_checked(self) -> int:
        fd = self._io.open(self.path, writable=self._writable)
        try:
            identity = _identity(fd)
        except OSError:
            self._io.close(fd)
            raise
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            self._io.close(fd)
            raise FileNotFoundError(
                errno.ENOENT, f"{self.path} was replaced by another file", str(self.path)
            )
        return fd


def _identity(fd: int) -> tuple[int, int]:
    stat = os.fstat(fd)
    return stat.st_dev, stat.st_ino


def open_retried(io: FileIO, path: Path, **flags: bool) -> int:
    """`io.open`, releasing cached descriptors once if the process has none left."""
    return exhaustion_retried(FILES, lambda: io.open(path, **flags))


# The process's caches; `storage.fdbudget.size_caches` sets their capacities.
FILES = LruCache("descriptors", 1024)
MAPS = LruCache("index maps", 4096)
