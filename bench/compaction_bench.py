"""Benchmark: clean a dirty compacted log, and the offset map against a plain dict.

Issue 6's goals on this 2-core machine: clean a 1 GiB dirty log with 1% distinct keys
at >= 1,000,000 records/s and >= 100 MB/s (both passes over the dirty bytes
counted once: records and bytes of the log divided by the cleaning's wall time),
offset-map memory <= 32 bytes per distinct key, and event-loop lateness < 20 ms
while the cleaning runs in a worker thread (a trio heartbeat task that sleeps
HEARTBEAT_MS at a time and records how late it wakes; the same heartbeat first
runs alone for BASELINE_S, so the machine's own scheduling noise is reported
beside it).

The log is built through `storage.Log.append` from a few thousand pre-encoded
batches (random keys from the key set, VALUE_BYTES values), appended round-robin,
so building costs about one append per batch. The dedupe buffer is sized for the
key count (`log.cleaner.dedupe.buffer.size` = keys / load factor x 24 bytes), the
way an operator sizes it; the map section compares the numpy map with a dict of
digests at the same number of keys.

    .venv/bin/python -m bench.compaction_bench [--quick] [--size-mib N]

Prints one JSON document on stdout; progress on stderr.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import math
import os
import random
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

import numpy as np
import structlog
import trio

from compaction.cleaner import Cleaner
from compaction.config import CleanerConfig
from compaction.manager import CleanerManager
from compaction.offset_map import ENTRY_BYTES, OffsetMap
from compaction.throttle import Throttler
from protocol.batch import encode_batch
from storage.config import LogConfig
from storage.fileio import FileIO
from storage.manager import LogManager

GOAL_RECORDS_PER_S = 1_000_000
GOAL_MB_PER_S = 100.0
GOAL_MAP_BYTES_PER_KEY = 32.0
GOAL_LATENESS_MS = 20.0
HEARTBEAT_MS = 5.0
# How long the heartbeat runs alone first, to measure the machine's own scheduling noise.
BASELINE_S = 3.0
VALUE_BYTES = 100
RECORDS_PER_BATCH = 100
TEMPLATE_BATCHES = 3000
DISTINCT_FRACTION = 0.01
LOAD_FACTOR = 0.9
SEGMENT_BYTES = 256 * 1024 * 1024
MAP_KEYS = 100_000


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def record_bytes_estimate() -> int:
    sample = encode_batch([(b"key-%08d" % 1, b"v" * VALUE_BYTES, None, 0)] * RECORDS_PER_BATCH)
    return len(sample) // RECORDS_PER_BATCH


def build_log(data_dir: Path, size_bytes: int, rng: random.Random) -> tuple[LogManager, int, int]:
    """A compacted log of about `size_bytes`; returns (manager, records, distinct keys)."""
    records_target = size_bytes // record_bytes_estimate()
    keys = max(int(records_target * DISTINCT_FRACTION), 1)
    now_ms = time.time_ns() // 1_000_000
    templates = []
    used: set[int] = set()
    for _ in range(TEMPLATE_BATCHES):
        picks = [rng.randrange(keys) for _ in range(RECORDS_PER_BATCH)]
        used.update(picks)
        rows = [(b"key-%08d" % k, os.urandom(VALUE_BYTES // 2).hex().encode(), None, now_ms)
                for k in picks]  # fmt: skip
        templates.append(encode_batch(rows))
    manager = LogManager(data_dir, LogConfig())
    manager.open()
    manager.create_topic(
        "bench",
        1,
        {
            "cleanup.policy": "compact",
            "segment.bytes": SEGMENT_BYTES,
            "min.cleanable.dirty.ratio": 0,
        },
    )
    log = manager.get_log("bench", 0)
    written = 0
    i = 0
    started = time.perf_counter()
    while written < size_bytes:
        chunk = b"".join(templates[(i + j) % TEMPLATE_BATCHES] for j in range(10))
        log.append(chunk)
        written += len(chunk)
        i += 10
    log.roll()
    progress(
        f"built {written / 2**20:.0f} MiB, {log.log_end_offset} records, {len(used)} keys "
        f"in {time.perf_counter() - started:.1f} s"
    )
    return manager, log.log_end_offset, len(used)


async def clean_with_heartbeat(
    manager: CleanerManager, cleaner: Cleaner
) -> tuple[tuple[object, float], list]:
    """Run one cleaning in a worker thread while a heartbeat measures loop lateness.

    Returns ((result, the worker thread's CPU seconds), heartbeat lateness samples).
    """
    lateness_ms: list[float] = []
    result: list[object] = []

    async def heartbeat() -> None:
        while True:
            planned = trio.current_time() + HEARTBEAT_MS / 1000
            await trio.sleep_until(planned)
            lateness_ms.append((trio.current_time() - planned) * 1000)

    def timed() -> tuple[object, float]:
        started = time.thread_time()
        outcome = manager.clean_one(cleaner)
        return outcome, time.thread_time() - started

    async with trio.open_nursery() as nursery:
        nursery.start_soon(heartbeat)
        result.append(await trio.to_thread.run_sync(timed))
        nursery.cancel_scope.cancel()
    return result[0], lateness_ms


async def idle_heartbeat(duration_s: float) -> list[float]:
    """Lateness samples with nothing else running: the machine's own noise floor."""
    lateness_ms: list[float] = []
    end = trio.current_time() + duration_s
    while trio.current_time() < end:
        planned = trio.current_time() + HEARTBEAT_MS / 1000
        await trio.sleep_until(planned)
        lateness_ms.append((trio.current_time() - planned) * 1000)
    return lateness_ms


def bench_cleaning(size_bytes: int, seed: int) -> dict[str, object]:
    rng = random.Random(seed)
    with tempfile.TemporaryDirectory(prefix="tidelog-compaction-bench-") as tmp:
        manager, records, keys = build_log(Path(tmp), size_bytes, rng)
        log = manager.get_log("bench", 0)
        dirty_bytes = log.size_bytes
        map_bytes = math.ceil(keys / LOAD_FACTOR * ENTRY_BYTES * 1.01) + 1024
        config = CleanerConfig(dedupe_buffer_bytes=map_bytes, min_map_bytes=0)
        cleaner = Cleaner(config, Throttler(math.inf))
        cleaners = CleanerManager(
            Path(tmp), manager.all_logs, io=FileIO(), clock_ms=lambda: time.time_ns() // 10**6
        )
        baseline = sorted(trio.run(idle_heartbeat, BASELINE_S))
        gc.collect()
        started = time.perf_counter()
        (result, cpu_s), lateness = trio.run(clean_with_heartbeat, cleaners, cleaner)
        duration_s = time.perf_counter() - started
        assert result is not None, "nothing was cleaned"
        survivors = log.size_bytes
        manager.close()
    lateness_sorted = sorted(lateness)
    return {
        "log_bytes": dirty_bytes,
        "records": records,
        "distinct_keys": keys,
        "duration_s": round(duration_s, 3),
        "records_per_s": round(records / duration_s),
        "mb_per_s": round(dirty_bytes / duration_s / 1e6, 1),
        "cleaner_thread_cpu_s": round(cpu_s, 3),
        "records_per_cpu_s": round(records / cpu_s),
        "mb_per_cpu_s": round(dirty_bytes / cpu_s / 1e6, 1),
        "load_average_1m": round(os.getloadavg()[0], 2),
        "bytes_read": result.bytes_read,
        "bytes_written": result.bytes_written,
        "bytes_after": survivors,
        "records_kept": result.records_kept,
        "records_removed": result.records_removed,
        "map_full": result.map_full,
        "map_bytes": result.map_bytes,
        "map_entries": result.map_entries,
        "map_bytes_per_distinct_key": round(result.map_bytes / keys, 2),
        "map_utilization": round(result.map_utilization, 3),
        "heartbeats": len(lateness),
        "loop_lateness_ms_p50": round(lateness_sorted[len(lateness) // 2], 2),
        "loop_lateness_ms_p99": round(lateness_sorted[int(len(lateness) * 0.99)], 2),
        "loop_lateness_ms_max": round(lateness_sorted[-1], 2),
        "idle_loop_lateness_ms_p99": round(baseline[int(len(baseline) * 0.99)], 2),
        "idle_loop_lateness_ms_max": round(baseline[-1], 2),
    }


def bench_map(keys: int) -> dict[str, object]:
    """Put and get `keys` distinct digests: the numpy map against a dict of digests.

    Both use the same salted BLAKE2b-128 digests (hashing timed once, separately);
    the dict's memory is measured with tracemalloc in a second, untimed build.
    """
    names = [b"key-%010d" % i for i in range(keys)]
    offsets = np.arange(keys, dtype=np.int64)
    omap = OffsetMap(math.ceil(keys / LOAD_FACTOR * ENTRY_BYTES) + ENTRY_BYTES * 64, LOAD_FACTOR)
    started = time.perf_counter()
    digests = omap.digest_keys(names)
    digest_s = time.perf_counter() - started
    started = time.perf_counter()
    omap.put_digests(digests, offsets, distinct=True)
    put_s = time.perf_counter() - started
    started = time.perf_counter()
    got = omap.get_digests(digests)
    get_s = time.perf_counter() - started
    assert (got == offsets).all()

    salt = os.urandom(16)
    raw = [hashlib.blake2b(k, digest_size=16, key=salt).digest() for k in names]
    values = offsets.tolist()
    started = time.perf_counter()
    table = dict(zip(raw, values, strict=True))
    dict_put_s = time.perf_counter() - started
    started = time.perf_counter()
    looked = list(map(table.get, raw))
    dict_get_s = time.perf_counter() - started
    assert looked == values
    del table
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    # Fresh int objects, as a map filled from decoded records would hold.
    table = {
        hashlib.blake2b(k, digest_size=16, key=salt).digest(): o + 1
        for k, o in zip(names, values, strict=True)
    }
    dict_bytes = tracemalloc.get_traced_memory()[0] - base
    assert len(table) == keys
    tracemalloc.stop()
    per_key_us = 1e6 / keys
    return {
        "keys": keys,
        "digest_us_per_key": round(digest_s * per_key_us, 3),
        "numpy_put_us_per_key": round(put_s * per_key_us, 3),
        "numpy_get_us_per_key": round(get_s * per_key_us, 3),
        "numpy_bytes_per_key": round(omap.memory_bytes / keys, 1),
        "dict_put_us_per_key": round(dict_put_s * per_key_us, 3),
        "dict_get_us_per_key": round(dict_get_s * per_key_us, 3),
        "dict_bytes_per_key": round(dict_bytes / keys, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64 MiB log, 20,000-key map")
    parser.add_argument("--size-mib", type=int, default=None)
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args(argv)
    # Storage and cleaner events go to stderr: stdout carries only the JSON document.
    structlog.configure(logger_factory=structlog.PrintLoggerFactory(sys.stderr))
    size_mib = args.size_mib or (64 if args.quick else 1024)
    progress("offset map: numpy vs dict")
    map_result = bench_map(20_000 if args.quick else MAP_KEYS * 10)
    progress(f"cleaning a {size_mib} MiB log")
    cleaning = bench_cleaning(size_mib * 2**20, args.seed)
    goals = {
        "records_per_s": cleaning["records_per_s"] >= GOAL_RECORDS_PER_S,
        "mb_per_s": cleaning["mb_per_s"] >= GOAL_MB_PER_S,
        "map_bytes_per_distinct_key": cleaning["map_bytes_per_distinct_key"]
        <= GOAL_MAP_BYTES_PER_KEY,
        "loop_lateness_ms_max": cleaning["loop_lateness_ms_max"] < GOAL_LATENESS_MS,
    }
    print(
        json.dumps(
            {
                "benchmark": "compaction",
                "command": "python -m bench.compaction_bench"
                + (" --quick" if args.quick else "")
                + (f" --size-mib {args.size_mib}" if args.size_mib else ""),
                "cleaning": cleaning,
                "offset_map": map_result,
                "goals_met": goals,
            },
            indent=2,
        )
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
