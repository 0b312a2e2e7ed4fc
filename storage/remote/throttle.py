"""Upload bandwidth: one token bucket in bytes per second, shared by every upload.

boto3 reports bytes as they go out (`put_file`'s progress callback, in the uploading
worker thread); `TokenBucket.consume` takes that many tokens and sleeps that thread
while the bucket is in debt, so the broker's uploads together average at most `rate`
bytes/s with bursts of at most `burst_bytes`. Sleeping happens only in worker threads,
never on the event loop. Thread-safe. The clock and the sleep are injectable (tests).

`stop()` makes every sleeping or later `consume` raise `UploadStopped`, so a shutdown
does not wait for a throttled upload to trickle out.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

__all__ = ["TokenBucket", "UploadStopped"]

# Longest single sleep: a stop is noticed within this long.
SLEEP_SLICE_S = 0.1


class UploadStopped(Exception):
    """The broker is shutting down: the upload in progress gives up (it is retried
    from scratch, under a new segment id, at the next start)."""


class TokenBucket:
    """`rate_bytes_per_s` tokens a second, at most `burst_bytes` saved up; a rate of
    None is unlimited (consume only checks for a stop)."""

    def __init__(
        self,
        rate_bytes_per_s: int | None,
        burst_bytes: int | None = None,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if rate_bytes_per_s is not None and rate_bytes_per_s < 1:
            raise ValueError(f"rate must be >= 1 byte/s, got {rate_bytes_per_s}")
        self.rate = rate_bytes_per_s
        # One second's worth by default: smooth enough, and multipart chunks fit.
        self.burst = burst_bytes if burst_bytes is not None else (rate_bytes_per_s or 0)
        self._clock = clock
        self._sleep = sleep
        self._lock = threading.Lock()
        self._tokens = float(self.burst)
        self._stamp = clock()
        self._stopped = threading.Event()
        self.throttled_s = 0.0  # total time uploads slept here (statistics)

    def stop(self) -> None:
        self._stopped.set()

    def consume(self, nbytes: int) -> None:
        """Take `nbytes` tokens; sleep until the bucket is out of debt."""
        if self._stopped.is_set():
            raise UploadStopped("upload stopped: the broker is shutting down")
        if self.rate is None or nbytes <= 0:
            return
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._stamp) * self.rate)
            self._stamp = now
            self._tokens -= nbytes
            wait_s = -self._tokens / self.rate if self._tokens < 0 else 0.0
        while wait_s > 0:
            if self._stopped.is_set():
                raise UploadStopped("upload stopped: the broker is shutting down")
            step = min(wait_s, SLEEP_SLICE_S)
            self._sleep(step)
            self.throttled_s += step
            wait_s -= step
