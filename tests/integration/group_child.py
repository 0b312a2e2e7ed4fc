"""A group consumer in its own process, for tests that kill it with SIGKILL.

    python group_child.py BOOTSTRAP GROUP TOPIC

It subscribes, then forever: polls a few records, prints them, commits, prints the
commit. Every line is JSON, flushed at once, so the parent knows exactly which records
were consumed after the last acknowledged commit when the process dies.
"""

from __future__ import annotations

import json
import sys
import time

from tidelog.consumer import CommitFailedError, Consumer

POLL_RECORDS = 5
PAUSE_S = 0.02  # a slow consumer, so it is killed mid-stream


def _say(**event: object) -> None:
    print(json.dumps(event), flush=True)


def main(bootstrap: str, group: str, topic: str) -> None:
    consumer = Consumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=2_000,
        heartbeat_interval_ms=200,
        max_poll_interval_ms=3_000,
        max_poll_records=POLL_RECORDS,
    )
    consumer.subscribe(
        [topic], on_assign=lambda tps: _say(assigned=sorted(tp.partition for tp in tps))
    )
    while True:
        batch = consumer.poll(timeout_ms=100)
        records = [[r.partition, r.offset] for rs in batch.values() for r in rs]
        if records:
            _say(consumed=records)
            try:
                consumer.commit()
            except CommitFailedError:
                _say(commit_failed=True)  # a rebalance: the next poll rejoins
            else:
                _say(committed=True)
        time.sleep(PAUSE_S)


if __name__ == "__main__":
    main(*sys.argv[1:4])
