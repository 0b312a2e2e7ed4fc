"""One broker, both protocols: records/s through the Kafka edge against the native path.

    .venv/bin/python -m bench.kafka_edge [--records 200000] [--bootstrap HOST:PORT]

Starts `tidelog serve` (unless `--bootstrap` names a running one), then produces and
consumes 100-byte records on one partition with confluent-kafka (batches converted at
the Kafka edge, broker/kafka/edge.py) and with Tidelog's own Producer and Consumer (no
conversion), and prints records/s for each. A quick indicator for docs/kafka.md's
storage decision, not the benchmark against Apache Kafka (issue 19 item 5).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import confluent_kafka

import tidelog
from harness.tidelog_server import TidelogServer

VALUE = b"x" * 100
# Records a consume call takes at most, and seconds it waits for them.
CONSUME_BATCH = 10_000
CONSUME_WAIT_S = 5.0
FLUSH_TIMEOUT_S = 120.0


def kafka_produce(bootstrap: str, topic: str, count: int, acks: str) -> float:
    producer = confluent_kafka.Producer(
        {"bootstrap.servers": bootstrap, "acks": acks, "linger.ms": 5, "batch.size": 1 << 20}
    )
    started = time.perf_counter()
    for _ in range(count):
        while True:
            try:
                producer.produce(topic, VALUE, partition=0)
                break
            except BufferError:
                producer.poll(0.01)
    assert producer.flush(FLUSH_TIMEOUT_S) == 0
    return count / (time.perf_counter() - started)


def kafka_consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench", "fetch.max.bytes": 50 << 20,
         "max.partition.fetch.bytes": 8 << 20}
    )  # fmt: skip
    consumer.assign([confluent_kafka.TopicPartition(topic, 0, 0)])
    seen, started = 0, time.perf_counter()
    while seen < count:
        seen += len(consumer.consume(CONSUME_BATCH, CONSUME_WAIT_S))
    rate = count / (time.perf_counter() - started)
    consumer.close()
    return rate


def tidelog_produce(bootstrap: str, topic: str, count: int) -> float:
    with tidelog.Producer(bootstrap, acks=1) as producer:
        started = time.perf_counter()
        for _ in range(count):
            producer.send(topic, VALUE, partition=0)
        producer.flush()
        return count / (time.perf_counter() - started)


def tidelog_consume(bootstrap: str, topic: str, count: int) -> float:
    consumer = tidelog.Consumer(bootstrap_servers=bootstrap)
    part = tidelog.TopicPartition(topic, 0)
    consumer.assign([part])
    consumer.seek_to_beginning(part)
    seen, started = 0, time.perf_counter()
    while seen < count:
        seen += sum(len(records) for records in consumer.poll(1000).values())
    rate = count / (time.perf_counter() - started)
    consumer.close()
    return rate


def run(bootstrap: str, count: int) -> None:
    rows = [
        ("confluent-kafka produce acks=1", kafka_produce(bootstrap, "edge-1", count, "1")),
        ("confluent-kafka consume", kafka_consume(bootstrap, "edge-1", count)),
        ("confluent-kafka produce acks=all", kafka_produce(bootstrap, "edge-all", count, "all")),
        ("Tidelog Producer acks=1", tidelog_produce(bootstrap, "native", count)),
        ("Tidelog Consumer", tidelog_consume(bootstrap, "native", count)),
    ]
    print("| path | records/s |\n|---|---:|")
    for name, rate in rows:
        print(f"| {name} | {rate:,.0f} |")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--bootstrap", help="a running broker (default: start one)")
    args = parser.parse_args(argv)
    if args.bootstrap:
        run(args.bootstrap, args.records)
        return 0
    with tempfile.TemporaryDirectory(prefix="kafka-edge-") as work:
        server = TidelogServer(Path(work))
        try:
            run(f"127.0.0.1:{server.port}", args.records)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
