"""How late a sleeping process wakes: the machine's own stalls, as context for latency.

Run as a child process: it sleeps 1 ms in a loop and records every wake-up that
comes more than `LATE_S` late, until it gets SIGTERM or SIGINT; then it prints
one JSON line: wake-ups, late wake-ups and the worst delay. On a shared VM the host
can stop a virtual CPU for several milliseconds (seen here: 4-8 ms gaps on an idle
machine); such a stall delays every request in flight at that moment, whatever the
broker does. The probe costs about 1,000 short wake-ups a second.
"""

from __future__ import annotations

import json
import signal
import time

SLEEP_S = 0.001
# A wake-up this late is a stall worth counting (timer slack is ~0.05 ms).
LATE_S = 0.002


def main() -> int:
    stop = False

    def request_stop(_signum: int, _frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    wakeups = late = 0
    worst_s = 0.0
    print("ready", flush=True)
    while not stop:
        started = time.perf_counter()
        time.sleep(SLEEP_S)
        delay = time.perf_counter() - started - SLEEP_S
        wakeups += 1
        if delay > LATE_S:
            late += 1
        worst_s = max(worst_s, delay)
    report = {"wakeups": wakeups, "late_over_2ms": late, "worst_ms": round(worst_s * 1000, 2)}
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
