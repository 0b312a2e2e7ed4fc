"""Benchmark (issue 19): Kafka-protocol throughput of a target, with Kafka's own clients.

A target is a bootstrap address plus a way to start it (`interop.targets`): today the
real Apache Kafka 4.x broker (KRaft, one node, loopback); Tidelog joins once its broker
speaks Kafka's protocol, and `--target kafka,tidelog` then measures both in one run.

For 100 B and 1 KiB records, acks 1 and acks all, on a fresh one-partition topic:

- confluent-kafka (librdkafka) producer: records/s, MB/s, p50/p99 send-to-delivery
  latency under full load; then its consumer reading the same records by assignment;
- Kafka's Java `ProducerPerformance` and `ConsumerPerformance` tools (what
  kafka-producer-perf-test / kafka-consumer-perf-test run), their own figures.

Every phase also reports the broker process's CPU (from /proc) per million records.
MB is 10^6 bytes of record values (as the Java tools count: their MB is 2^20, converted).
Prints one JSON document on stdout; progress and one JSON line per phase on stderr.

    .venv/bin/python -m bench.kafka_peer --target kafka [--quick] [--runs N] [--records N]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from bench.peers._common import json_line, latency_summary_ms, spread
from bench.peers.workloads import process_cpu_s
from harness.process import note
from interop import java_tools
from interop.kafka_dist import kafka_version
from interop.targets import TARGETS, Target, open_target

RECORD_BYTES = (100, 1024)
ACKS = ("1", "all")
# Records per phase: ~2-10 s each on the 2-core machine, long enough to amortise the
# JVM and connection start-up, short enough that the whole run stays near 5 minutes.
RECORDS = {100: 1_000_000, 1024: 300_000}
QUICK_RECORDS = {100: 100_000, 1024: 30_000}
# librdkafka's local queue: when full, produce() raises BufferError and we serve callbacks.
PRODUCER_QUEUE_MESSAGES = 500_000
PRODUCE_BACKOFF_S = 0.001
CONSUME_BATCH = 10_000
PHASE_TIMEOUT_S = 300.0
MB = 1_000_000
MIB = 1 << 20


def _cpu_per_million(cpu_s: float, records: int) -> float:
    return round(cpu_s * 1_000_000 / records, 3) if records else 0.0


def _children_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu_s() -> float:
    times = os.times()
    return times.user + times.system


def confluent_produce(
    bootstrap: str, topic: str, value: bytes, records: int, acks: str
) -> dict[str, Any]:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "queue.buffering.max.messages": PRODUCER_QUEUE_MESSAGES,
        }
    )
    latencies: list[float] = []
    failures: list[Any] = []
    clock = time.perf_counter

    def delivered(err: Any, _msg: Any, sent_at: float) -> None:
        if err is not None:
            failures.append(err)
        latencies.append(clock() - sent_at)

    started = clock()
    for _ in range(records):
        sent_at = clock()
        while True:
            try:
                producer.produce(
                    topic,
                    value,
                    partition=0,
                    on_delivery=lambda e, m, t=sent_at: delivered(e, m, t),
                )
                break
            except BufferError:
                producer.poll(PRODUCE_BACKOFF_S)
        producer.poll(0)
    left = producer.flush(PHASE_TIMEOUT_S)
    elapsed = clock() - started
    if left or failures:
        raise RuntimeError(f"confluent producer: {left} undelivered, errors {failures[:3]}")
    return {"elapsed_s": elapsed, **latency_summary_ms(latencies)}


def confluent_consume(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"{topic}-bench", "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        got = 0
        started = time.perf_counter()
        deadline = started + PHASE_TIMEOUT_S
        while got < records and time.perf_counter() < deadline:
            # Never ask for more than is left: consume() waits its whole timeout for a
            # batch it cannot fill, which would add up to 1 s to the phase.
            for msg in consumer.consume(min(CONSUME_BATCH, records - got), timeout=1.0):
                if msg.error() is not None:
                    raise RuntimeError(f"confluent consumer: {msg.error()}")
                got += 1
        elapsed = time.perf_counter() - started
    finally:
        consumer.close()
    if got < records:
        raise RuntimeError(f"confluent consumer read {got} of {records} records")
    return {"elapsed_s": elapsed}


# The large-batch producer of the issue 35 table: 256 KiB batches, linger 10 ms (Kafka's
# defaults are 16 KiB and 5 ms), so a request carries ~2,500 records of 100 B.
LARGE_BATCHES = {"batch.size": str(256 * 1024), "linger.ms": "10"}


def java_produce(
    bootstrap: str,
    topic: str,
    value_bytes: int,
    records: int,
    acks: str,
    props: dict[str, str] | None = None,
) -> Any:
    perf = java_tools.producer_perf(bootstrap, topic, records, value_bytes, acks, props)
    return {
        "elapsed_s": perf.records / perf.records_per_s,
        "p50_ms": perf.p50_ms,
        "p99_ms": perf.p99_ms,
        "max_ms": perf.max_latency_ms,
    }


def java_consume(bootstrap: str, topic: str, records: int) -> dict[str, Any]:
    perf = java_tools.consumer_perf(bootstrap, topic, records)
    if perf["data.consumed.in.nMsg"] < records:
        raise RuntimeError(f"consumer-perf read {perf['data.consumed.in.nMsg']} of {records}")
    # fetch.time.ms excludes the group join; nMsg.sec includes it (a fixed ~0.1-3 s).
    return {"elapsed_s": perf["fetch.time.ms"] / 1000, "tool_nmsg_per_s": perf["nMsg.sec"]}


def measure(
    target: Target, records: int, value_bytes: int, phase: Callable[[], dict[str, Any]]
) -> dict[str, Any]:
    """Run one phase; add throughput and the broker's (and client's) CPU per M records."""
    broker0, own0, children0 = process_cpu_s(target.pid), _own_cpu_s(), _children_cpu_s()
    result = phase()
    broker_cpu = process_cpu_s(target.pid) - broker0
    client_cpu = (_own_cpu_s() - own0) + (_children_cpu_s() - children0)
    elapsed = result["elapsed_s"]
    return {
        **result,
        "elapsed_s": round(elapsed, 3),
        "records": records,
        "records_per_s": round(records / elapsed),
        "mb_per_s": round(records * value_bytes / elapsed / MB, 2),
        "broker_cpu_s_per_m": _cpu_per_million(broker_cpu, records),
        "client_cpu_s_per_m": _cpu_per_million(client_cpu, records),
    }


Phase = tuple[str, str, Callable[[], dict[str, Any]]]


def _phases(bootstrap: str, base: str, value: bytes, records: int, acks: str) -> list[Phase]:
    """(client, workload, phase) in run order: each consume reads what its produce wrote."""
    mine, javas = f"{base}-c", f"{base}-j"
    return [
        ("confluent-kafka", "produce",
         partial(confluent_produce, bootstrap, mine, value, records, acks)),
        ("confluent-kafka", "consume", partial(confluent_consume, bootstrap, mine, records)),
        ("java-perf", "produce",
         partial(java_produce, bootstrap, javas, len(value), records, acks)),
        ("java-perf", "consume", partial(java_consume, bootstrap, javas, records)),
    ]  # fmt: skip


def bench_target(target: Target, counts: dict[int, int], run: int) -> list[dict[str, Any]]:
    rows = []
    for value_bytes in RECORD_BYTES:
        records = counts[value_bytes]
        value = os.urandom(value_bytes)
        for acks in ACKS:
            base = f"bench-{run}-{value_bytes}-{acks}"
            java_tools.create_topic(target.bootstrap, f"{base}-c", 1)
            java_tools.create_topic(target.bootstrap, f"{base}-j", 1)
            for client, workload, phase in _phases(target.bootstrap, base, value, records, acks):
                row = {
                    "target": target.name,
                    "client": client,
                    "workload": workload,
                    "value_bytes": value_bytes,
                    "acks": acks,
                    "run": run,
                    **measure(target, records, value_bytes, phase),
                }
                note(json_line(**row))
                rows.append(row)
    return rows


FIGURES = ("records_per_s", "mb_per_s", "p50_ms", "p99_ms", "broker_cpu_s_per_m")
PHASE_FIELDS = ("client", "workload", "value_bytes", "acks")


def summarise(
    rows: list[dict[str, Any]],
    fields: tuple[str, ...] = ("target", *PHASE_FIELDS),
    figures: tuple[str, ...] = FIGURES,
) -> list[dict[str, Any]]:
    """Median (min, max) of each figure over the runs of one (target, client, workload,
    size, acks); consume rows carry the acks their records were produced with."""
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        groups.setdefault(tuple(row[f] for f in fields), []).append(row)
    summary = []
    for key, runs in groups.items():
        entry: dict[str, Any] = dict(zip(fields, key, strict=True))
        for name in figures:
            values = [r[name] for r in runs if name in r]
            if values:
                entry[name] = spread(values).to_json()
        summary.append(entry)
    return summary


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="kafka", help=f"comma list of {sorted(TARGETS)}")
    parser.add_argument("--quick", action="store_true", help="a tenth of the records")
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--records", type=int, help="records per phase, for every size")
    args = parser.parse_args(argv)
    counts = QUICK_RECORDS if args.quick else RECORDS
    if args.records:
        counts = dict.fromkeys(RECORD_BYTES, args.records)
    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    for name in args.target.split(","):
        with tempfile.TemporaryDirectory(prefix=f"kafka-peer-{name}-") as tmp:
            note(f"starting target {name} ...")
            with open_target(name, Path(tmp)) as target:
                for run in range(args.runs):
                    rows.extend(bench_target(target, counts, run))
    result = {
        "benchmark": "kafka_peer",
        "kafka_version": kafka_version(),
        "records": counts,
        "runs": args.runs,
        "wall_s": round(time.monotonic() - started, 1),
        "summary": summarise(rows),
        "rows": rows,
    }
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
