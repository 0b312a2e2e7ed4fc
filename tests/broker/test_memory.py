"""broker.memory: the malloc arena cap really bounds glibc's arenas, and the broker sets it.

Arenas are per process and never go away, so each probe runs in a fresh interpreter.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import textwrap

import pytest

from broker.memory import ARENA_ENV, MALLOC_ARENA_MAX, limit_malloc_arenas
from tests.conftest import BrokerFactory

glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc has arenas")

# Worker threads alive at once in the probe: more than the cap, fewer than glibc's
# default limit (8 per core) even on one core.
PROBE_THREADS = 6

# Starts PROBE_THREADS threads that each malloc (blocks > 512 bytes bypass pymalloc)
# and stay alive together, then prints how many arenas malloc_info reports.
PROBE = textwrap.dedent(
    """
    import ctypes, sys, tempfile, threading
    from broker.memory import limit_malloc_arenas
    if sys.argv[1] == "capped":
        assert limit_malloc_arenas() is not None
    threads = int(sys.argv[2])
    barrier = threading.Barrier(threads + 1)
    held = []
    def work():
        held.append([bytes(4096) for _ in range(64)])
        barrier.wait()
        barrier.wait()
    workers = [threading.Thread(target=work) for _ in range(threads)]
    for w in workers:
        w.start()
    barrier.wait()
    libc = ctypes.CDLL(None)
    libc.fopen.restype = ctypes.c_void_p
    libc.fopen.argtypes = [ctypes.c_char_p, ctypes.c_char_p]
    libc.malloc_info.argtypes = [ctypes.c_int, ctypes.c_void_p]
    libc.fclose.argtypes = [ctypes.c_void_p]
    with tempfile.NamedTemporaryFile("r") as out:
        stream = libc.fopen(out.name.encode(), b"w")
        libc.malloc_info(0, stream)
        libc.fclose(stream)
        print(out.read().count("<heap nr="))
    barrier.wait()
    for w in workers:
        w.join()
    """
)


def arenas_in_fresh_process(mode: str) -> int:
    env = {k: v for k, v in os.environ.items() if k != ARENA_ENV}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode, str(PROBE_THREADS)],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return int(done.stdout.strip())


@glibc_only
def test_cap_bounds_the_arenas_of_concurrent_threads() -> None:
    # Without the cap each live thread gets an arena of its own: the probe can see them.
    assert arenas_in_fresh_process("default") > MALLOC_ARENA_MAX
    assert arenas_in_fresh_process("capped") <= MALLOC_ARENA_MAX


def test_operator_setting_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ARENA_ENV, "4")
    assert limit_malloc_arenas() is None


def test_cap_must_be_positive() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        limit_malloc_arenas(0)


@glibc_only
def test_broker_caps_arenas_at_start(broker_factory: BrokerFactory) -> None:
    broker = broker_factory()
    expected = "unchanged" if ARENA_ENV in os.environ else MALLOC_ARENA_MAX
    assert broker.events("malloc_arenas")[0]["limit"] == expected
