"""Benchmark: one retention pass over many partitions with nothing to delete.

Issue 5's goal: a pass over 10,000 partitions that deletes nothing takes < 100 ms
(metadata only: the rules read in-memory sizes, timestamps and offsets, plus one
`stat` per segment for the mtime fallback; no segment data is read).

Builds a real data directory (10 topics x 1,000 partitions, each partition one
fresh 1-record segment, retention.ms and retention.bytes set so both rules are
evaluated), then times `RetentionTask.run_once` a few times and prints JSON: the
first pass (which stats every segment once) and the steady-state passes after it.

    .venv/bin/python -m bench.retention_bench [--quick] [--partitions N] [--repeat R]

One segment per partition, and fewer partitions than asked when the open-file
limit is too low (each segment holds three descriptors); the JSON then says so
and scales the time to 10,000 partitions (`pass_ms_per_10k_partitions`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

from protocol.batch import encode_batch
from retention.task import RetentionTask
from storage.manager import LogManager

GOAL_MS = 100.0
GOAL_PARTITIONS = 10_000
FDS_PER_SEGMENT = 3
FD_HEADROOM = 256  # descriptors for the interpreter, the data dir lock and checkpoints
PARTITIONS_PER_TOPIC = 1000
TOPIC_CONFIG = {
    "retention.ms": 7 * 24 * 3_600_000,
    "retention.bytes": 1 << 30,
    "segment.index.bytes": 4096,
}


def build(data_dir: Path, partitions: int) -> LogManager:
    manager = LogManager(data_dir)
    manager.open()
    now_ms = time.time_ns() // 1_000_000
    record = encode_batch([(b"key", b"v" * 100, None, now_ms)])
    remaining, index = partitions, 0
    while remaining > 0:
        count = min(PARTITIONS_PER_TOPIC, remaining)
        topic = f"bench-{index}"
        manager.create_topic(topic, count, TOPIC_CONFIG)
        for p in range(count):
            manager.get_log(topic, p).append(record)
        remaining -= count
        index += 1
    return manager


def fit_partitions(wanted: int) -> int:
    """As many of `wanted` partitions as the open-file limit allows (raising the soft limit).

    Each open segment holds three descriptors: the `.log` file and one per index
    memory map (Python's mmap keeps a duplicate of the file descriptor).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return min(wanted, (hard - FD_HEADROOM) // FDS_PER_SEGMENT)


def run(partitions: int, repeat: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="tidelog-retention-bench-") as tmp:
        started = time.perf_counter()
        manager = build(Path(tmp) / "data", partitions)
        build_s = time.perf_counter() - started
        try:
            task = RetentionTask(manager)
            durations_ms = []
            cpu_ms = []
            for _ in range(repeat + 1):
                cpu_started = time.process_time()
                result = task.run_once()
                cpu_ms.append((time.process_time() - cpu_started) * 1000)
                assert result.failures == 0, "a partition failed: see the log"
                assert result.segments_deleted == 0, "the bench expects nothing to delete"
                assert result.partitions_checked == partitions
                durations_ms.append(result.duration_s * 1000)
        finally:
            manager.close()
    # The first pass reads every segment's metadata (one stat each); later passes reuse
    # it for partitions whose fingerprint did not change (retention/task.py).
    first_ms, steady_ms = durations_ms[0], durations_ms[1:]
    median_ms = statistics.median(steady_ms)
    # CPU time of the pass (it is single-threaded): what the pass costs when the
    # machine is shared and wall time includes waiting for a core.
    steady_cpu_ms = statistics.median(cpu_ms[1:])
    return {
        "bench": "retention_pass_nothing_to_delete",
        "partitions": partitions,
        "segments_per_partition": 1,
        "repeat": repeat,
        "first_pass_ms": round(first_ms, 2),
        "pass_ms_min": round(min(steady_ms), 2),
        "pass_ms_median": round(median_ms, 2),
        "pass_ms_max": round(max(steady_ms), 2),
        "per_partition_us": round(median_ms * 1000 / partitions, 2),
        # Only differs from pass_ms_median when the fd limit capped the partition count.
        "pass_ms_per_10k_partitions": round(median_ms * GOAL_PARTITIONS / partitions, 2),
        "first_pass_cpu_ms": round(cpu_ms[0], 2),
        "pass_cpu_ms_median": round(steady_cpu_ms, 2),
        "pass_cpu_ms_per_10k_partitions": round(steady_cpu_ms * GOAL_PARTITIONS / partitions, 2),
        "goal_ms": GOAL_MS,
        "goal_met": median_ms * GOAL_PARTITIONS / partitions < GOAL_MS,
        "build_s": round(build_s, 2),
        "python": platform.python_version(),
        "machine": platform.machine(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--partitions", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1,000 partitions, 3 passes")
    args = parser.parse_args(argv)
    if args.quick:
        args.partitions, args.repeat = 1000, 3
    # The pass logs one line per run; keep the bench output to its JSON line.
    import structlog

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(40))
    partitions = fit_partitions(args.partitions)
    load_before = os.getloadavg()[0]
    result = run(partitions, args.repeat)
    # The machine may be shared: say how busy it was.
    result["load_average_1m"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
    result["partitions_requested"] = args.partitions
    result["open_files_limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    json.dump(result, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
