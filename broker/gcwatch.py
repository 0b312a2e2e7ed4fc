"""Garbage-collector pauses: how long each collection stopped every thread.

A full (generation 2) collection walks every tracked object while holding the
GIL, so on a large heap it stalls the event loop like any blocking call. The
lateness heartbeat shows that something blocked; this says when it was the GC,
the way a JVM's GC log does for Kafka.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

from broker.logging import get_logger

log = get_logger(component="gc")

# A pause this long is worth a log line of its own, not only a histogram sample.
GC_PAUSE_WARNING_S = 0.05


class GcWatch:
    """A `gc.callbacks` hook timing each collection; `close()` removes it."""

    def __init__(self, observe: Callable[[int, float], None]) -> None:
        self._observe = observe
        self._started: float | None = None
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        if self._started is None:
            return
        pause_s = time.perf_counter() - self._started
        self._started = None
        generation = int(info["generation"])
        self._observe(generation, pause_s)
        if pause_s >= GC_PAUSE_WARNING_S:
            log.warning(
                "gc_pause",
                generation=generation,
                pause_s=round(pause_s, 4),
                collected=info.get("collected"),
            )

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)
