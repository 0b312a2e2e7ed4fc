"""Fetch answers whose records go from the segment file to the socket with `sendfile`.

A fetch answer used to be read from the segment (`pread`, a copy), cut to whole
batches (a second copy), encoded into the frame (a third) and sent (a fourth, into
the kernel), each into freshly faulted-in pages. Storage now answers a large read
with a `storage.record_source.RecordSource`: whole batches already cut and fenced
(`Log.locate`), which for a local segment is a span of the file. The answer is framed
around it (`protocol.framing.encode_frame_parts`: the same bytes as `encode_frame`,
with each source's records left out), and `send_parts` hands a file span to
`os.sendfile` in bursts from a worker thread: page cache to socket, no copy in user
space; a cold read blocks that thread, never the event loop, and the waits for a slow
reader happen on the event loop, holding no thread. A source that is not a local file
is sent from its `read()`.

This module frames and sends; it never walks batches (tests/test_layering.py).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import trio

from broker import offload
from storage.record_source import RecordSource

# --- framing ------------------------------------------------------------------

# Parts of one frame, in order: bytes as they are, spans sent from their file (a
# frame without spans is bytes only: a large one's header and body).
FrameParts = list[bytes] | list[bytes | RecordSource]


def spans_of_fetch(body: Mapping[str, Any]) -> list[RecordSource]:
    """The spans of a fetch response body, in the order they are encoded."""
    topics = body.get("topics")
    if not isinstance(topics, list):
        return []
    return [
        part["records"]
        for topic in topics
        if isinstance(topic, dict)
        for part in topic.get("partitions", ())
        if isinstance(part, dict) and isinstance(part.get("records"), RecordSource)
    ]


def memory_bytes(parts: FrameParts) -> int:
    """Bytes the parts hold in memory (spans stay in the page cache)."""
    return sum(len(part) for part in parts if isinstance(part, bytes))


def close_parts(parts: FrameParts) -> None:
    for part in parts:
        if isinstance(part, RecordSource):
            part.close()


# --- sending --------------------------------------------------------------------


async def send_parts(stream: trio.abc.SendStream, parts: FrameParts, timeout_s: float) -> None:
    """Send a frame's parts in order, file spans with `sendfile`.

    Raises trio.BrokenResourceError if the peer is gone, trio.TooSlowError if it
    reads nothing for `timeout_s`. Every span is closed, sent or not.
    """
    sock = getattr(stream, "socket", None)
    try:
        for part in parts:
            if isinstance(part, bytes):
                with trio.fail_after(timeout_s):
                    await stream.send_all(part)
            elif sock is None or (span := part.file_span()) is None:
                data = await offload.to_worker(part.read)
                with trio.fail_after(timeout_s):
                    await stream.send_all(data)
            else:
                await _sendfile(sock, span, timeout_s)
    finally:
        close_parts(parts)


async def _sendfile(
    sock: trio.socket.SocketType, span: tuple[int, int, int], timeout_s: float
) -> None:
    """`span` (fd, position, length) to the socket: bursts of `sendfile` in a worker
    thread (a cold page-cache read blocks that thread, not the event loop), and the
    waits for the peer to read on the event loop (a slow peer holds no thread)."""
    fd, position, length = span
    end = position + length
    while position < end:
        try:
            sent = await offload.to_worker(
                _sendfile_burst, sock.fileno(), fd, position, end - position
            )
        except OSError as exc:
            raise trio.BrokenResourceError(f"sendfile failed: {exc}") from exc
        if sent < 0:
            raise trio.BrokenResourceError("segment file shorter than the answer")
        position += sent
        if position < end:
            with trio.fail_after(timeout_s):
                await trio.lowlevel.wait_writable(sock.fileno())


def _sendfile_burst(sock_fd: int, file_fd: int, position: int, count: int) -> int:
    """Send from the file until done or the socket buffer is full; the bytes sent, or
    -1 if the file ended first (runs in a worker thread)."""
    sent = 0
    while sent < count:
        try:
            n = os.sendfile(sock_fd, file_fd, position + sent, count - sent)
        except BlockingIOError:
            return sent
        if n == 0:
            return -1
        sent += n
    return sent
