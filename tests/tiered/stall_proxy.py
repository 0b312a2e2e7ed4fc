"""A TCP forwarder in front of the S3 server that can stall: while `stalled`, bytes from
clients are held (connections stay open, nothing is answered), as a store that stopped
answering does. Test infrastructure, like the S3 server itself: the broker's real
boto3 client talks to it over loopback."""

from __future__ import annotations

import socket
import threading
from types import TracebackType


class StallProxy:
    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self.stalled = threading.Event()
        self._closed = threading.Event()
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._upstream)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
            threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _pump(self, source: socket.socket, target: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                while self.stalled.is_set() and not self._closed.is_set():
                    self._closed.wait(0.05)
                target.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, target):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()

    def close(self) -> None:
        """Stop listening and drop every connection: the store is down (refused)."""
        self._closed.set()
        self._listener.close()
        for sock in self._sockets:
            sock.close()

    def __enter__(self) -> StallProxy:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
