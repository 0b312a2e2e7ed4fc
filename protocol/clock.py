"""The wall clock, defined once and passed in.

Components take a `clock_ms` argument instead of reading the time themselves, so
tests drive time instead of sleeping (docs/style.md item 12); `broker/server.py` picks this
clock once and hands it to storage, retention, the cleaner and the handlers. It
lives in `protocol/`, the lowest layer, so every package can default to it.
"""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["ClockMs", "wall_clock_ms"]

# Milliseconds since the epoch, the unit of every Kafka timestamp.
ClockMs = Callable[[], int]


def wall_clock_ms() -> int:
    """Now, in epoch milliseconds (integer arithmetic: no float rounding)."""
    return time.time_ns() // 1_000_000
