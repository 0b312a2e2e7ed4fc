"""Kafka requests encoded and answers decoded by kafka-python's classes (a codec nobody
here wrote), over a plain socket: for the APIs no client library here wraps
(Describe/AlterClientQuotas, OffsetForLeaderEpoch)."""

from __future__ import annotations

import socket
import struct
from typing import Any

from harness.kafka_python import kp_class
from tests.integration.kafka_helpers import RECV_TIMEOUT_S


def build(cls: Any, fields: dict[str, Any]) -> Any:
    """A kafka-python message (or nested struct) from plain dicts and lists."""
    out = {}
    for name, value in fields.items():
        field = cls._struct.fields[name] if hasattr(cls, "_struct") else cls.fields[name]
        if isinstance(value, list) and value and isinstance(value[0], dict):
            nested = getattr(cls, field.type_str.removeprefix("[]"))
            value = [build(nested, v) for v in value]
        out[name] = value
    return cls(**out)


class KpWire:
    """One connection; `ask` sends a request and returns kafka-python's decoded answer."""

    def __init__(self, address: tuple[str, int], client_id: str = "kp-wire") -> None:
        self.sock = socket.create_connection(address, timeout=RECV_TIMEOUT_S)
        self.client_id = client_id
        self.correlation = 0

    def __enter__(self) -> KpWire:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def ask(self, api_key: int, version: int, **fields: Any) -> Any:
        self.correlation += 1
        message = build(kp_class(api_key, True)[version], fields)
        message.with_header(correlation_id=self.correlation, client_id=self.client_id)
        self.sock.sendall(bytes(message.encode(header=True, framed=True)))
        size = struct.unpack(">i", self._exactly(4))[0]
        frame = struct.pack(">i", size) + self._exactly(size)
        answer = kp_class(api_key, False)[version].decode(frame, header=True, framed=True)
        assert answer.header.correlation_id == self.correlation
        return answer

    def login(self, name: str, password: str) -> None:
        """SaslHandshake v1 and SaslAuthenticate v1 with PLAIN (a SASL_PLAINTEXT listener)."""
        assert self.ask(17, 1, mechanism="PLAIN").error_code == 0
        token = b"\0" + name.encode() + b"\0" + password.encode()
        answer = self.ask(36, 1, auth_bytes=token)
        assert answer.error_code == 0, answer.error_message

    def _exactly(self, size: int) -> bytes:
        data = b""
        while len(data) < size:
            chunk = self.sock.recv(size - len(data))
            assert chunk, "the broker closed the connection"
            data += chunk
        return data
