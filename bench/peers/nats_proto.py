"""The NATS client protocol, sans-I/O: the few client ops we send, the server ops we read.

    client -> server:  CONNECT {json}\\r\\n   PING\\r\\n   PONG\\r\\n
                       SUB <subject> <sid>\\r\\n   PUB <subject> [reply] <n>\\r\\n<n bytes>\\r\\n
    server -> client:  INFO {json}\\r\\n   +OK\\r\\n   -ERR '<msg>'\\r\\n   PING\\r\\n   PONG\\r\\n
                       MSG <subject> <sid> [reply] <n>\\r\\n<n bytes>\\r\\n
                       HMSG <subject> <sid> [reply] <hdr n> <total n>\\r\\n<total n bytes>\\r\\n

JetStream rides on top: a publish with a reply subject is acknowledged by a MSG to
that subject whose payload is `{"stream":..,"seq":..}` or `{"error":{..}}`; a pull
consumer delivers MSGs after a request to `$JS.API.CONSUMER.MSG.NEXT.<stream>.<name>`
and reports "no messages"/"timeout" as header-only HMSGs with a status line.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

CRLF = b"\r\n"
# A control line longer than this is not NATS (the server's own limit is 4 KiB).
MAX_CONTROL_LINE_BYTES = 4096


# A run of whole MSGs without reply subject whose payloads hold no CR or LF, as the
# JSON acknowledgements of JetStream publishes are: matched in one C-level call.
_ACK_RUN = re.compile(rb"(?:MSG [^ \r\n]+ [^ \r\n]+ \d+\r\n[^\r\n]*\r\n)+")


_PAYLOADS: dict[re.Pattern[bytes], re.Pattern[bytes]] = {}


def msg_run_pattern(payload_bytes: int) -> re.Pattern[bytes]:
    """A pattern for a run of MSGs with a reply subject and `payload_bytes` of payload
    each (what a pull consumer delivers); `take_msg_run` uses it and its one-message
    twin that captures the payload."""
    one = rb"MSG [^ \r\n]+ [^ \r\n]+ [^ \r\n]+ %d\r\n" % payload_bytes
    run = re.compile(rb"(?:" + one + rb".{%d}\r\n)+" % payload_bytes, re.DOTALL)
    _PAYLOADS[run] = re.compile(one + rb"(.{%d})\r\n" % payload_bytes, re.DOTALL)
    return run


class NatsProtocolError(Exception):
    """`-ERR` from the server, or bytes that are not the NATS protocol."""


class Msg(NamedTuple):
    """One delivered message; `headers` is the raw header block (HMSG) or None."""

    subject: bytes
    sid: bytes
    reply: bytes | None
    headers: bytes | None
    payload: bytes

    @property
    def status(self) -> int | None:
        """The status code of a header-only control message (e.g. 404, 408), if any."""
        if self.headers is None or not self.headers.startswith(b"NATS/1.0 "):
            return None
        code = self.headers[9:12]
        return int(code) if code.isdigit() else None


class Ping(NamedTuple):
    """The server asks for a PONG (the caller must send one)."""


Event = Msg | Ping | str  # str: "INFO", "+OK", "PONG"


def connect_op(**options: Any) -> bytes:
    """CONNECT with verbose off (no +OK per op) and headers on (JetStream statuses)."""
    fields = {"verbose": False, "pedantic": False, "headers": True, "protocol": 1, **options}
    return b"CONNECT " + json.dumps(fields, separators=(",", ":")).encode() + CRLF


def sub_op(subject: str, sid: int) -> bytes:
    return b"SUB %s %d\r\n" % (subject.encode(), sid)


def pub_op(subject: str, payload: bytes, reply: str | None = None) -> bytes:
    head = subject if reply is None else f"{subject} {reply}"
    return b"PUB %s %d\r\n%s\r\n" % (head.encode(), len(payload), payload)


def pub_prefix(subject: str, reply: str, payload_bytes: int) -> bytes:
    """Everything of one PUB before its payload, for payloads of one fixed length."""
    return b"PUB %s %s %d\r\n" % (subject.encode(), reply.encode(), payload_bytes)


def encode_pub_pipeline(prefix: bytes, payloads: Sequence[bytes]) -> bytes:
    """PUB of each payload, back to back, in one C-level join (all the prefix's length)."""
    if not payloads:
        return b""
    expected = int(prefix[prefix.rindex(b" ") + 1 : -2])
    if any(len(p) != expected for p in payloads):
        raise ValueError(f"every payload must be {expected} bytes for this prefix")
    return prefix + (CRLF + prefix).join(payloads) + CRLF


class NatsParser:
    """Feed bytes from the server, take whole events; partial input stays buffered."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def take_ack_run(self) -> tuple[int, bool]:
        """Consume the leading run of whole one-line MSGs (publish acks) at once.

        Returns (how many, whether any payload mentions "error"); anything else
        (a PING, a split message) is left for `events()`. Without this, a Python
        loop per acknowledgement would cost the raw client more than the server.
        """
        match = _ACK_RUN.match(self._buf, self._pos)
        if match is None:
            return 0, False
        start, end = match.span()
        count = self._buf.count(b"MSG ", start, end)
        has_error = self._buf.find(b'"error"', start, end) >= 0
        self._pos = end
        return count, has_error

    def take_msg_run(self, pattern: re.Pattern[bytes]) -> list[bytes]:
        """Consume the leading run of whole MSGs that `pattern` (from `msg_run_pattern`)
        matches and return their payloads: two C-level calls for the whole run."""
        match = pattern.match(self._buf, self._pos)
        if match is None:
            return []
        start, end = match.span()
        payloads: list[bytes] = _PAYLOADS.get(pattern, pattern).findall(self._buf, start, end)
        self._pos = end
        return payloads

    def events(self) -> Iterator[Event]:
        """Every whole event buffered so far, in order; `-ERR` raises."""
        buf = self._buf
        while True:
            end = buf.find(CRLF, self._pos)
            if end < 0:
                if len(buf) - self._pos > MAX_CONTROL_LINE_BYTES:
                    raise NatsProtocolError("control line too long")
                return
            line = bytes(buf[self._pos : end])
            op = line[:4]
            if op == b"MSG ":
                parts = line[4:].split(b" ")
                size = int(parts[-1])
                start = end + 2
                if len(buf) < start + size + 2:
                    return
                payload = bytes(buf[start : start + size])
                self._pos = start + size + 2
                reply = parts[2] if len(parts) == 4 else None
                yield Msg(parts[0], parts[1], reply, None, payload)
            elif op == b"HMSG":
                parts = line[5:].split(b" ")
                header_size, total = int(parts[-2]), int(parts[-1])
                start = end + 2
                if len(buf) < start + total + 2:
                    return
                headers = bytes(buf[start : start + header_size])
                payload = bytes(buf[start + header_size : start + total])
                self._pos = start + total + 2
                reply = parts[2] if len(parts) == 5 else None
                yield Msg(parts[0], parts[1], reply, headers, payload)
            else:
                self._pos = end + 2
                if line == b"PING":
                    yield Ping()
                elif line == b"PONG" or line == b"+OK":
                    yield line.decode()
                elif op == b"INFO":
                    yield "INFO"
                elif op == b"-ERR":
                    raise NatsProtocolError(line[5:].decode(errors="replace").strip("'"))
                else:
                    raise NatsProtocolError(f"unknown server op {line[:20]!r}")


def check_ack(payload: bytes) -> int:
    """The stream sequence of a JetStream publish acknowledgement; raise on an error ack."""
    doc = json.loads(payload)
    if "error" in doc:
        raise NatsProtocolError(f"JetStream refused the publish: {doc['error']}")
    return int(doc["seq"])
