"""Kafka's windowed rate (`Rate` over `SampledStat`): the rate a quota is checked against.

A rate keeps `samples` windows of `window_ms` each; a value is added to the current
window, a window past its length starts a new one, and windows with no event for
`samples * window_ms` are forgotten. The measured rate divides the kept total by the
time they span, counted as at least `samples - 1` whole windows, so a client's first
burst is not measured over a few milliseconds (Kafka's `Rate.windowSize`). What a
client over its quota must wait is the time that brings the rate back to the bound
if it sends nothing more (Kafka's `QuotaUtils.throttleTime`).
"""

from __future__ import annotations

from dataclasses import dataclass

# Kafka's quota.window.num and quota.window.size.seconds defaults.
QUOTA_SAMPLES = 11
QUOTA_WINDOW_MS = 1000


@dataclass(slots=True)
class _Sample:
    start_ms: float
    last_ms: float
    value: float = 0.0


class SampledRate:
    """A rate per second over `samples` windows of `window_ms` (times in milliseconds)."""

    __slots__ = ("_count", "_current", "_samples", "_window_ms")

    def __init__(self, samples: int = QUOTA_SAMPLES, window_ms: int = QUOTA_WINDOW_MS) -> None:
        self._samples: list[_Sample] = []
        self._current = 0
        # One more than the windows measured: the one overlapping the measured span's start.
        self._count = samples + 1
        self._window_ms = window_ms

    @property
    def idle_after_ms(self) -> float:
        """How long without an event before everything this rate holds is forgotten."""
        return (self._count - 1) * self._window_ms

    def last_event_ms(self) -> float:
        return max((s.last_ms for s in self._samples), default=float("-inf"))

    def record(self, value: float, now_ms: float) -> None:
        self._purge(now_ms)
        if not self._samples:
            self._samples.append(_Sample(now_ms, now_ms))
        sample = self._samples[self._current]
        if now_ms - sample.start_ms >= self._window_ms:
            self._current = (self._current + 1) % self._count
            if self._current >= len(self._samples):
                self._samples.append(_Sample(now_ms, now_ms))
            else:
                self._samples[self._current] = _Sample(now_ms, now_ms)
            sample = self._samples[self._current]
        sample.value += value
        sample.last_ms = now_ms

    def window_ms(self, now_ms: float) -> float:
        """The span the rate is measured over (Kafka's `Rate.windowSize`)."""
        self._purge(now_ms)
        oldest = min((s.start_ms for s in self._samples), default=now_ms)
        elapsed = now_ms - oldest
        whole = int(elapsed // self._window_ms)
        least = self._count - 2  # samples - 1 whole windows
        if whole < least:
            elapsed += (least - whole) * self._window_ms
        return max(elapsed, 1.0)

    def measure(self, now_ms: float) -> float:
        """Units per second now."""
        window = self.window_ms(now_ms)
        return sum(s.value for s in self._samples) * 1000.0 / window

    def throttle_ms(self, bound: float, now_ms: float) -> int:
        """How long to wait for the rate to come back to `bound` (0 when within it)."""
        measured = self.measure(now_ms)
        if measured <= bound:
            return 0
        return round((measured - bound) / bound * self.window_ms(now_ms))

    def _purge(self, now_ms: float) -> None:
        expire = (self._count - 1) * self._window_ms
        for i, sample in enumerate(self._samples):
            if now_ms - sample.last_ms >= expire:
                self._samples[i] = _Sample(now_ms, now_ms)
