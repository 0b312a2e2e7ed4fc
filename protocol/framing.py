"""Length-prefixed msgpack frames (docs/protocol.md §1), sans-I/O.

A frame on the wire is::

    uint32 big-endian length N | N bytes: one msgpack object

`N` counts only the msgpack bytes. The decoder reads the 4-byte header first and
refuses a frame longer than its `max_frame_bytes` before buffering the body, so
a peer cannot make us allocate what it merely announces. Both directions use
the same code: the broker decodes requests with it, the clients decode
responses.

Encoding uses msgspec: the same bytes msgpack's `packb(use_bin_type=True)` writes,
but a large `bin` (a produce request's records, a fetch answer's batches) is
copied once instead of several times while msgpack's buffer grows, about 40x
cheaper per megabyte here. Decoding stays with msgpack, which gives tuples for
arrays (see `decode_body`).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator, Sequence
from typing import Any, Protocol, TypeVar

import msgpack
import msgspec

from protocol.errors import InvalidRequest

LENGTH = struct.Struct(">I")
LENGTH_SIZE = LENGTH.size

# The broker's `socket.request.max.bytes` default (docs/protocol.md §1): 100 MiB.
DEFAULT_MAX_FRAME_BYTES = 104_857_600

# A uint32 header cannot announce more than this; also the hard cap of any limit.
MAX_FRAME_BYTES_LIMIT = 2**32 - 1

# The receive buffer starts this big, and is kept between frames up to _KEEP_BYTES:
# a 1 MiB produce request (the client's default max_request_size) and then some.
_MIN_BUFFER_BYTES = 64 * 1024
_KEEP_BYTES = 4 << 20


class FrameError(InvalidRequest):
    """A frame that cannot be read; the connection must be closed after it."""


class FrameTooLarge(FrameError):
    """The length header announces more than the receiver accepts."""

    def __init__(self, frame_bytes: int, max_frame_bytes: int) -> None:
        super().__init__(
            f"frame of {frame_bytes} bytes exceeds the limit of {max_frame_bytes} bytes"
        )
        self.frame_bytes = frame_bytes
        self.max_frame_bytes = max_frame_bytes


class FrameDecodeError(FrameError):
    """The frame body is not exactly one valid msgpack object."""


# Holds no per-call state and runs under the GIL: one encoder serves every thread.
_ENCODER = msgspec.msgpack.Encoder()


def encode_body(obj: Any) -> bytes:
    """The msgpack bytes of one object (a frame without its length header)."""
    return _ENCODER.encode(obj)


def encode_frame(obj: Any, into: bytearray | None = None) -> bytearray:
    """The frame for one msgpack-able object: length header plus body, built in place.

    With `into`, the frame is written over that buffer (resized to fit) and it is
    returned: a sender that reuses one buffer writes into memory it has already
    touched, instead of a fresh megabyte whose pages fault in on every request.
    """
    frame = bytearray(LENGTH_SIZE) if into is None else into
    _ENCODER.encode_into(obj, frame, LENGTH_SIZE)
    LENGTH.pack_into(frame, 0, len(frame) - LENGTH_SIZE)
    return frame


# Frames at least this big are returned by `encode_frame_to_send` as header and body:
# two sends beat copying megabytes to prepend 4 bytes.
SPLIT_FRAME_BYTES = 64 * 1024


def encode_frame_to_send(obj: Any) -> bytes | list[bytes]:
    """The frame of `obj` ready to send: one buffer when small (the cheapest to build
    for a typical answer), else the length header and the body as two buffers."""
    body = _ENCODER.encode(obj)
    if len(body) < SPLIT_FRAME_BYTES:
        return LENGTH.pack(len(body)) + body
    return [LENGTH.pack(len(body)), body]


# --- frames whose bins are sent from elsewhere ------------------------------------
#
# A produce request's records (sent with `sendmsg` from the caller's buffers) and a
# fetch answer's records (sent with `sendfile` from a segment file) are `bin` values
# that never pass through the encoder. Both are framed here, the same way: encode
# the object with a placeholder where each such bin goes, then cut the encoding at
# the placeholders (`_cut`), giving each bin its msgpack header. Joined, with each
# external bin replaced by its bytes, the parts equal `encode_frame` of the object.

# The empty bin a caller puts where `encode_frame_with_tail` appends the tail.
TAIL_PLACEHOLDER = b""
_EMPTY_BIN = b"\xc4\x00"
# An external bin is encoded as these random bytes, then cut out. Drawn once per
# process and never sent (every occurrence is cut), so no value a peer sent can
# imitate it; `encode_frame_parts` also checks that it found exactly the externals.
_MARK_BYTES = 16
_MARK = os.urandom(_MARK_BYTES)
_BIN8_OF_MARK = bytes([0xC4, _MARK_BYTES])  # how msgpack writes a 16-byte bin


class External(Protocol):
    """A `bin` value of a frame whose bytes are sent by the caller (`len` of them)."""

    def __len__(self) -> int: ...


def _bin_header(size: int) -> bytes:
    if size < 1 << 8:
        return b"\xc4" + size.to_bytes(1, "big")
    if size < 1 << 16:
        return b"\xc5" + size.to_bytes(2, "big")
    return b"\xc6" + size.to_bytes(4, "big")


def _cut(encoded: bytes, holes: list[tuple[int, int]], sizes: list[int]) -> tuple[list[bytes], int]:
    """The pieces of `encoded` around `holes` ((start, end) of each placeholder, in
    order), each piece before a hole ending with the bin header of that hole's
    `sizes` entry; the length header is prepended to the first piece. Returns the
    pieces (len(holes) + 1 of them, possibly empty) and the frame's body length."""
    pieces: list[bytes] = []
    body_length = len(encoded)
    start = 0
    for (hole_start, hole_end), size in zip(holes, sizes, strict=True):
        header = _bin_header(size)
        pieces.append(encoded[start:hole_start] + header)
        body_length += len(header) + size - (hole_end - hole_start)
        start = hole_end
    pieces.append(encoded[start:])
    pieces[0] = LENGTH.pack(body_length) + pieces[0]
    return pieces, body_length


def encode_frame_with_tail(
    obj: Any, tail: Sequence[bytes | bytearray | memoryview]
) -> list[bytes | bytearray | memoryview]:
    """A frame whose object ends with one `bin` made of `tail`'s chunks, as buffers to send.

    The last value msgpack writes for `obj` must be `TAIL_PLACEHOLDER`; it becomes a
    bin of the chunks' total length, and the chunks follow as they are. The bytes on
    the wire equal `encode_frame` of the same object with the joined chunks, but a
    megabyte of records is handed to the kernel (`sendmsg`) instead of being copied
    into a frame first.
    """
    head = _ENCODER.encode(obj)
    if not head.endswith(_EMPTY_BIN):
        raise ValueError("the object's last value must be TAIL_PLACEHOLDER")
    hole = (len(head) - len(_EMPTY_BIN), len(head))
    (first, _), _ = _cut(head, [hole], [sum(map(len, tail))])
    return [first, *tail]


E = TypeVar("E", bound=External)


def _placeholder(value: Any) -> bytes:
    """What an external bin is encoded as (the encoder calls this for unknown types)."""
    if hasattr(value, "__len__"):
        return _MARK
    raise NotImplementedError(f"cannot encode {type(value).__name__}")


_EXTERNAL_ENCODER = msgspec.msgpack.Encoder(enc_hook=_placeholder)


def encode_frame_parts(obj: Any, externals: list[E]) -> list[bytes | E]:
    """The frame of `obj` (length header included) as parts to send in order: bytes,
    and each of `externals` where `obj` holds it, standing for a `bin` of its length.

    `externals` are the values of `obj` that are not bytes-like, in the order msgpack
    writes them (the encoder refuses any other unknown type). Joined, with each one
    replaced by its bytes, the parts equal `encode_frame` of the same object.
    """
    mark = _MARK
    encoded = _EXTERNAL_ENCODER.encode(obj)
    holes: list[tuple[int, int]] = []
    start = 0
    for _ in externals:
        at = encoded.find(mark, start)
        if at < len(_BIN8_OF_MARK) or encoded[at - len(_BIN8_OF_MARK) : at] != _BIN8_OF_MARK:
            raise ValueError("an external bin was not found in the encoded frame")
        holes.append((at - len(_BIN8_OF_MARK), at + _MARK_BYTES))
        start = at + _MARK_BYTES
    if encoded.find(mark, start) != -1:
        raise ValueError("the object holds more external bins than were listed")
    pieces, _ = _cut(encoded, holes, [len(e) for e in externals])
    parts: list[bytes | E] = [pieces[0]]
    for external, piece in zip(externals, pieces[1:], strict=True):
        parts.append(external)
        parts.append(piece)
    return [part for part in parts if not isinstance(part, bytes) or part]


def frame_length(header: bytes | bytearray | memoryview, max_frame_bytes: int) -> int:
    """The body length a 4-byte header announces, refused if over `max_frame_bytes`."""
    length: int
    (length,) = LENGTH.unpack(header)
    if length > max_frame_bytes:
        raise FrameTooLarge(length, max_frame_bytes)
    return length


def decode_body(body: bytes | bytearray | memoryview) -> Any:
    """Decode a frame body into one object, or raise FrameDecodeError.

    Arrays decode to tuples (`use_list=False`): cheaper to build and, unlike
    lists, not tracked by the garbage collector when they hold only scalars.
    Nesting is bounded by msgpack's C decoder (a deeper object fails to decode).
    """
    if not body:
        raise FrameDecodeError("empty frame")
    try:
        return msgpack.unpackb(body, raw=False, use_list=False, strict_map_key=True)
    except Exception as exc:  # msgpack raises a zoo of types for bad input
        raise FrameDecodeError(f"undecodable frame: {_why_undecodable(body, exc)}") from exc


def _why_undecodable(body: bytes | bytearray | memoryview, exc: Exception) -> str:
    """A reason for the peer: msgpack's FormatError and StackError carry no message."""
    if isinstance(exc, msgpack.FormatError):
        return f"not msgpack: reserved or unknown type byte (first byte 0x{body[0]:02x})"
    if isinstance(exc, msgpack.StackError):
        return "not msgpack: arrays or maps nested too deep"
    return f"{type(exc).__name__}: {exc}" if str(exc) else f"not msgpack ({type(exc).__name__})"


class FrameDecoder:
    """Turns a byte stream into decoded msgpack objects, one per frame.

    Feed it whatever arrived (`feed(data)`), then iterate to get every complete
    message so far; a partial frame stays buffered for the next feed. An
    oversize header raises `FrameTooLarge` as soon as its 4 bytes are in, an
    invalid body `FrameDecodeError`; after either the stream is unusable (the
    caller closes the connection). Not thread-safe.

    Received bytes go into one buffer that is kept between frames: growing a
    fresh buffer for every megabyte frame and freeing it again cost more than
    the copy itself (reallocations and page faults, ~0.1 ms per 1 MiB frame on
    the broker). A buffer grown past `_KEEP_BYTES` by a huge frame is dropped
    once it is empty, so one 100 MiB request does not pin 100 MiB.
    """

    def __init__(self, max_frame_bytes: int = DEFAULT_MAX_FRAME_BYTES) -> None:
        if not 0 < max_frame_bytes <= MAX_FRAME_BYTES_LIMIT:
            raise ValueError(f"max_frame_bytes must be in 1..{MAX_FRAME_BYTES_LIMIT}")
        self.max_frame_bytes = max_frame_bytes
        self._buf = bytearray()
        self._start = 0  # unread data is _buf[_start:_end]
        self._end = 0
        self._failed: FrameError | None = None

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Append received bytes (they are copied)."""
        if self._failed is not None:
            raise self._failed
        size = len(data)
        if self._end + size > len(self._buf):
            self._make_room(size)
        self._buf[self._end : self._end + size] = data
        self._end += size

    def _make_room(self, size: int) -> None:
        """Move unread bytes to the front, and grow (at least doubling) if still short."""
        unread = self._end - self._start
        if self._start:
            self._buf[:unread] = self._buf[self._start : self._end]
            self._start, self._end = 0, unread
        if unread + size > len(self._buf):
            grown = max(unread + size, 2 * len(self._buf), _MIN_BUFFER_BYTES)
            self._buf.extend(bytes(grown - len(self._buf)))

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet returned as messages."""
        return self._end - self._start

    def bytes_needed(self) -> int:
        """How many more bytes complete the next frame (at least 1 when nothing is buffered)."""
        available = self.buffered_bytes
        if available < LENGTH_SIZE:
            return LENGTH_SIZE - available
        length = frame_length(
            self._buf[self._start : self._start + LENGTH_SIZE], self.max_frame_bytes
        )
        return max(0, LENGTH_SIZE + length - available)

    def announced_bytes(self) -> int | None:
        """The body length the next frame's header announces, once its 4 bytes are in
        (whether or not the body is); None before. Raises like `next_message`."""
        if self._failed is not None:
            raise self._failed
        start = self._start
        if self._end - start < LENGTH_SIZE:  # buffered_bytes, without a property call
            return None
        try:
            return frame_length(self._buf[start : start + LENGTH_SIZE], self.max_frame_bytes)
        except FrameError as exc:
            self._failed = exc
            raise

    def next_frame_bytes(self) -> int | None:
        """The body length of the next frame if it is complete (so a caller can decode a
        large one off its event loop), else None; raises like `next_message`."""
        length = self.announced_bytes()
        if length is None:
            return None
        return length if self._end - self._start >= LENGTH_SIZE + length else None

    def next_message(self) -> tuple[bool, Any]:
        """`(True, obj)` for the next complete frame, or `(False, None)` if none is complete."""
        if self._failed is not None:
            raise self._failed
        buf, start = self._buf, self._start
        if self._end - start < LENGTH_SIZE:
            return False, None
        try:
            length = frame_length(buf[start : start + LENGTH_SIZE], self.max_frame_bytes)
        except FrameError as exc:
            self._failed = exc
            raise
        end = start + LENGTH_SIZE + length
        if self._end < end:
            return False, None
        with memoryview(buf) as view:
            try:
                obj = decode_body(view[start + LENGTH_SIZE : end])
            except FrameError as exc:
                self._failed = exc
                raise
        self._consume(end)
        return True, obj

    def _consume(self, end: int) -> None:
        if end < self._end:
            self._start = end
            return
        self._start = self._end = 0
        if len(self._buf) > _KEEP_BYTES:
            self._buf = bytearray()

    def __iter__(self) -> Iterator[Any]:
        while True:
            ready, obj = self.next_message()
            if not ready:
                return
            yield obj
