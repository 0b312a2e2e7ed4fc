"""What the Kafka-protocol integration tests share: the records every client sends,
and a raw Kafka socket for requests no client library would send."""

from __future__ import annotations

import socket
import struct
import time
from typing import Any

from protocol.kafka.codec import RequestHeader, decode_response, encode_request
from protocol.kafka.schema import Api

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
# Seconds a client may take to see what the test expects.
CLIENT_TIMEOUT_S = 20.0
RECV_TIMEOUT_S = 20.0

# (key, value, headers): null against empty keys and values, and headers (one null value).
RECORDS: list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (b"k0", b"v0", [("h", b"x")]),
    (None, b"no key", []),
    (b"", b"empty key", [("a", b""), ("b", b"2")]),
    (b"k3", b"", []),
    (b"k4", None, []),
    (b"k5", b"x" * 1000, [("n", None)]),
]


def base_timestamp_ms() -> int:
    """A CreateTime that is clearly the producer's (an hour ago), whole milliseconds."""
    return int(time.time() * 1000) - 3_600_000


class KafkaSocket:
    """One raw connection speaking Kafka frames; requests encoded by protocol.kafka."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=RECV_TIMEOUT_S)
        self._correlation = 0

    def __enter__(self) -> KafkaSocket:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def request_bytes(self, api: Api, version: int, body: dict[str, Any]) -> bytes:
        self._correlation += 1
        header = RequestHeader(api.key, version, self._correlation, "tidelog-test")
        return encode_request(header, body)

    def recv_frame(self) -> bytes | None:
        """The next response frame body, or None if the broker closed the connection."""
        head = self._recv_exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        return self._recv_exactly(size)

    def _recv_exactly(self, size: int) -> bytes | None:
        data = b""
        while len(data) < size:
            try:
                chunk = self.sock.recv(size - len(data))
            except ConnectionResetError:
                return None
            if not chunk:
                return None
            data += chunk
        return data

    def call(self, api: Api, version: int, body: dict[str, Any]) -> dict[str, Any]:
        self.send_raw(self.request_bytes(api, version, body))
        frame = self.recv_frame()
        assert frame is not None, f"{api.name} v{version}: the broker closed the connection"
        response = decode_response(frame, api, version)
        assert response.correlation_id == self._correlation
        return response.body

    def closed_by_peer(self) -> bool:
        """True once the broker has closed this connection (EOF or reset)."""
        return self.recv_frame() is None
