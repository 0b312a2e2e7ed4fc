"""Event-loop lateness: a task that sleeps a fixed period and records how late it woke.

Anything that blocks the trio thread (a large read, an fsync, a long validation)
delays every connection; this is the one number that shows it. Kafka has no direct
equivalent; Node's `eventLoopUtilization` and asyncio's debug slow-callback warnings
are the models.
"""

from __future__ import annotations

from collections.abc import Callable

import trio

from broker.logging import get_logger

log = get_logger(component="heartbeat")

# Often enough to catch stalls of a few ms, rare enough to cost nothing measurable.
HEARTBEAT_PERIOD_S = 0.1
# A stall this long is worth a log line, not just a histogram sample.
STALL_WARNING_S = 1.0


async def run_heartbeat(
    observe: Callable[[float], None], period_s: float = HEARTBEAT_PERIOD_S
) -> None:
    """Forever: sleep `period_s`, then report how much later than asked it woke."""
    while True:
        due = trio.current_time() + period_s
        await trio.sleep_until(due)
        lateness_s = max(trio.current_time() - due, 0.0)
        observe(lateness_s)
        if lateness_s >= STALL_WARNING_S:
            log.warning("event_loop_stalled", lateness_s=round(lateness_s, 3))
