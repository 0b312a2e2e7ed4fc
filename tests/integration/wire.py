"""A deliberately raw client for contract tests: bytes on a socket, as docs/protocol.md says.

The broker is checked byte for byte against the contract, independently of the
project's own client library: frames are `struct` + `msgpack`, batches come from
`protocol.batch` (the contract's layout, written once).
"""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

import msgpack

from protocol.batch import encode_batch, iter_records

LENGTH = struct.Struct(">I")
# Socket timeout for tests: a broker that never answers fails the test, not hangs it.
RECV_TIMEOUT_S = 60.0

# The APIs of docs/protocol.md §4, written out here rather than taken from the code under test.
CONTRACT_APIS = (
    "api_versions",
    "create_topic",
    "delete_topic",
    "metadata",
    "describe_configs",
    "alter_configs",
    "produce",
    "fetch",
    "list_offsets",
    "offset_for_time",
    "delete_records",
)


def batch(
    *values: bytes | None, key: bytes | None = b"k", timestamp_ms: int | None = None
) -> bytes:
    """One producer batch holding `values` (all with `key`)."""
    now_ms = int(time.time() * 1000)
    return encode_batch([(key, v, (), timestamp_ms) for v in values], now_ms=now_ms)


class WireClient:
    """One TCP connection speaking frames of msgpack maps."""

    def __init__(self, address: tuple[str, int], timeout_s: float = RECV_TIMEOUT_S) -> None:
        self.sock = socket.create_connection(address, timeout=timeout_s)
        self._buf = b""
        self._next_id = 0

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- raw ------------------------------------------------------------------

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def send_obj(self, obj: Any) -> None:
        body = msgpack.packb(obj, use_bin_type=True)
        self.sock.sendall(LENGTH.pack(len(body)) + body)

    def envelope(self, api: str, body: dict[str, Any], *, v: int = 1) -> tuple[int, dict]:
        self._next_id += 1
        return self._next_id, {"api": api, "v": v, "id": self._next_id, "body": body}

    def send(self, api: str, body: dict[str, Any], *, v: int = 1) -> int:
        """Send a request without reading; returns its correlation id."""
        request_id, env = self.envelope(api, body, v=v)
        self.send_obj(env)
        return request_id

    def _fill(self, n: int) -> bool:
        while len(self._buf) < n:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                return False
            self._buf += chunk
        return True

    def recv(self) -> dict[str, Any] | None:
        """The next response map, or None if the broker closed the connection."""
        if not self._fill(4):
            return None
        (length,) = LENGTH.unpack(self._buf[:4])
        if not self._fill(4 + length):
            return None
        body, self._buf = self._buf[4 : 4 + length], self._buf[4 + length :]
        return msgpack.unpackb(body, raw=False)

    def is_closed_by_peer(self) -> bool:
        """True once the broker has closed its side (EOF, or a reset)."""
        try:
            return self.recv() is None
        except ConnectionResetError:
            return True

    # -- requests -------------------------------------------------------------

    def call(self, api: str, body: dict[str, Any], *, v: int = 1) -> dict[str, Any]:
        """Send one request and return its whole response envelope."""
        request_id = self.send(api, body, v=v)
        response = self.recv()
        assert response is not None, f"broker closed the connection on {api}"
        assert response["id"] == request_id
        return response

    def ok(self, api: str, body: dict[str, Any]) -> dict[str, Any]:
        """The body of a successful response (fails the test on a request-level error)."""
        response = self.call(api, body)
        assert response["error"] is None, response
        return response["body"]

    # -- conveniences ---------------------------------------------------------

    def create_topic(self, topic: str, partitions: int = 1, **configs: Any) -> None:
        self.ok(
            "create_topic",
            {"topic": topic, "partitions": partitions, "configs": _dotted(configs)},
        )

    def produce(
        self,
        topic: str,
        records: bytes,
        *,
        partition: int = 0,
        acks: int = 1,
        timeout_ms: int = 30_000,
    ) -> dict[str, Any]:
        """Produce one partition's records; returns that partition's result."""
        body = self.ok(
            "produce",
            {
                "acks": acks,
                "timeout_ms": timeout_ms,
                "topics": [
                    {"topic": topic, "partitions": [{"partition": partition, "records": records}]}
                ],
            },
        )
        return body["topics"][0]["partitions"][0]

    def fetch(
        self,
        topic: str,
        offset: int,
        *,
        partition: int = 0,
        max_wait_ms: int = 0,
        min_bytes: int = 0,
        max_bytes: int = 1 << 20,
    ) -> dict[str, Any]:
        """Fetch one partition; returns that partition's result."""
        body = self.ok(
            "fetch", fetch_body(topic, offset, partition, max_wait_ms, min_bytes, max_bytes)
        )
        return body["topics"][0]["partitions"][0]

    def partition_call(self, api: str, topic: str, **fields: Any) -> dict[str, Any]:
        """One-partition list_offsets / offset_for_time / delete_records result."""
        part = {"partition": fields.pop("partition", 0), **fields}
        body = self.ok(api, {"topics": [{"topic": topic, "partitions": [part]}]})
        return body["topics"][0]["partitions"][0]


def fetch_body(
    topic: str,
    offset: int,
    partition: int = 0,
    max_wait_ms: int = 0,
    min_bytes: int = 0,
    max_bytes: int = 1 << 20,
) -> dict[str, Any]:
    return {
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "topics": [
            {
                "topic": topic,
                "partitions": [{"partition": partition, "offset": offset, "max_bytes": max_bytes}],
            }
        ],
    }


def _dotted(configs: dict[str, Any]) -> dict[str, Any]:
    """`retention_ms=5` keyword style -> `{"retention.ms": 5}`."""
    return {k.replace("_", "."): v for k, v in configs.items()}


def values_of(records: bytes) -> list[bytes | None]:
    return [r.value for r in iter_records(records)]


def offsets_of(records: bytes) -> list[int]:
    return [r.offset for r in iter_records(records)]


def wait_until(predicate: Any, timeout_s: float = 10.0) -> None:
    """Poll `predicate` until true (for effects with no event to wait on, e.g. a file)."""
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.01)
