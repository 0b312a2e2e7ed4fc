"""Idempotent producers against the real broker process: a retried batch after a
kill -9 and restart is still a duplicate, and the Producer's retries through dropped
connections and a killed broker store every acknowledged record exactly once."""

from __future__ import annotations

import contextlib
import random
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from protocol.batch import encode_batch, iter_records
from tests.conftest import BrokerFactory, BrokerProcess
from tests.integration.wire import WireClient, values_of
from tidelog import Producer

pytestmark = pytest.mark.integration


def idempotent(producer: dict, seq: int, *values: bytes) -> bytes:
    return encode_batch(
        [(None, v, None, int(time.time() * 1000)) for v in values],
        producer_id=producer["producer_id"],
        producer_epoch=producer["producer_epoch"],
        base_sequence=seq,
    )


def test_a_retry_after_kill_9_and_restart_is_still_a_duplicate(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    data = tmp_path / "data"
    broker = broker_factory(data_dir=data)
    with WireClient(broker.address) as c:
        c.create_topic("t", **{"segment.bytes": 1000})  # a few rolls: snapshots on disk
        producer = c.ok("init_producer_id", {})
        answers = [
            c.produce("t", idempotent(producer, seq, b"%03d" % seq), acks=-1) for seq in range(30)
        ]
    broker.kill()
    assert list(data.glob("t-0/*.snapshot"))  # taken at the rolls
    again = broker_factory(data_dir=data)
    with WireClient(again.address) as c:
        for seq in (29, 27, 25):  # the last batch and older ones of the last five
            retry = c.produce("t", idempotent(producer, seq, b"%03d" % seq), acks=-1)
            assert retry["error"] is None
            assert retry["base_offset"] == answers[seq]["base_offset"]
        gap = c.produce("t", idempotent(producer, 40, b"gap"), acks=-1)
        assert gap["error"] == "OUT_OF_ORDER_SEQUENCE_NUMBER"
        new = c.produce("t", idempotent(producer, 30, b"030"), acks=-1)
        assert new["error"] is None and new["base_offset"] == 30
        stored = []
        offset = 0
        while offset < 31:
            part = c.fetch("t", offset)
            got = values_of(part["records"])
            stored += got
            offset += len(got)
        assert stored == [b"%03d" % i for i in range(31)]
        assert c.ok("init_producer_id", {})["producer_id"] > producer["producer_id"]


class ChaosProxy:
    """A loopback TCP proxy to the current broker that can drop every connection."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.address = f"127.0.0.1:{self._listener.getsockname()[1]}"
        self._lock = threading.Lock()
        self._pairs: list[tuple[socket.socket, socket.socket]] = []
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._pairs.append((client, server))
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def drop_all(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            for s in pair:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()

    def close(self) -> None:
        self._listener.close()
        self.drop_all()


@contextlib.contextmanager
def chaos(
    proxy: ChaosProxy, broker: BrokerProcess, factory: BrokerFactory, data: Path
) -> Iterator[list[str]]:
    """Drop connections at random moments, and once kill -9 the broker and start it
    again on the same data directory; yields the list of what happened."""
    happened: list[str] = []
    stop = threading.Event()
    rng = random.Random(21)

    def run() -> None:
        killed = False
        while not stop.wait(rng.uniform(0.05, 0.3)):
            if not killed and len(happened) >= 3:
                broker.kill()
                happened.append("kill -9")
                restarted = factory(data_dir=data)
                proxy.upstream = restarted.address
                killed = True
            proxy.drop_all()
            happened.append("drop")

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield happened
    finally:
        stop.set()
        thread.join()


def test_producer_retries_store_every_acknowledged_record_once(
    tmp_path: Path, broker_factory: BrokerFactory
) -> None:
    data = tmp_path / "data"
    broker = broker_factory(data_dir=data)
    with WireClient(broker.address) as c:
        c.create_topic("t", 2, **{"segment.bytes": 20_000})
    proxy = ChaosProxy(broker.address)
    total = 3000
    futures = []
    with (
        chaos(proxy, broker, broker_factory, data) as happened,
        Producer(proxy.address, linger_ms=2, batch_size=400, request_timeout_ms=3000) as producer,
    ):
        for i in range(total):
            futures.append(producer.send("t", b"%05d" % i, partition=i % 2))
            if i % 100 == 99:
                time.sleep(0.05)  # spread the sends over the chaos
        producer.flush(60)
    proxy.close()
    assert "kill -9" in happened and happened.count("drop") >= 3, happened
    acknowledged = {(f.get(0).partition, f.get(0).offset) for f in futures}
    assert len(acknowledged) == total  # every record acknowledged, at distinct offsets
    with WireClient(proxy.upstream) as c:
        for partition in (0, 1):
            values: list[bytes] = []
            offset = 0
            while True:
                part = c.fetch("t", offset, partition=partition)
                records = list(iter_records(part["records"]))
                if not records:
                    break
                values += [r.value for r in records if r.offset >= offset]
                offset = records[-1].offset + 1
            sent = [b"%05d" % i for i in range(partition, total, 2)]
            assert values == sent, f"partition {partition}: duplicates or gaps"
