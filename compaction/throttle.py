"""I/O throttling for the cleaner (`log.cleaner.io.max.bytes.per.second`).

Kafka's `Throttler`: count bytes; every `CHECK_INTERVAL_S` compare the observed rate
with the limit and sleep long enough to bring it back down. All cleaner threads share
one throttler, so the limit is for the whole cleaner, as in Kafka. Thread-safe.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from protocol.settings import DOUBLE_MAX

__all__ = ["CHECK_INTERVAL_S", "Throttler"]

# How often the rate is measured: long enough to smooth bursts, short enough to react.
CHECK_INTERVAL_S = 0.3


class Throttler:
    """Sleeps in `maybe_throttle` when bytes go by faster than `max_bytes_per_second`."""

    def __init__(
        self,
        max_bytes_per_second: float,
        *,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.max_bytes_per_second = max_bytes_per_second
        self._monotonic = monotonic
        self._sleep = sleep
        self._lock = threading.Lock()
        self._period_start = monotonic()
        self._observed = 0
        self.slept_s = 0.0

    @property
    def unlimited(self) -> bool:
        # Kafka's default, Double.MAX_VALUE, means unthrottled (so does inf).
        return self.max_bytes_per_second >= DOUBLE_MAX or self.max_bytes_per_second <= 0

    def maybe_throttle(self, nbytes: int) -> None:
        """Account for `nbytes` of I/O; sleep if the rate is over the limit."""
        if self.unlimited:
            return
        with self._lock:
            self._observed += nbytes
            elapsed = self._monotonic() - self._period_start
            if elapsed < CHECK_INTERVAL_S:
                return
            wanted = self._observed / self.max_bytes_per_second
            pause = wanted - elapsed
            self._observed = 0
            self._period_start = self._monotonic()
        if pause > 0:
            self.slept_s += pause
            self._sleep(pause)
            with self._lock:
                self._period_start = self._monotonic()
