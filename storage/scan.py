"""The one scanner over a segment file: block reads, whole-batch cut, count, CRC.

Recovery, fetch, the cleaner and the load-time checks all walk a `.log` file the
same way: read a block with a positional read (readers on the same descriptor are
undisturbed), walk its headers with `protocol.batch.BatchWalk`, read on from the
first batch the block cut, and read a batch bigger than the block on its own. What
differs is what each reader does with a batch, and that stays with the reader.

Thread safety: a scan holds no lock; it reads with `pread` only, so any number may
run over one file while it is appended to (they stop at the `end` they were given).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import NamedTuple

import crc32c

from protocol.batch import (
    ANY_LAYOUT,
    HEADER_SIZE,
    KAFKA_MAGIC,
    MAGIC,
    AnyLayout,
    BatchLayout,
    BatchWalk,
    check_crc,
)
from protocol.errors import CorruptMessage
from storage.fileio import FileIO

__all__ = [
    "HEADER_READ_AFTER_FRACTION",
    "Pread",
    "ScannedBatch",
    "SegmentScan",
    "first_batch_fields",
    "iter_batch_fields",
]

# (length, position) -> the bytes there: a file's positional read, however wrapped
# (or a view of bytes already read).
Pread = Callable[[int, int], bytes | memoryview]

# After a batch bigger than this fraction of the block, a header-only scan reads the
# next header alone: an answer of 110 KB batches then reads ~4 KB, not 8 MiB.
HEADER_READ_AFTER_FRACTION = 4


class ScannedBatch(NamedTuple):
    """One batch a scan found: its file position, size and raw header fields
    (`protocol.batch.F_*` positions for either layout: `fields[F_MAGIC]` says which),
    and its bytes when the scan was asked for them."""

    position: int
    size: int
    fields: tuple[int, ...]
    data: memoryview | None


class SegmentScan:
    """Batches of one open `.log` file in [start, end), in order, read with `pread`.

    `with_bytes` yields each batch's bytes; `crc` checks each batch's CRC-32C before
    yielding it (then a failure stops the scan with `problem` set). `whole` says the
    file ends on a batch boundary at `end`: a batch or header cut there is damage, not
    the cut of a byte limit. `on_read(n)` is told every byte read (the cleaner's
    throttle). After the iteration, `position` is where the scan stopped, `problem`
    why (None: at `end`, or at a cut when not `whole`), and `previous` the last batch
    yielded (a wrong length there may be the real damage; the caller may check it).
    A caller that breaks out of the loop early sets `position` itself if it uses it.
    A segment may hold Tidelog and Kafka v2 batches (`layout` ANY_LAYOUT, the default);
    each batch's CRC is checked over its own layout's range.
    """

    __slots__ = (
        "_block_bytes",
        "_crc",
        "_end",
        "_layout",
        "_on_read",
        "_pread",
        "_whole",
        "_with_bytes",
        "header_cut_at_end",
        "position",
        "previous",
        "problem",
    )

    def __init__(
        self,
        pread: Pread,
        start: int,
        end: int,
        *,
        block_bytes: int,
        with_bytes: bool = False,
        crc: bool = False,
        whole: bool = True,
        on_read: Callable[[int], None] | None = None,
        layout: BatchLayout = ANY_LAYOUT,
    ) -> None:
        self._pread, self._end = pread, end
        self._block_bytes = max(block_bytes, _alone_bytes(layout))
        self._with_bytes, self._crc, self._whole = with_bytes, crc, whole
        self._on_read, self._layout = on_read, layout
        self.position = start
        self.problem: str | None = None
        self.previous: ScannedBatch | None = None
        # The scan stopped because fewer bytes than a header were left before `end`.
        self.header_cut_at_end = False

    def _read(self, size: int, position: int) -> bytes | memoryview:
        data = self._pread(size, position)
        if self._on_read is not None:
            self._on_read(len(data))
        return data

    def _refuse(self, block: bytes | memoryview, at: int) -> None:
        """Say why the batch at `at` of `block` failed its CRC (check_crc's words)."""
        try:
            check_crc(block, at, layout=ANY_LAYOUT)
        except CorruptMessage as exc:
            self.problem = exc.message
        else:  # pragma: no cover - the two CRC computations cannot disagree
            self.problem = "CRC mismatch"

    def _lone_header(self, block: bytes | memoryview, left: int) -> tuple[int, ...] | None:
        """The header of a block read alone (`left`: bytes to the scan's end), or None:
        the scan stops there, `problem` says why (None: a header cut at `end`)."""
        layout = self._layout
        if len(block) < layout.header_bytes(block, 0):  # a Kafka header, cut
            self.header_cut_at_end = len(block) == left
            if self._whole:
                self.problem = "a batch header is cut by the end of the segment"
            return None
        fields = layout.unpack_from(block, 0)
        size = fields[layout.index["batch_length"]] + layout.log_overhead
        self.problem = layout.header_problem(fields[layout.index["magic"]], size)
        return fields if self.problem is None else None

    def __iter__(self) -> Iterator[ScannedBatch]:
        layout, end = self._layout, self._end
        header_size, overhead = layout.size, layout.log_overhead
        length_at, crc_at = layout.index["batch_length"], layout.index["crc"]
        magic_at, unpack = layout.index["magic"], layout.unpack_from
        with_bytes, crc = self._with_bytes, self._crc
        crc_start_of = {magic: layout.crc_start_of(magic) for magic in _magics(layout)}
        want_bytes = with_bytes or crc
        new = tuple.__new__  # a ScannedBatch without NamedTuple's Python-level __new__
        big = self._block_bytes // HEADER_READ_AFTER_FRACTION
        # A header-only scan reads the first header alone: its batch's size then picks
        # the next read, so a walk over big batches never reads a block it skips.
        alone = _alone_bytes(layout)
        read = self._block_bytes if want_bytes else alone
        position = self.position
        while position < end:
            if end - position < header_size:
                self.header_cut_at_end = True
                if self._whole:
                    self.problem = "a batch header is cut by the end of the segment"
                break
            block = self._read(min(read, end - position), position)
            if len(block) < header_size:  # the file ends before `end`
                if self._whole:
                    self.problem = "a batch header is cut by the end of the file"
                break
            if len(block) <= alone:
                # One header read alone (after a big batch: a fetch of 110 KB batches
                # reads only those): no walk over a block that holds no whole batch.
                lone = self._lone_header(block, end - position)
                if lone is None:
                    break
                fields, size, walked = lone, lone[length_at] + overhead, 0
            else:
                walk = BatchWalk(block, whole=False, layout=layout)
                view = memoryview(block)
                size = 0
                for at, fields in walk:
                    size = fields[length_at] + overhead
                    if crc:
                        crc_start = crc_start_of[fields[magic_at]]
                        if crc32c.crc32c(view[at + crc_start : at + size]) != fields[crc_at]:
                            self._refuse(block, at)
                            self.position = position + at
                            return
                    batch = new(
                        ScannedBatch,
                        (position + at, size, fields, view[at : at + size] if with_bytes else None),
                    )
                    self.previous = batch
                    yield batch
                if walk.problem is not None:
                    self.position, self.problem = position + walk.position, walk.problem
                    return
                walked = walk.position
                if walked == 0:
                    fields = unpack(block, 0)
                    size = fields[length_at] + overhead
            if walked == 0:  # one batch larger than the block, or cut by `end`
                if position + size > end:
                    if self._whole:
                        self.problem = f"a batch's length ({size} bytes) runs past the end"
                    break
                data = self._read(size, position) if want_bytes else b""
                if crc:
                    crc_start = crc_start_of[fields[magic_at]]
                    if crc32c.crc32c(memoryview(data)[crc_start:size]) != fields[crc_at]:
                        self._refuse(data, 0)
                        break
                batch = new(
                    ScannedBatch, (position, size, fields, memoryview(data) if with_bytes else None)
                )
                self.previous = batch
                yield batch
                position += size
            else:
                position += walked
            read = alone if size > big and not want_bytes else self._block_bytes
        self.position = position


def _alone_bytes(layout: BatchLayout) -> int:
    """Bytes a read of one header alone takes: the largest header `layout` walks."""
    return layout.max_size if isinstance(layout, AnyLayout) else layout.size


def _magics(layout: BatchLayout) -> tuple[int, ...]:
    return (MAGIC, KAFKA_MAGIC) if isinstance(layout, AnyLayout) else (layout.magic,)


def iter_batch_fields(
    io: FileIO,
    path: Path,
    *,
    chunk_bytes: int,
    on_read: Callable[[int], None] | None = None,
) -> Iterator[tuple[memoryview, tuple[int, ...]]]:
    """(bytes, raw header fields) of each batch of the `.log` file at `path`, CRC-checked.

    For a reader of a whole closed segment (the cleaner): it opens the file by path,
    so a segment replaced meanwhile raises FileNotFoundError. Raises CorruptMessage
    on a torn or damaged batch: a closed segment must be whole.
    """
    fd = io.open(path, writable=False)
    try:
        scan = SegmentScan(
            lambda size, position: io.pread(fd, size, position),
            0,
            io.file_size(fd),
            block_bytes=chunk_bytes,
            with_bytes=True,
            crc=True,
            on_read=on_read,
        )
        for batch in scan:
            assert batch.data is not None  # with_bytes: every batch has its bytes
            yield batch.data, batch.fields
        if scan.problem is not None:
            raise CorruptMessage(f"{path}: bad batch at byte {scan.position}: {scan.problem}")
    finally:
        io.close(fd)


def first_batch_fields(io: FileIO, path: Path) -> tuple[int, ...] | None:
    """The raw header fields of the first batch of the `.log` file at `path`, of either
    layout (None when the file is gone or shorter than a header); the header is not
    checked."""
    try:
        fd = io.open(path, writable=False)
    except FileNotFoundError:
        return None
    try:
        data = io.pread(fd, ANY_LAYOUT.max_size, 0)
    finally:
        io.close(fd)
    if len(data) < HEADER_SIZE or len(data) < ANY_LAYOUT.header_bytes(data):
        return None
    return ANY_LAYOUT.unpack_from(data)
