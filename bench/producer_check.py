"""Benchmark: what the idempotent producer check costs on the append path.

`Log.append` of the same batches with and without producer fields, in one process,
rounds interleaved so a noisy machine slows both alike; batches of 1, 10 and 1,000
records of 100-byte values (1,000 is `bench.produce_fetch`'s batch). Batches are
encoded before the timed region (each idempotent one with its own sequence), so the
numbers are the broker's: validation, the producer check, offsets, one write.
Also the check alone (`begin_append` + `check` + `commit`), without the log, and
with `--broker-rounds N`, end to end: `tidelog serve` and one `Producer` sending
1,000-record batches with `acks: -1`, idempotence on and off in turn, N rounds
(`bench.produce_fetch`'s rate; interleaved, so the VM's drifting speed hits both).

    .venv/bin/python -m bench.producer_check [--quick] [--broker-rounds 10]

Prints one JSON document: per batch size, the median microseconds per append of
each kind over the rounds, and the difference.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import structlog

from protocol.batch import encode_batch
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.files import DeletionQueue
from storage.log import Log
from storage.producer_state import ProducerState
from storage.recovery import open_log

VALUE = b"x" * 100
NOW_MS = int(time.time() * 1000)


def _log(directory: Path) -> Log:
    return open_log(
        directory,
        "bench",
        0,
        LogConfig(segment_bytes=2**31 - 1),
        io=FileIO(),
        clock_ms=lambda: NOW_MS,
        deletion_queue=DeletionQueue(),
        recovery_point=None,
        log_start_offset=None,
        clean=True,
    )


def _batches(records: int, count: int, producer_id: int, first: int = 0) -> list[bytes]:
    """`count` batches; idempotent ones numbered from batch number `first` on."""
    rows = [(None, VALUE, None, NOW_MS)] * records
    if producer_id < 0:
        return [encode_batch(rows)] * count
    return [
        encode_batch(
            rows,
            producer_id=producer_id,
            producer_epoch=0,
            base_sequence=(first + i) * records % 2**31,
        )
        for i in range(count)
    ]


def _append_us(log: Log, batches: list[bytes]) -> float:
    started = time.perf_counter()
    for batch in batches:
        log.append(batch)
    return (time.perf_counter() - started) / len(batches) * 1e6


def measure_append(records: int, appends: int, rounds: int, root: Path) -> dict[str, float]:
    plain_log, idem_log = _log(root / f"plain-{records}"), _log(root / f"idem-{records}")
    plain: list[float] = []
    idem: list[float] = []
    plain_batches = _batches(records, appends, -1)
    for r in range(rounds):
        idem_batches = _batches(records, appends, 7, first=r * appends)
        plain.append(_append_us(plain_log, plain_batches))
        idem.append(_append_us(idem_log, idem_batches))
    plain_log.close()
    idem_log.close()
    p, i = statistics.median(plain), statistics.median(idem)
    return {
        "plain_us_per_batch": round(p, 2),
        "idempotent_us_per_batch": round(i, 2),
        "difference_us": round(i - p, 2),
        "difference_pct": round((i - p) / p * 100, 2),
    }


def measure_check(iterations: int) -> dict[str, float]:
    state = ProducerState()
    started = time.perf_counter()
    for i in range(iterations):
        pending = state.begin_append()
        pending.check(7, 0, i * 1000 % 2**31, 999, NOW_MS, i * 1000)
        state.commit(pending, i * 1000 + 1000)
    idem = (time.perf_counter() - started) / iterations * 1e6
    started = time.perf_counter()
    for i in range(iterations):
        pending = state.begin_append()
        pending.check(-1, -1, -1, 999, NOW_MS, i * 1000)
        state.commit(pending, i * 1000 + 1000)
    plain = (time.perf_counter() - started) / iterations * 1e6
    return {"idempotent_us": round(idem, 3), "not_idempotent_us": round(plain, 3)}


def measure_broker(rounds: int, batches: int) -> dict[str, object]:
    """acks=-1 produce records/s with idempotence on and off, rounds interleaved."""
    from bench.produce_fetch import BrokerChild, produce_rate
    from tidelog.client import Client

    root = Path(tempfile.mkdtemp(prefix="producer-check-broker-"))
    broker = BrokerChild(root / "data")
    runs: dict[bool, list[float]] = {True: [], False: []}
    try:
        with Client(broker.bootstrap) as admin:
            for r in range(rounds):
                for idempotent in (True, False):
                    topic = f"t{r}-{int(idempotent)}"
                    admin.create_topic(topic, 1)
                    runs[idempotent].append(
                        produce_rate(broker.bootstrap, topic, batches, -1, idempotent=idempotent)
                    )
                    admin.delete_topic(topic)  # recycled page cache for the next run
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)
    on, off = statistics.median(runs[True]), statistics.median(runs[False])
    return {
        "idempotent_records_per_s": round(on),
        "not_idempotent_records_per_s": round(off),
        "ratio": round(on / off, 3),
        "runs_idempotent": [round(x) for x in runs[True]],
        "runs_not_idempotent": [round(x) for x in runs[False]],
        "batches_per_run": batches,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer appends and rounds")
    parser.add_argument(
        "--broker-rounds", type=int, default=0, help="end-to-end acks=-1 rounds (0: none)"
    )
    args = parser.parse_args(argv)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    rounds = 3 if args.quick else 7
    root = Path(tempfile.mkdtemp(prefix="producer-check-"))
    try:
        sizes = {1: 4000, 10: 2000, 1000: 150}
        result = {
            "append": {
                f"{records}_records": measure_append(
                    records, appends // (4 if args.quick else 1), rounds, root
                )
                for records, appends in sizes.items()
            },
            "check_alone": measure_check(20_000 if args.quick else 200_000),
            "broker_acks_all": (
                measure_broker(args.broker_rounds, 200) if args.broker_rounds else None
            ),
            "rounds": rounds,
            "machine": {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "load_average_1m": round(os.getloadavg()[0], 2),
            },
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)
    json.dump(result, sys.stdout, indent=2)
    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
