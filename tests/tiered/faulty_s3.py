"""`FaultyS3`: a small threaded HTTP proxy in front of a real S3-compatible server (moto)
that can be switched to misbehave the ways an object store does: down (connection
refused, or reset mid-request), slow (seconds per request), HTTP 500s, or truncated
bodies.

It is test infrastructure, like tests/faulty_io.py's FaultyFileIO for the disk: the
broker and the Spark connector talk to it through their real boto3 clients over
loopback TCP, and nothing of Tidelog is replaced. Faults are whole-proxy and switched
at run time (`proxy.set(Fault.ERROR_500)`, `with proxy.fault(Fault.SLOW, slow_s=3)`),
optionally limited to some HTTP methods (e.g. only GETs: reads fail, uploads pass).

Modes:

- `DOWN`: the listening socket is closed, so new connections are refused
  (ECONNREFUSED); kept-alive connections are closed on their next request.
- `RESET`: connections are accepted and reset (RST, SO_LINGER 0) before an answer.
- `SLOW`: each matching request waits `slow_s` seconds before it is forwarded.
- `ERROR_500`: matching requests are answered `500 InternalError` (S3's XML body),
  never forwarded; `status` picks another code (503 SlowDown).
- `TRUNCATE`: matching requests are forwarded, and the answer's body is cut to
  `keep_fraction` of its Content-Length, then the connection is closed.

Thread safety: the mode is read under a lock per request; counters are updated under it.
"""

from __future__ import annotations

import enum
import http.client
import socket
import struct
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

__all__ = ["Fault", "FaultyS3"]

# Headers that describe one hop, not the message (RFC 9110 §7.6.1): not forwarded.
# `Expect: 100-continue` too: this proxy has the whole body before it forwards (and
# answered the 100 itself); passed on, moto's server stored such PUTs as empty objects.
_HOP_HEADERS = frozenset(
    {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "upgrade",
     "expect"}
)  # fmt: skip
# Seconds the proxy waits for the upstream server (moto answers in milliseconds).
UPSTREAM_TIMEOUT_S = 60.0
_S3_ERROR_BODY = (
    '<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
    "<Message>injected by tests/tiered/faulty_s3.py</Message><RequestId>faulty</RequestId>"
    "</Error>"
)


class Fault(enum.Enum):
    NONE = "none"
    DOWN = "down"
    RESET = "reset"
    SLOW = "slow"
    ERROR_500 = "error_500"
    TRUNCATE = "truncate"


@dataclass
class _Mode:
    fault: Fault = Fault.NONE
    methods: frozenset[str] | None = None  # None: every method
    slow_s: float = 2.0
    status: int = 500
    keep_fraction: float = 0.5
    key_contains: str | None = None  # only requests whose path contains this

    def applies(self, method: str, path: str) -> bool:
        if self.fault is Fault.NONE:
            return False
        if self.methods is not None and method not in self.methods:
            return False
        return self.key_contains is None or self.key_contains in path


@dataclass
class Counters:
    """Requests the proxy saw, by method, and how many got a fault."""

    requests: dict[str, int] = field(default_factory=dict)
    faulted: dict[str, int] = field(default_factory=dict)

    def total(self, method: str | None = None) -> int:
        if method is None:
            return sum(self.requests.values())
        return self.requests.get(method, 0)


def _reset(sock: socket.socket) -> None:
    """Close with an RST instead of a FIN (SO_LINGER on, timeout 0)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
    except OSError:
        pass


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as boto3 uses it
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet: pytest shows failures, not every request

    def _body(self) -> bytes:
        if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def _serve(self) -> None:
        proxy = self.server.proxy
        method = self.command
        body = self._body()
        mode = proxy.note(method, self.path)
        if mode is not None and mode.fault in (Fault.DOWN, Fault.RESET):
            self.close_connection = True
            _reset(self.connection)
            return
        if mode is not None and mode.fault is Fault.SLOW:
            time.sleep(mode.slow_s)
        if mode is not None and mode.fault is Fault.ERROR_500:
            payload = _S3_ERROR_BODY.format(
                code="SlowDown" if mode.status == 503 else "InternalError"
            ).encode()
            self.send_response(mode.status)
            self.send_header("Content-Type", "application/xml")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload if method != "HEAD" else b"")
            return
        status, reason, headers, answer = proxy.forward(method, self.path, self.headers, body)
        self.send_response(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_HEADERS and name.lower() != "content-length":
                self.send_header(name, value)
        if method == "HEAD":  # no body: the length is the object's, as upstream said
            length = next((v for n, v in headers if n.lower() == "content-length"), "0")
            self.send_header("Content-Length", length)
            self.end_headers()
            return
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        if mode is not None and mode.fault is Fault.TRUNCATE and answer:
            self.wfile.write(answer[: int(len(answer) * mode.keep_fraction)])
            self.wfile.flush()
            self.close_connection = True
            _reset(self.connection)
            return
        self.wfile.write(answer)

    do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    proxy: FaultyS3

    def handle_error(self, request: object, client_address: object) -> None:
        pass  # a client that went away (a killed broker, a reset we made): not news


class FaultyS3:
    """A proxy on a free loopback port in front of `upstream` ("http://127.0.0.1:PORT")."""

    def __init__(self, upstream: str, port: int = 0) -> None:
        parts = urlsplit(upstream)
        assert parts.hostname is not None and parts.port is not None, upstream
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self._lock = threading.Lock()
        self._mode = _Mode()
        self.counters = Counters()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.port = port
        self._listen()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- switching -------------------------------------------------------------------

    def set(
        self,
        fault: Fault,
        *,
        methods: set[str] | None = None,
        slow_s: float = 2.0,
        status: int = 500,
        keep_fraction: float = 0.5,
        key_contains: str | None = None,
    ) -> None:
        """Switch to `fault` for every request from now on (`Fault.NONE` heals)."""
        mode = _Mode(
            fault,
            frozenset(m.upper() for m in methods) if methods else None,
            slow_s,
            status,
            keep_fraction,
            key_contains,
        )
        with self._lock:
            was_down = self._mode.fault is Fault.DOWN
            self._mode = mode
        if fault is Fault.DOWN and not was_down:
            self._close_listener()
        elif fault is not Fault.DOWN and was_down:
            self._listen()

    def heal(self) -> None:
        self.set(Fault.NONE)

    @contextmanager
    def fault(self, fault: Fault, **kw: object) -> Iterator[FaultyS3]:
        """`fault` inside the block, healed after it."""
        self.set(fault, **kw)  # type: ignore[arg-type]
        try:
            yield self
        finally:
            self.heal()

    def note(self, method: str, path: str) -> _Mode | None:
        """Count one request; the mode that applies to it, or None."""
        with self._lock:
            self.counters.requests[method] = self.counters.requests.get(method, 0) + 1
            mode = self._mode
            if not mode.applies(method, path):
                return None
            self.counters.faulted[method] = self.counters.faulted.get(method, 0) + 1
            return mode

    # -- forwarding ------------------------------------------------------------------

    def forward(
        self, method: str, path: str, headers: object, body: bytes
    ) -> tuple[int, str, list[tuple[str, str]], bytes]:
        conn = http.client.HTTPConnection(
            self.upstream_host, self.upstream_port, timeout=UPSTREAM_TIMEOUT_S
        )
        try:
            conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
            for name, value in headers.items():  # type: ignore[attr-defined]
                if name.lower() not in _HOP_HEADERS and name.lower() != "content-length":
                    conn.putheader(name, value)
            if body or method in ("PUT", "POST"):
                conn.putheader("Content-Length", str(len(body)))
            conn.endheaders(body)
            response = conn.getresponse()
            answer = response.read()
            return response.status, response.reason, response.getheaders(), answer
        finally:
            conn.close()

    # -- lifecycle -------------------------------------------------------------------

    def _listen(self) -> None:
        server = _Server(("127.0.0.1", self.port), _Handler)
        server.proxy = self
        self.port = server.server_address[1]
        thread = threading.Thread(target=server.serve_forever, name="faulty-s3", daemon=True)
        thread.start()
        self._server, self._thread = server, thread

    def _close_listener(self) -> None:
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is not None:
            server.shutdown()
            server.server_close()
        if thread is not None:
            thread.join(timeout=10)

    def close(self) -> None:
        self._close_listener()
