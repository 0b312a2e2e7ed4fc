"""Tidelog on the same footing as the peers: `tidelog serve` on loopback, its own clients.

`TidelogClient` uses `tidelog.producer.Producer` (`send_batch` of 1,000 records,
`acks: 1`, or `acks: -1` for the durable workloads) and `tidelog.consumer.Consumer`
(`poll` from the beginning), the way an application would.
"""

from __future__ import annotations

import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Records per `send_batch` (one batch, one CRC, one msgpack call).
BATCH_RECORDS = 1000
# Kafka's max.request.size (the Producer's default): a bigger request only coarsens the
# pipeline (measured: 1.1M rec/s with 8 MiB requests, 1.5-1.9M with 1 MiB); a batch
# larger than this still goes alone in its own request.
MAX_REQUEST_BYTES = 1 << 20
PARTITION_FETCH_BYTES = 8 << 20
FETCH_MAX_BYTES = 64 << 20
# Produce requests pipelined per connection (the Producer's own default is 5).
IN_FLIGHT_REQUESTS = 5


class TidelogClient:
    """Tidelog's own Producer and Consumer (see module doc)."""

    system = "tidelog"
    client = "tidelog"

    def __init__(self, port: int) -> None:
        from tidelog.client import Client
        from tidelog.producer import Producer

        self.bootstrap = f"127.0.0.1:{port}"
        self.admin = Client(self.bootstrap)
        self._acks = 1
        self._single = Producer(self.bootstrap, acks=1, linger_ms=0)

    def setup(self, stream: str, durable: bool) -> None:
        self.admin.create_topic(stream, 1)
        self._acks = -1 if durable else 1

    def produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        from tidelog.producer import Producer

        chunk = values[: min(BATCH_RECORDS, total)]
        done = 0
        with Producer(
            self.bootstrap,
            acks=self._acks,
            linger_ms=0,
            max_request_size=MAX_REQUEST_BYTES,
            max_in_flight_requests=IN_FLIGHT_REQUESTS,
        ) as producer:
            futures = []
            while done < total and time.perf_counter() < deadline:
                shift = (done // len(chunk) * 7) % len(chunk)
                futures.append(
                    producer.send_batch(stream, chunk[shift:] + chunk[:shift], partition=0)
                )
                done += len(chunk)
            producer.flush()
            for future in futures:
                future.result()  # raises the broker's error, if any
        return done

    def consume(self, stream: str, total: int) -> int:
        from tidelog.consumer import Consumer, TopicPartition

        with Consumer(
            bootstrap_servers=self.bootstrap,
            max_partition_fetch_bytes=PARTITION_FETCH_BYTES,
            fetch_max_bytes=FETCH_MAX_BYTES,
        ) as consumer:
            tp = TopicPartition(stream, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got = 0
            while got < total:
                batch = consumer.poll(timeout_ms=1000, max_records=1 << 20)
                if not batch:
                    break
                for records in batch.values():
                    got += len(records)
        return got

    def produce_one(self, stream: str, value: bytes) -> None:
        self._single.send(stream, value, partition=0).get(timeout=30)

    def teardown(self, stream: str) -> None:
        self.admin.delete_topic(stream)

    def close(self) -> None:
        self._single.close()
        self.admin.close()
