"""glibc malloc controls for the broker process: the arena cap and `malloc_trim`.

glibc gives each thread that allocates an arena of its own, up to 8 per core (16
on a 2-core host); an arena is reused by a later thread but never unmapped, and
freed chunks inside it stay resident until `malloc_trim` walks it. The broker's
worker threads (`trio.to_thread`: appends, fetch reads, large decodes, retention,
the cleaner, flushes) come and go, so each of up to 16 arenas keeps its own
high-water mark of fragmentation. Under test_load's workload the default arenas
(9 at the end of 10 minutes) held 1-2 MiB more than two, and on a quiet host RSS
grew 4.3% in 10 minutes after the warm-up with them against 0.7% capped at two
(docs/reliability.md, "Memory: malloc arenas"). Python threads run one at a
time under the GIL, so more arenas buy almost no concurrency here.

`limit_malloc_arenas` is called once at broker start, before any worker thread
exists; nothing here runs per request. Other C libraries (musl, macOS) have no
arenas: every call is a no-op there.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from collections.abc import Callable

# Arenas the broker's allocations may use: the event loop's main arena and one
# shared by the worker threads. Measured flat RSS under test_load; 1 would make every
# worker wait on the loop thread's arena lock.
MALLOC_ARENA_MAX = 2
# glibc's mallopt parameter number for the arena cap (malloc.h: M_ARENA_MAX).
_M_ARENA_MAX = -8
# An operator's own setting (read by glibc at process start) wins over ours.
ARENA_ENV = "MALLOC_ARENA_MAX"


def _load_glibc() -> ctypes.CDLL | None:
    if platform.libc_ver()[0] != "glibc":
        return None
    name = ctypes.util.find_library("c")
    return ctypes.CDLL(name) if name is not None else None


_GLIBC = _load_glibc()


def _glibc_function(name: str, argtypes: list[type]) -> Callable[..., int] | None:
    function = getattr(_GLIBC, name, None) if _GLIBC is not None else None
    if function is not None:
        function.argtypes, function.restype = argtypes, ctypes.c_int
    return function


_MALLOPT = _glibc_function("mallopt", [ctypes.c_int, ctypes.c_int])
_MALLOC_TRIM = _glibc_function("malloc_trim", [ctypes.c_size_t])


def limit_malloc_arenas(arenas: int = MALLOC_ARENA_MAX) -> int | None:
    """Cap glibc's malloc arenas at `arenas` (process-wide); the cap now in force, or
    None when it is not ours to set (not glibc, or `MALLOC_ARENA_MAX` in the environment).

    Call before worker threads start: arenas that already exist are kept.
    """
    if arenas < 1:
        raise ValueError(f"arenas must be at least 1, not {arenas}")
    if _MALLOPT is None or ARENA_ENV in os.environ:
        return None
    if _MALLOPT(_M_ARENA_MAX, arenas) != 1:
        return None
    return arenas


def malloc_trim() -> bool:
    """Return free heap pages of every arena to the OS; False when not on glibc.

    It walks every arena under its lock: a few ms, so call it after bulk frees, not
    per request.
    """
    if _MALLOC_TRIM is None:
        return False
    _MALLOC_TRIM(0)
    return True
