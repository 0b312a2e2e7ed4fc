"""RESP2, the Redis wire format, sans-I/O: commands to bytes, bytes to replies.

    *<n>\\r\\n  then n bulk strings  $<len>\\r\\n<bytes>\\r\\n        (a command)
    +OK\\r\\n   -ERR msg\\r\\n   :42\\r\\n   $3\\r\\nabc\\r\\n   $-1\\r\\n   *2\\r\\n...   (replies)

The raw benchmark client needs two things redis-py does per command in Python:
encoding a pipeline of XADDs and checking their replies. Here both are C-level over
a whole pipeline (`encode_xadd_pipeline` is one `bytes.join`; `LineCounter` counts
newlines); reading XRANGE replies is two regex calls per read (`XrangeReader`); the
general `ReplyDecoder` covers everything else (admin commands).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

CRLF = b"\r\n"


class RespError(Exception):
    """A `-ERR ...` reply from the server, or bytes that are not RESP2."""


# A decoded reply: arrays nest; an error reply inside a pipeline is a value, not raised.
ReplyValue = bytes | int | str | list[Any] | RespError | None


def encode_command(*args: bytes | str | int) -> bytes:
    """One command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        raw = arg if isinstance(arg, bytes) else str(arg).encode()
        parts.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(parts)


def xadd_prefix(key: bytes, field: bytes, value_bytes: int) -> bytes:
    """Everything of `XADD key * field <value>` before the value's bytes."""
    return b"*5\r\n$4\r\nXADD\r\n$%d\r\n%s\r\n$1\r\n*\r\n$%d\r\n%s\r\n$%d\r\n" % (
        len(key),
        key,
        len(field),
        field,
        value_bytes,
    )


def encode_xadd_pipeline(prefix: bytes, values: Sequence[bytes]) -> bytes:
    """`XADD key * field value` for each value, back to back, in one C-level join.

    All values must have the length `prefix` was built for (checked: a wrong length
    would desynchronize the whole connection).
    """
    if not values:
        return b""
    expected = int(prefix[prefix.rindex(b"$") + 1 : -2])
    if any(len(v) != expected for v in values):
        raise ValueError(f"every value must be {expected} bytes for this prefix")
    return prefix + (CRLF + prefix).join(values) + CRLF


class LineCounter:
    """Counts whole reply lines of a homogeneous pipeline as bytes arrive, in C.

    XADD answers each command with `$<n>\\r\\n<id>\\r\\n`: two lines per reply, and
    neither lengths nor stream ids contain a newline, so counting `\\n` (which a
    read can never split) counts lines. An error reply starts a line with `-`; it is
    raised here rather than miscounted.
    """

    def __init__(self) -> None:
        self.lines = 0
        self._at_line_start = True

    def feed(self, data: bytes) -> int:
        """Account for `data`; return the total of whole lines seen so far."""
        if not data:
            return self.lines
        if (self._at_line_start and data[:1] == b"-") or b"\n-" in data:
            start = 0 if self._at_line_start and data[:1] == b"-" else data.index(b"\n-") + 1
            end = data.find(CRLF, start)
            message = data[start + 1 : end if end >= 0 else len(data)]
            raise RespError(message.decode(errors="replace"))
        self.lines += data.count(b"\n")
        self._at_line_start = data[-1:] == b"\n"
        return self.lines


class ReplyDecoder:
    """Feed bytes, take whole replies. Incomplete input stays buffered; bad input raises.

    Error replies come out as `RespError` instances (not raised), so one failed command
    in a pipeline does not hide the answers to the others.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pos = 0

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data

    def replies(self) -> Iterable[ReplyValue]:
        """Every whole reply buffered so far, in order."""
        while True:
            parsed = self._parse(self._pos)
            if parsed is None:
                return
            value, self._pos = parsed
            yield value

    def _line(self, pos: int) -> tuple[bytes, int] | None:
        end = self._buf.find(CRLF, pos)
        if end < 0:
            return None
        return bytes(self._buf[pos:end]), end + 2

    def _parse(self, pos: int) -> tuple[ReplyValue, int] | None:
        line = self._line(pos)
        if line is None:
            return None
        head, pos = line
        kind, rest = head[:1], head[1:]
        if kind == b"+":
            return rest.decode(), pos
        if kind == b"-":
            return RespError(rest.decode(errors="replace")), pos
        if kind == b":":
            return int(rest), pos
        if kind == b"$":
            length = int(rest)
            if length < 0:
                return None, pos
            if len(self._buf) < pos + length + 2:
                return None
            if self._buf[pos + length : pos + length + 2] != CRLF:
                raise RespError("bulk string not followed by CRLF")
            return bytes(self._buf[pos : pos + length]), pos + length + 2
        if kind == b"*":
            count = int(rest)
            if count < 0:
                return None, pos
            items: list[ReplyValue] = []
            for _ in range(count):
                parsed = self._parse(pos)
                if parsed is None:
                    return None
                item, pos = parsed
                items.append(item)
            return items, pos
        raise RespError(f"not a RESP2 reply type: {head[:20]!r}")


# Longest stream id text ("<ms>-<seq>", two unsigned 64-bit numbers): bounds how far
# `XrangeReader` may look without finding a whole entry before it calls the reply bad.
MAX_ID_BYTES = 41


class XrangeReader:
    """Reads one XRANGE reply whose entries all hold one `field` with a value of
    `value_bytes`, returning (id, value) pairs with a regex: two C-level calls per
    read instead of a Python step per entry. Anything else is a `RespError`.

        *<n>\\r\\n  then n times:  *2 $<l> <id> *2 $<f> <field> $<value_bytes> <value>
    """

    def __init__(self, field: bytes, value_bytes: int) -> None:
        one = rb"\*2\r\n\$\d+\r\n([0-9]+-[0-9]+)\r\n\*2\r\n\$%d\r\n%s\r\n\$%d\r\n(.{%d})\r\n" % (
            len(field),
            re.escape(field),
            value_bytes,
            value_bytes,
        )
        self._entry = re.compile(one, re.DOTALL)
        self._run = re.compile(rb"(?:" + one.replace(b"(", b"(?:") + rb")+", re.DOTALL)
        self._max_entry_bytes = 40 + MAX_ID_BYTES + len(field) + value_bytes
        self._buf = bytearray()
        self._pos = 0
        self.remaining: int | None = None  # entries still to come; None before the header

    @property
    def done(self) -> bool:
        return self.remaining == 0

    def feed(self, data: bytes) -> list[tuple[bytes, bytes]]:
        """Take more reply bytes; return the entries they complete."""
        if self._pos:
            del self._buf[: self._pos]
            self._pos = 0
        self._buf += data
        if self.remaining is None:
            end = self._buf.find(CRLF)
            if end < 0:
                return []
            head = bytes(self._buf[:end])
            if head[:1] == b"-":
                raise RespError(head[1:].decode(errors="replace"))
            if head[:1] != b"*":
                raise RespError(f"XRANGE answered {head[:20]!r}, not an array")
            self.remaining = max(0, int(head[1:]))
            self._pos = end + 2
        match = self._run.match(self._buf, self._pos)
        if match is None:
            if len(self._buf) - self._pos > self._max_entry_bytes and self.remaining:
                raise RespError("an XRANGE entry is not of the expected field and size")
            return []
        entries: list[tuple[bytes, bytes]] = self._entry.findall(self._buf, *match.span())
        self._pos = match.end()
        self.remaining -= len(entries)
        if self.remaining < 0:
            raise RespError("XRANGE sent more entries than its header said")
        return entries
