"""Concatenating a request's record batches into one reused buffer.

A produce request carries each partition's batches as one `bin`. Joining them
with `b"".join` allocates a fresh megabyte per request, and on this kind of
machine the pages of fresh memory cost more to fault in than the copy itself
(about 2 ms per MiB on a VM that backs guest memory lazily, against 0.05 ms to
copy into memory already touched). `ChunkJoiner` keeps one buffer and hands out
views into it for the lifetime of one request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence

# A buffer grown past this by one huge request is dropped afterwards, so one
# 100 MiB request does not pin 100 MiB for the producer's lifetime.
_KEEP_BYTES = 4 << 20

Chunk = bytes | bytearray | memoryview
Joined = list[tuple[str, list[tuple[int, Chunk]]]]


class ChunkJoiner:
    """One reusable buffer; `join` yields each partition's chunks as one view. Not thread-safe."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    @contextlib.contextmanager
    def join(self, topics: Mapping[str, Mapping[int, Sequence[Chunk]]]) -> Iterator[Joined]:
        """`[(topic, [(partition, data), ...]), ...]`, valid only inside the `with`.

        A partition with one chunk gets that chunk itself (no copy); several are
        copied one after the other into the buffer.
        """
        needed = sum(
            sum(map(len, chunks))
            for partitions in topics.values()
            for chunks in partitions.values()
            if len(chunks) > 1
        )
        if len(self._buffer) < needed:
            self._buffer.extend(bytes(needed - len(self._buffer)))
        views: list[memoryview] = []
        whole = memoryview(self._buffer)
        try:
            position = 0
            joined: Joined = []
            for topic, partitions in topics.items():
                entries: list[tuple[int, Chunk]] = []
                for partition, chunks in partitions.items():
                    if len(chunks) == 1:
                        entries.append((partition, chunks[0]))
                        continue
                    start = position
                    for chunk in chunks:
                        end = position + len(chunk)
                        whole[position:end] = chunk
                        position = end
                    view = whole[start:position]
                    views.append(view)
                    entries.append((partition, view))
                joined.append((topic, entries))
            yield joined
        finally:
            for view in views:
                view.release()
            whole.release()
            if len(self._buffer) > _KEEP_BYTES:
                self._buffer = bytearray()
