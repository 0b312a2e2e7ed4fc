"""Benchmark (issue 19 item 5): Tidelog against Apache Kafka, same machine, same run.

Starts both brokers on loopback (`tidelog serve` from a temporary working directory,
Apache Kafka 4.x in KRaft mode, `interop.targets`), then for 100 B and 1 KiB records and
acks 1 and all runs every phase of `bench.kafka_peer` (confluent-kafka produce and
consume, Kafka's ProducerPerformance and ConsumerPerformance) on one broker and at once
on the other, the order alternating from one phase to the next: the machine is shared,
and noise that lands on one phase lands on its twin a few seconds later or earlier.

For each phase: records/s, MB/s, p50/p99 producer delivery latency, broker CPU seconds
per million records (/proc/<pid>/stat before and after), and the Tidelog/Kafka ratio
of each figure taken within the run (throughput > 1 means Tidelog is faster; latency
and CPU > 1 mean Tidelog is slower or costlier). One JSON document on stdout, one JSON
line a phase on stderr. Before run 0 each broker takes and serves `--warmup` records
unmeasured, so the JVM's compiler is not timed. `--profile DIR` samples the Tidelog
broker with py-spy during each of its phases (folded stacks in DIR, top functions in
the JSON).

    .venv/bin/python -m bench.kafka_vs [--quick] [--records N] [--runs N]
        [--targets kafka,tidelog] [--clients confluent-kafka,java-perf]
        [--sizes 100,1024] [--acks 1,all] [--warmup N] [--profile DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from collections.abc import Callable
from contextlib import ExitStack, nullcontext
from functools import partial
from pathlib import Path
from typing import Any

from bench import kafka_peer
from bench.peers._common import json_line
from bench.spy import PySpy, top_frames
from harness.process import note
from harness.tidelog_server import tidelog_version
from interop.targets import Target, open_target

TARGETS = ("kafka", "tidelog")
# java-perf-large: Kafka's ProducerPerformance with 256 KiB batches and linger 10 ms.
CLIENTS = ("confluent-kafka", "java-perf", "java-perf-large")
# Tidelog over Kafka, per figure (the same name in both rows).
RATIO_FIGURES = kafka_peer.FIGURES
ROW_KEYS = (
    "target", "client", "workload", "value_bytes", "acks", "run", "records",
    "elapsed_s", "records_per_s", "mb_per_s", "broker_cpu_s_per_m", "client_cpu_s_per_m",
)  # fmt: skip
# Untimed records each broker takes and serves before run 0 (confluent-kafka, 100 B), so
# Kafka's JIT compiles its hot paths before it is measured (run 0 without it showed 2.8-5.5x
# Kafka's steady CPU per record); 0 in the tests.
WARMUP_RECORDS = 200_000
# Fresh topics a phase pair reads and writes; the admin call waits this long at most.
CREATE_TIMEOUT_S = 60.0

Phase = Callable[[], dict[str, Any]]


def create_topics(bootstrap: str, topics: list[str]) -> None:
    """One-partition topics through confluent-kafka's admin client (no JVM start)."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics([NewTopic(t, 1, 1) for t in topics])
    for future in futures.values():
        future.result(timeout=CREATE_TIMEOUT_S)


def phases(
    bootstrap: str, base: str, value: bytes, records: int, acks: str, clients: list[str]
) -> list[tuple[str, str, Phase]]:
    """(client, workload, phase) in run order; each consume reads its produce's records."""
    runs: dict[str, list[tuple[str, str, Phase]]] = {
        "confluent-kafka": [
            ("produce", partial(kafka_peer.confluent_produce, bootstrap, f"{base}-c", value,
                                records, acks)),
            ("consume", partial(kafka_peer.confluent_consume, bootstrap, f"{base}-c", records)),
        ],
        "java-perf": [
            ("produce", partial(kafka_peer.java_produce, bootstrap, f"{base}-j", len(value),
                                records, acks)),
            ("consume", partial(kafka_peer.java_consume, bootstrap, f"{base}-j", records)),
        ],
        "java-perf-large": [
            ("produce", partial(kafka_peer.java_produce, bootstrap, f"{base}-jl", len(value),
                                records, acks, kafka_peer.LARGE_BATCHES)),
            ("consume", partial(kafka_peer.java_consume, bootstrap, f"{base}-jl", records)),
        ],
    }  # fmt: skip
    return [(client, workload, phase) for client in clients for workload, phase in runs[client]]


def topic_names(base: str, clients: list[str]) -> list[str]:
    suffix = {"confluent-kafka": "c", "java-perf": "j", "java-perf-large": "jl"}
    return [f"{base}-{suffix[c]}" for c in clients]


class Bench:
    """The brokers of one run and how each phase is measured on them."""

    def __init__(self, targets: list[Target], clients: list[str], profile_dir: Path | None) -> None:
        self.targets = targets
        self.clients = clients
        self.profile_dir = profile_dir
        self.rows: list[dict[str, Any]] = []
        self.profiles: list[dict[str, Any]] = []
        self._turn = 0

    def warm_up(self, records: int) -> None:
        """Produce and consume `records` on every broker, unmeasured."""
        for target in self.targets:
            note(f"warming up {target.name} with {records} records ...")
            create_topics(target.bootstrap, ["vs-warmup"])
            value = os.urandom(100)
            kafka_peer.confluent_produce(target.bootstrap, "vs-warmup", value, records, "1")
            kafka_peer.confluent_consume(target.bootstrap, "vs-warmup", records)

    def _ordered(self) -> list[Target]:
        """The targets rotated by one each phase, so neither always goes first."""
        shift = self._turn % len(self.targets)
        self._turn += 1
        return self.targets[shift:] + self.targets[:shift]

    def combination(self, run: int, value_bytes: int, records: int, acks: str) -> None:
        value = os.urandom(value_bytes)
        base = f"vs-{run}-{value_bytes}-{acks}"
        per_target = {}
        for target in self.targets:
            create_topics(target.bootstrap, topic_names(base, self.clients))
            per_target[target.name] = phases(
                target.bootstrap, base, value, records, acks, self.clients
            )
        for step in range(len(per_target[self.targets[0].name])):
            for target in self._ordered():
                client, workload, phase = per_target[target.name][step]
                label = f"{client}-{workload}-{value_bytes}-{acks}-{run}"
                with self._profiler(target, label):
                    measured = kafka_peer.measure(target, records, value_bytes, phase)
                row = {
                    "target": target.name, "client": client, "workload": workload,
                    "value_bytes": value_bytes, "acks": acks, "run": run, **measured,
                }  # fmt: skip
                note(json_line(**row))
                self.rows.append(row)

    def _profiler(self, target: Target, label: str) -> Any:
        if self.profile_dir is None or target.name != "tidelog":
            return nullcontext()
        path = self.profile_dir / f"{label}.folded"
        self.profiles.append({"phase": label, "path": str(path)})
        return PySpy(target.pid, path)


def ratios(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tidelog/Kafka of each figure, per phase and run (both measured in the same run)."""
    by_key: dict[tuple[Any, ...], dict[str, dict[str, Any]]] = {}
    for row in rows:
        key = (row["client"], row["workload"], row["value_bytes"], row["acks"], row["run"])
        by_key.setdefault(key, {})[row["target"]] = row
    out = []
    for (client, workload, size, acks, run), pair in by_key.items():
        if "tidelog" not in pair or "kafka" not in pair:
            continue
        entry: dict[str, Any] = {
            "client": client, "workload": workload, "value_bytes": size, "acks": acks,
            "run": run,
        }  # fmt: skip
        for name in RATIO_FIGURES:
            ours, theirs = pair["tidelog"].get(name), pair["kafka"].get(name)
            if ours is not None and theirs:
                entry[name] = round(ours / theirs, 3)
        out.append(entry)
    return out


def summarise_ratios(per_run: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Median (min, max) of each ratio over the runs of one phase."""
    return kafka_peer.summarise(per_run, kafka_peer.PHASE_FIELDS, RATIO_FIGURES)


def machine() -> dict[str, Any]:
    return {"cpus": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]}


def _csv(text: str) -> list[str]:
    return [item for item in text.split(",") if item]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--targets", default=",".join(TARGETS))
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--sizes", default=",".join(map(str, kafka_peer.RECORD_BYTES)))
    parser.add_argument("--acks", default=",".join(kafka_peer.ACKS))
    parser.add_argument("--quick", action="store_true", help="a tenth of the records")
    parser.add_argument("--records", type=int, help="records per phase, for every size")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--profile", type=Path, help="py-spy the Tidelog broker into DIR")
    parser.add_argument(
        "--warmup", type=int, default=WARMUP_RECORDS, help="untimed records first (0: none)"
    )
    args = parser.parse_args(argv)
    sizes = [int(s) for s in _csv(args.sizes)]
    counts = kafka_peer.QUICK_RECORDS if args.quick else kafka_peer.RECORDS
    counts = {size: args.records or counts.get(size, min(counts.values())) for size in sizes}
    clients = _csv(args.clients)
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown clients {sorted(unknown)}; known: {', '.join(CLIENTS)}")
    started, machine_before = time.monotonic(), machine()
    with ExitStack() as stack:
        targets = []
        for name in _csv(args.targets):
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix=f"vs-{name}-")))
            note(f"starting {name} ...")
            targets.append(stack.enter_context(open_target(name, tmp)))
        bench = Bench(targets, clients, args.profile)
        if args.warmup:
            bench.warm_up(args.warmup)
        for run in range(args.runs):
            for size in sizes:
                for acks in _csv(args.acks):
                    bench.combination(run, size, counts[size], acks)
    per_run = ratios(bench.rows)
    result = {
        "benchmark": "kafka_vs",
        "versions": _versions([t.name for t in targets]),
        "machine": {"before": machine_before, "after": machine()},
        "records": counts,
        "runs": args.runs,
        "warmup_records": args.warmup,
        "wall_s": round(time.monotonic() - started, 1),
        "rows": bench.rows,
        "ratios": per_run,
        "ratio_summary": summarise_ratios(per_run),
        "profiles": [{**p, **top_frames(Path(p["path"]))} for p in bench.profiles],
    }
    print(json.dumps(result, indent=1))
    return 0


def _versions(names: list[str]) -> dict[str, str]:
    versions = {"tidelog": tidelog_version()} if "tidelog" in names else {}
    if "kafka" in names:
        from interop.kafka_dist import kafka_version

        versions["kafka"] = kafka_version()
    return versions


if __name__ == "__main__":
    raise SystemExit(main())
