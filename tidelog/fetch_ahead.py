"""The `Consumer`'s fetch sent ahead and the thread that reads its answer.

Apart from the fetcher because it is the only code that runs in another thread: a
`FetchAhead` is handed to the `ReplyReader`'s thread, which reads one answer off the
socket while the consumer's thread decodes the previous one.
"""

from __future__ import annotations

import threading
from queue import SimpleQueue

from protocol.connection import Reply
from tidelog.client import Client
from tidelog.positions import TopicPartition


class FetchAhead:
    """A fetch sent ahead, whose answer a helper thread reads off the socket.

    Reading while this process decodes keeps a large answer flowing: the socket
    buffers hold only a few MiB, so otherwise the broker stalls on a full socket
    until the consumer comes back for the answer. The thread only uses the
    client until its answer is in, and the consumer touches the client only
    after `wait`, so the client is never used by two threads at once. (This
    relies on `Client.receive` copying each answer's records out of its reused
    receive buffer, as msgpack's decode does: the answer being decoded must not
    alias the buffer the next one is read into.)
    """

    def __init__(
        self, client: Client, positions: dict[TopicPartition, int], reader: ReplyReader
    ) -> None:
        self.positions = positions
        self._client = client
        self._reply: Reply | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        reader.submit(self)

    def receive(self) -> None:
        """Run by the reader thread."""
        try:
            self._reply = self._client.receive()
        except BaseException as exc:  # handed to the consumer's thread by reply()
            self._error = exc
        finally:
            self._done.set()

    def wait(self) -> bool:
        """Wait for the answer; False if reading it failed (the client is closed then)."""
        self._done.wait()
        return self._error is None

    def reply(self) -> Reply:
        if not self.wait():
            assert self._error is not None
            raise self._error
        assert self._reply is not None
        return self._reply


# A closed client wakes the reader at once; this only bounds a pathological wait.
_READER_JOIN_TIMEOUT_S = 5.0


class ReplyReader:
    """One long-lived thread per consumer that reads each fetch sent ahead.

    Starting and joining a thread per fetch cost about 0.13 ms here, a few percent
    of the consumer's CPU at 1 MiB fetches; handing work to a waiting thread costs a
    fraction of that.
    """

    def __init__(self) -> None:
        self._work: SimpleQueue[FetchAhead | None] = SimpleQueue()
        self._thread: threading.Thread | None = None

    def submit(self, ahead: FetchAhead) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="tidelog-fetch", daemon=True)
            self._thread.start()
        self._work.put(ahead)

    def _run(self) -> None:
        while (ahead := self._work.get()) is not None:
            ahead.receive()

    def close(self) -> None:
        """End the thread (the caller has closed the client, so no read is left hanging)."""
        thread, self._thread = self._thread, None
        if thread is not None:
            self._work.put(None)
            thread.join(_READER_JOIN_TIMEOUT_S)

    def stop(self) -> None:
        """Tell the thread to end after its current read, without waiting (finalizer)."""
        self._work.put(None)
