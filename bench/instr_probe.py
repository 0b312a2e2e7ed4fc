"""One workload of `bench.instr_ab`, run by a checkout's own python under callgrind.

Run as a script (`python bench/instr_probe.py <probe> <tree> <n>`), not as a module:
the file is read from the checkout under test but imports the packages of the checkout
whose interpreter runs it, so one probe serves both sides of an A/B (round 1's tree
kept the clients in `protocol`, later ones in `tidelog`). Every probe does the same
fixed work `n` times after an identical start, so the difference between two values
of `n` is the cost of the work alone.

- `append`: `Log.append` of the storage benchmark's 1,000-record, 120 KB batch.
- `broker`: the broker process (`tidelog serve`, the one under callgrind) answering
  `n` pre-encoded `acks: 1` produce requests of 1,000 x 100 B records, then fetches
  of all of them back, raw.
- `broker-producer`: the broker process answering `n` such batches sent by
  `Producer.send_batch` as in `produce` below (no fetches).
- `consume`: the client process consuming `n` such batches with `Consumer.poll`.
- `produce`: the client process sending `n` such batches with `Producer.send_batch`
  (`acks: 1`, no linger, idempotence off: round 1's Producer has none), sender thread
  included.
- `kafka-edge`: the broker process answering `n` pre-encoded Kafka Produce v7
  requests (`acks: 1`) of one 1,000 x 100 B Kafka v2 batch each, then Kafka Fetch
  v11 requests of all of them back: the Kafka codec, the conversions both ways and
  their offload choices, through the wire only (so both sides of an A/B run it).
- `kafka-small`: the same with one 16 x 1 KiB batch per produce request, fetched
  back one batch per Fetch (partition max bytes 16 KiB): the per-request cost.
- `clean` / `build`: one cleaning of the compaction benchmark's dirty log of `n` MiB,
  and building that log alone (the A/B subtracts the second from the first).
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RECORDS_PER_BATCH = 1000
VALUE_BYTES = 100
# `kafka-small`: the Java producer's default batch (batch.size 16 KiB) of 1 KiB records.
SMALL_RECORDS_PER_BATCH = 16
SMALL_VALUE_BYTES = 1024
SMALL_FETCH_BYTES = 16 * 1024
START_TIMEOUT_S = 600  # a broker under callgrind starts ~50x slower


def _client_class() -> Any:
    try:
        from tidelog.client import Client
    except ImportError:  # round 1's layout
        from protocol.client import Client  # type: ignore[no-redef]
    return Client


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for(port: int) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"no broker on port {port} after {START_TIMEOUT_S} s")


def _batch(records: int = RECORDS_PER_BATCH, value_bytes: int = VALUE_BYTES) -> bytes:
    from protocol.batch import encode_batch

    values = [bytes([i % 251]) * value_bytes for i in range(records)]
    return encode_batch([(None, v, (), None) for v in values], now_ms=int(time.time() * 1000))


def probe_append(n: int) -> None:
    from bench.storage_bench import BASE_TS, TS_STEP_MS, stamp, template_batch
    from storage.config import LogConfig
    from storage.manager import LogManager

    with tempfile.TemporaryDirectory() as data_dir:
        manager = LogManager(Path(data_dir), LogConfig(segment_index_bytes=1 << 20))
        manager.open()
        manager.create_topic("a", 1)
        log = manager.get_log("a", 0)
        template = template_batch()
        for i in range(n):
            log.append(stamp(template, BASE_TS + i * TS_STEP_MS))
        print(f"log_end_offset={log.log_end_offset}")
        manager.close()


def probe_clean(n_mib: int, clean: bool) -> None:
    """Build a dirty compacted log of `n_mib` MiB as the compaction benchmark does, and
    with `clean` run one cleaning of it (the A/B subtracts a build-only run)."""
    import math
    import random

    from bench.compaction_bench import LOAD_FACTOR, build_log
    from compaction.cleaner import Cleaner
    from compaction.config import CleanerConfig
    from compaction.manager import CleanerManager
    from compaction.offset_map import ENTRY_BYTES
    from compaction.throttle import Throttler
    from storage.fileio import FileIO

    with tempfile.TemporaryDirectory() as data_dir:
        manager, _, keys = build_log(Path(data_dir), n_mib << 20, random.Random(7))
        if clean:
            map_bytes = math.ceil(keys / LOAD_FACTOR * ENTRY_BYTES * 1.01) + 1024
            config = CleanerConfig(dedupe_buffer_bytes=map_bytes, min_map_bytes=0)
            try:
                cleaner = Cleaner(config, Throttler(math.inf))
            except TypeError:  # round 1's cleaner also took the FileIO
                cleaner = Cleaner(config, FileIO(), Throttler(math.inf))  # type: ignore[call-arg]
            cleaners = CleanerManager(
                Path(data_dir), manager.all_logs, io=FileIO(), clock_ms=lambda: 0
            )
            assert cleaners.clean_one(cleaner) is not None, "nothing was cleaned"
        manager.close()


def _produce(bootstrap: str, n: int) -> None:
    records = _batch()
    body = {
        "acks": 1,
        "timeout_ms": 60_000,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "records": records}]}],
    }
    with _client_class()(bootstrap) as client:
        client.create_topic("t", 1)
        sent = done = 0
        while done < n:
            while sent < n and sent - done < 4:
                client.send("produce", body)
                sent += 1
            client.receive().result()
            done += 1


def _recv_exactly(sock: socket.socket, size: int) -> bytes:
    data = bytearray()
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise SystemExit("the broker closed the Kafka connection")
        data += chunk
    return bytes(data)


def _kafka_call(sock: socket.socket) -> bytes:
    """The next Kafka response frame's body (after its 4-byte size)."""
    return _recv_exactly(sock, int.from_bytes(_recv_exactly(sock, 4), "big"))


def kafka_edge(bootstrap: str, n: int, *, small: bool = False) -> None:
    """`n` Kafka produce requests of one 1,000-record batch (4 in flight), then Kafka
    fetches until every record is back. `small`: batches of 16 x 1 KiB records (the
    Java producer's default 16 KiB batch) fetched one per request."""
    from protocol.kafka.codec import RequestHeader, decode_response, encode_request
    from protocol.kafka.convert import tidelog_to_kafka_all
    from protocol.kafka.messages import FETCH, PRODUCE
    from protocol.kafka.records import read_batch_header

    per_batch = SMALL_RECORDS_PER_BATCH if small else RECORDS_PER_BATCH
    fetch_bytes = SMALL_FETCH_BYTES if small else 1 << 20
    records = tidelog_to_kafka_all(_batch(*(per_batch, SMALL_VALUE_BYTES) if small else ()))
    produce = encode_request(
        RequestHeader(PRODUCE.key, 7, 1, "instr-probe"),
        {
            "transactional_id": None,
            "acks": 1,
            "timeout_ms": 60_000,
            "topic_data": [{"name": "t", "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    host, port = bootstrap.rsplit(":", 1)
    with socket.create_connection((host, int(port))) as sock:
        sent = done = 0
        while done < n:
            while sent < n and sent - done < 4:
                sock.sendall(produce)
                sent += 1
            answer = decode_response(_kafka_call(sock), PRODUCE, 7).body
            part = answer["responses"][0]["partition_responses"][0]
            if part["error_code"] != 0:
                raise SystemExit(f"Kafka produce failed: {part}")
            done += 1
        offset = 0
        while offset < n * per_batch:
            fetch = encode_request(
                RequestHeader(FETCH.key, 11, 2, "instr-probe"),
                {
                    "replica_id": -1, "max_wait_ms": 0, "min_bytes": 0, "max_bytes": 1 << 20,
                    "isolation_level": 0, "session_id": 0, "session_epoch": -1,
                    "topics": [{"topic": "t", "partitions": [{
                        "partition": 0, "current_leader_epoch": -1, "fetch_offset": offset,
                        "log_start_offset": -1, "partition_max_bytes": fetch_bytes}]}],
                    "forgotten_topics_data": [], "rack_id": "",
                },
            )  # fmt: skip
            sock.sendall(fetch)
            answer = decode_response(_kafka_call(sock), FETCH, 11).body
            part = answer["responses"][0]["partitions"][0]
            data = part["records"] or b""
            if not data:
                raise SystemExit(f"Kafka fetch at offset {offset} returned nothing: {part}")
            pos = 0
            while pos < len(data):
                header = read_batch_header(data, pos)
                offset = header.base_offset + header.last_offset_delta + 1
                pos += header.size


def probe_servers(tree: Path, n: int, what: str, out_file: str) -> None:
    from protocol.batch import iter_headers

    with tempfile.TemporaryDirectory() as data_dir:
        port = _free_port()
        serve = [
            str(tree / ".venv" / "bin" / "tidelog"),
            "serve",
            "--data-dir",
            f"{data_dir}/data",
            "--listen",
            f"127.0.0.1:{port}",
            "--metrics-listen",
            f"127.0.0.1:{_free_port()}",
        ]
        if what in ("broker", "broker-producer", "kafka-edge", "kafka-small"):
            serve = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out_file}", *serve]
        broker = subprocess.Popen(
            serve, cwd=data_dir, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            _wait_for(port)
            bootstrap = f"127.0.0.1:{port}"
            if what in ("produce", "broker-producer", "kafka-edge", "kafka-small"):
                with _client_class()(bootstrap) as client:
                    client.create_topic("t", 1)
                if what == "broker-producer":
                    produce_client(bootstrap, n)
                    return
                if what in ("kafka-edge", "kafka-small"):
                    kafka_edge(bootstrap, n, small=what == "kafka-small")
                    return
            else:
                _produce(bootstrap, n)
            if what == "broker":
                with _client_class()(bootstrap) as client:
                    offset = 0
                    while offset < n * RECORDS_PER_BATCH:
                        answer = client.fetch("t", 0, offset, max_bytes=1 << 20)
                        for _, header in iter_headers(answer.records):
                            offset = header.next_offset
            else:
                client = f"{what}-client"
                code = f"import sys; sys.argv = ['', '{client}', '{bootstrap}', '{n}']\n"
                code += f"exec(open({__file__!r}).read())"
                subprocess.run(
                    [
                        "valgrind",
                        "--tool=callgrind",
                        f"--callgrind-out-file={out_file}",
                        sys.executable,
                        "-c",
                        code,
                    ],
                    check=True,
                    cwd=data_dir,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
        finally:
            broker.terminate()
            broker.wait(START_TIMEOUT_S)


def consume_client(bootstrap: str, n: int) -> None:
    try:
        from tidelog.consumer import Consumer, TopicPartition
    except ImportError:  # round 1's layout
        from protocol.consumer import Consumer, TopicPartition  # type: ignore[no-redef]
    with Consumer(bootstrap_servers=bootstrap) as consumer:
        partition = TopicPartition("t", 0)
        consumer.assign([partition])
        consumer.seek_to_beginning(partition)
        got = 0
        while got < n * RECORDS_PER_BATCH:
            for records in consumer.poll(timeout_ms=1000, max_records=1 << 20).values():
                got += len(records)


def produce_client(bootstrap: str, n: int) -> None:
    try:
        from tidelog.producer import Producer
    except ImportError:  # round 1's layout
        from protocol.producer import Producer  # type: ignore[no-redef]
    values = [bytes([i % 251]) * VALUE_BYTES for i in range(RECORDS_PER_BATCH)]
    try:
        producer = Producer(bootstrap, acks=1, linger_ms=0, enable_idempotence=False)
    except TypeError:  # round 1's Producer has no idempotence
        producer = Producer(bootstrap, acks=1, linger_ms=0)
    with producer:
        futures = [producer.send_batch("t", values, partition=0) for _ in range(n)]
        producer.flush()
        for future in futures:
            future.result()


def main(argv: list[str]) -> None:
    probe = argv[1]
    if probe == "consume-client":
        consume_client(argv[2], int(argv[3]))
    elif probe == "produce-client":
        produce_client(argv[2], int(argv[3]))
    elif probe == "kafka-edge-client":
        kafka_edge(argv[2], int(argv[3]))
    elif probe == "append":
        probe_append(int(argv[3]))
    elif probe in ("build", "clean"):
        probe_clean(int(argv[3]), clean=probe == "clean")
    else:
        probe_servers(Path(argv[2]), int(argv[3]), probe, argv[4])


if __name__ == "__main__":
    main(sys.argv)
