"""Redis Streams as a peer: Debian's redis-server on loopback, driven two ways.

- `RedisPyClient`: redis-py, the official client, with non-transactional pipelines
  (and hiredis as its parser when installed, as redis-py does by itself).
- `RawRedisClient`: the fastest client we could write: one blocking socket, a whole
  pipeline of XADDs encoded by one `bytes.join`, replies counted in C
  (`resp.LineCounter`), XRANGE replies cut into (id, value) pairs by one regex
  per read (`resp.XrangeReader`).

Durability: AOF with `appendfsync everysec` (the bench's default), switched to
`appendfsync always` for the durable workloads with CONFIG SET; Redis then fsyncs
the AOF before it answers each event-loop round, so a pipeline shares its fsyncs.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from bench.peers.resp import (
    LineCounter,
    ReplyDecoder,
    ReplyValue,
    RespError,
    XrangeReader,
    encode_command,
    encode_xadd_pipeline,
    xadd_prefix,
)
from harness.process import ServerProcess, free_port, note

# Commands per pipeline round: large enough to amortize a round trip, small enough
# that a pipeline's replies (~20 bytes each) fit comfortably in socket buffers.
PIPELINE_RECORDS = 1000
# Pipelines in flight at once on the raw client, so encoding overlaps the server's work.
RAW_PIPELINES_IN_FLIGHT = 2
# Entries per XRANGE: one round trip per this many records read.
XRANGE_COUNT = 10_000
# The single field name of every stream entry (Redis stream entries are field maps).
FIELD = b"v"
RECV_BYTES = 1 << 20
APT_TIMEOUT_S = 600


def redis_server_path() -> str:
    """The redis-server binary, installed from Debian with apt-get when missing."""
    found = shutil.which("redis-server")
    if found:
        return found
    note("redis-server not found: installing Debian's redis-server with apt-get ...")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "redis-server"]
    if subprocess.run(install, env=env, check=False, timeout=APT_TIMEOUT_S).returncode != 0:
        subprocess.run(["apt-get", "update", "-qq"], env=env, check=True, timeout=APT_TIMEOUT_S)
        subprocess.run(install, env=env, check=True, timeout=APT_TIMEOUT_S)
    found = shutil.which("redis-server") or "/usr/bin/redis-server"
    if not Path(found).exists():
        raise RuntimeError("apt-get installed redis-server but the binary is not on PATH")
    return found


def redis_version(binary: str) -> str:
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True)
    for word in out.stdout.split():
        if word.startswith("v="):
            return word[2:]
    return out.stdout.strip()


class RedisServer:
    """redis-server on a free loopback port, AOF in `data_dir`, no RDB snapshots.

    RDB snapshots and automatic AOF rewrites are off: both fork in the middle of a
    run, and the comparison is about the append path (the docs say so).
    """

    def __init__(self, data_dir: Path) -> None:
        self.binary = redis_server_path()
        self.version = redis_version(self.binary)
        data_dir.mkdir(parents=True, exist_ok=True)
        port = free_port()
        argv = [
            self.binary,
            "--port", str(port), "--bind", "127.0.0.1", "--protected-mode", "no",
            "--dir", str(data_dir), "--daemonize", "no", "--save", "",
            "--appendonly", "yes", "--appendfsync", "everysec",
            "--auto-aof-rewrite-percentage", "0", "--maxmemory", "0",
            "--logfile", "",
        ]  # fmt: skip
        self.process = ServerProcess("redis-server", argv, port, data_dir / "redis.log")
        self.port = port

    def stop(self) -> None:
        self.process.stop()


class RawRedis:
    """A blocking RESP2 connection: the transport under `RawRedisClient`."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._decoder = ReplyDecoder()

    def call(self, *args: bytes | str | int) -> ReplyValue:
        """Send one command, return its reply (raising an error reply)."""
        self.sock.sendall(encode_command(*args))
        while True:
            for reply in self._decoder.replies():
                if isinstance(reply, RespError):
                    raise reply
                return reply
            data = self.sock.recv(RECV_BYTES)
            if not data:
                raise ConnectionError("redis closed the connection")
            self._decoder.feed(data)

    def close(self) -> None:
        self.sock.close()


def _set_fsync(conn: RawRedis, durable: bool) -> None:
    conn.call("CONFIG", "SET", "appendfsync", "always" if durable else "everysec")


class RawRedisClient:
    """The fastest Redis Streams client we could write in Python (see module doc)."""

    system = "redis"
    client = "raw"

    def __init__(self, port: int) -> None:
        self.conn = RawRedis(port)

    def setup(self, stream: str, durable: bool) -> None:
        _set_fsync(self.conn, durable)
        self.conn.call("DEL", stream)

    def produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        prefix = xadd_prefix(stream.encode(), FIELD, len(values[0]))
        chunk = values[: min(PIPELINE_RECORDS, total)]
        lines_per_chunk = 2 * len(chunk)
        counter = LineCounter()
        sent_chunks = 0
        target_chunks = max(1, total // len(chunk))
        sock = self.conn.sock
        while sent_chunks < target_chunks and time.perf_counter() < deadline:
            # The values rotate so consecutive pipelines do not carry identical bytes.
            shift = (sent_chunks * 7) % len(chunk)
            sock.sendall(encode_xadd_pipeline(prefix, chunk[shift:] + chunk[:shift]))
            sent_chunks += 1
            in_flight = sent_chunks - counter.lines // lines_per_chunk
            while in_flight >= RAW_PIPELINES_IN_FLIGHT:
                data = sock.recv(RECV_BYTES)
                if not data:
                    raise ConnectionError("redis closed the connection")
                counter.feed(data)
                in_flight = sent_chunks - counter.lines // lines_per_chunk
        while counter.lines < sent_chunks * lines_per_chunk:
            data = sock.recv(RECV_BYTES)
            if not data:
                raise ConnectionError("redis closed the connection")
            counter.feed(data)
        return sent_chunks * len(chunk)

    def consume(self, stream: str, total: int) -> int:
        key = stream.encode()
        sock = self.conn.sock
        first = self.conn.call(b"XRANGE", key, b"-", b"+", b"COUNT", 1)
        if not isinstance(first, list) or not first:
            return 0
        value_bytes = len(first[0][1][1])  # learn the entries' shape from the first one
        start = b"-"
        got = 0
        while got < total:
            sock.sendall(encode_command(b"XRANGE", key, start, b"+", b"COUNT", XRANGE_COUNT))
            reader = XrangeReader(FIELD, value_bytes)
            entries: list[tuple[bytes, bytes]] = []
            while not reader.done:
                data = sock.recv(RECV_BYTES)
                if not data:
                    raise ConnectionError("redis closed the connection")
                entries += reader.feed(data)
            if not entries:
                break
            got += len(entries)
            start = b"(" + entries[-1][0]
        return got

    def produce_one(self, stream: str, value: bytes) -> None:
        self.conn.call(b"XADD", stream.encode(), b"*", FIELD, value)

    def teardown(self, stream: str) -> None:
        self.conn.call("DEL", stream)
        _set_fsync(self.conn, False)

    def close(self) -> None:
        self.conn.close()


class RedisPyClient:
    """redis-py, the official client, the way its docs say to go fast: pipelines."""

    system = "redis"
    client = "redis-py"

    def __init__(self, port: int) -> None:
        import redis

        self.redis = redis.Redis(host="127.0.0.1", port=port)
        self.version = redis.__version__

    def setup(self, stream: str, durable: bool) -> None:
        self.redis.config_set("appendfsync", "always" if durable else "everysec")
        self.redis.delete(stream)

    def produce(self, stream: str, values: list[bytes], total: int, deadline: float) -> int:
        done = 0
        pipe = self.redis.pipeline(transaction=False)
        size = len(values)
        while done < total and time.perf_counter() < deadline:
            n = min(PIPELINE_RECORDS, total - done)
            for i in range(done, done + n):
                pipe.xadd(stream, {FIELD: values[i % size]})
            pipe.execute()  # raises on the first error reply
            done += n
        return done

    def consume(self, stream: str, total: int) -> int:
        start = "-"
        got = 0
        while got < total:
            entries = self.redis.xrange(stream, min=start, max="+", count=XRANGE_COUNT)
            if not entries:
                break
            got += len(entries)
            start = b"(" + entries[-1][0]
        return got

    def produce_one(self, stream: str, value: bytes) -> None:
        self.redis.xadd(stream, {FIELD: value})

    def teardown(self, stream: str) -> None:
        self.redis.delete(stream)
        self.redis.config_set("appendfsync", "everysec")

    def close(self) -> None:
        self.redis.close()
