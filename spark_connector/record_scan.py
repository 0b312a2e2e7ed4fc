"""Vectorised scan of record payloads: where every field of every record lies, with numpy.

docs/protocol.md §3's record is the msgpack array `[offset_delta, timestamp_delta, key, value,
headers]`. Decoding it into Python objects costs a tuple, two ints and a `bytes` per
record, and the bytes are then copied again into Arrow. The reader instead locates each
field in the fetched bytes with whole-array numpy operations and lets Arrow copy keys and
values straight out of them (`binary_column`): no Python object per record.

Record boundaries are the only sequential part of msgpack. They come from a guess that is
then checked in bulk: a producer's batch usually holds records of one layout (same key
and value sizes, timestamp deltas of one width), so record i is as long as record 0 plus
the growth of its offset delta's encoding (i >= 128 takes 2 bytes, i >= 256 three...).
Every guessed record is parsed and must end exactly where the guess says, with empty
headers; by induction from the first record (whose start is known) every boundary is
then exact. A batch that fails gets its boundaries from msgspec instead (one `Raw` per
record, exact but slower). Anything outside the record grammar (a str key, a map, an
oversized int) makes the scan return None and the caller decodes with `protocol.batch`,
which also says precisely what is wrong.

The broker validated every record's shape with its typed decoder at produce time and
the batch CRC covers it on disk, so when the caller does not want headers, their bytes
are only located (msgspec checks they are one well-formed msgpack object), not typed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import msgspec
import numpy as np
import pyarrow as pa

FIXARRAY_5 = 0x95  # a record: a msgpack array of exactly 5 items
EMPTY_ARRAY = 0x90  # a record without headers
NIL = 0xC0
BIN8, BIN16, BIN32 = 0xC4, 0xC5, 0xC6
UINT8, UINT16, UINT32, UINT64 = 0xCC, 0xCD, 0xCE, 0xCF
INT8, INT16, INT32, INT64 = 0xD0, 0xD1, 0xD2, 0xD3
FIXARRAY_MIN, FIXARRAY_MAX, ARRAY16, ARRAY32 = 0x90, 0x9F, 0xDC, 0xDD

WORD_BYTES = 8  # fields are read as one big-endian 64-bit word after their type byte
# Arrow `binary` offsets are int32: buffers at least this long take the decoding path.
MAX_SCAN_BUFFER_BYTES = 2**31 - 1
# Offset-delta sizes of a minimal msgpack encoding: 1 byte below 128, 2 below 256,
# 3 below 65536, 5 up to 2**32 (record counts never come near that), as the bytes
# each bound adds over the one before.
_DELTA_EXTRA_BYTES = ((128, 1), (256, 1), (65536, 2))

_RAW_RECORDS = msgspec.msgpack.Decoder(list[msgspec.Raw])


def _table(entries: dict[int, int], dtype: type = np.uint8) -> np.ndarray:
    """A 256-entry lookup table indexed by a msgpack type byte.

    Tables are one byte wide: numpy looks a uint8 index up in a uint8 table several
    times faster than in an int64 one, and every entry fits.
    """
    table: np.ndarray = np.zeros(256, dtype=dtype)
    for type_byte, value in entries.items():
        table[type_byte] = value
    return table


_FIXINTS = [*range(0x00, 0x80), *range(0xE0, 0x100)]
# Whole size of an int element by its type byte (0: not an int).
_INT_SIZE = _table(
    {
        **dict.fromkeys(_FIXINTS, 1),
        **{UINT8: 2, UINT16: 3, UINT32: 5, UINT64: 9},
        **{INT8: 2, INT16: 3, INT32: 5, INT64: 9},
    }
)
_IS_FIXINT = _table(dict.fromkeys(_FIXINTS, 1), np.bool_)
_FIXINT_VALUE = _table({t: t if t < 0x80 else t - 256 for t in _FIXINTS}, np.int8)
_IS_SIGNED = _table(dict.fromkeys((INT8, INT16, INT32, INT64), 1), np.bool_)
# Right shift that leaves an int's payload of the 64-bit word read after its type byte.
_INT_SHIFT = _table({UINT8: 56, UINT16: 48, UINT32: 32, INT8: 56, INT16: 48, INT32: 32})
# Header bytes of a key or value: nil, or bin with a 1/2/4-byte length (0: not allowed).
_BIN_HEAD = _table({NIL: 1, BIN8: 2, BIN16: 3, BIN32: 5})
_BIN_SHIFT = _table({BIN8: 56, BIN16: 48, BIN32: 32})


@dataclass(frozen=True, slots=True)
class Payload:
    """The records of one batch inside the scanned buffer.

    `array_pos` is the msgpack array header, `start` the first record, `end` one past
    the last byte; `dense` says the offset deltas are exactly 0..count-1 (no compaction
    gaps: the broker checked they increase, and there are last_offset_delta + 1 of them).
    """

    array_pos: int
    start: int
    end: int
    count: int
    dense: bool


@dataclass(slots=True)
class RecordFields:
    """Per-record fields of the scanned payloads, in order (positions index the buffer)."""

    batch_index: np.ndarray  # which payload each record belongs to
    offset_deltas: np.ndarray
    timestamp_deltas: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    key_null: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    value_null: np.ndarray
    exact_batches: int = 0  # batches whose boundaries needed msgspec (the guess failed)

    def __len__(self) -> int:
        return len(self.batch_index)

    def take(self, lo: int, hi: int) -> RecordFields:
        """Records lo..hi-1 (views, no copy)."""
        arrays = {f.name: getattr(self, f.name) for f in fields(self)}
        arrays = {name: a[lo:hi] for name, a in arrays.items() if isinstance(a, np.ndarray)}
        return RecordFields(**arrays, exact_batches=self.exact_batches)


def array_header(buf: bytes | memoryview, pos: int) -> tuple[int, int] | None:
    """(item count, header size) of the msgpack array at `pos`, or None if not an array."""
    first = buf[pos]
    if FIXARRAY_MIN <= first <= FIXARRAY_MAX:
        return first - FIXARRAY_MIN, 1
    if first == ARRAY16:
        return int.from_bytes(buf[pos + 1 : pos + 3], "big"), 3
    if first == ARRAY32:
        return int.from_bytes(buf[pos + 1 : pos + 5], "big"), 5
    return None


class _Bytes:
    """Gathers over one immutable buffer: single bytes, or big-endian words, at positions.

    Positions past the end read as zero bytes (they only occur in guesses that the
    caller then rejects), so no padded copy of the buffer is needed.
    """

    def __init__(self, buf: bytes | memoryview) -> None:
        self.u8 = np.frombuffer(buf, dtype=np.uint8)
        self.last_word = len(buf) - WORD_BYTES
        # Every byte position viewed as the start of an unaligned big-endian word.
        self.words = np.ndarray((self.last_word + 1,), dtype=">u8", buffer=buf, strides=(1,))

    def byte(self, pos: np.ndarray) -> np.ndarray:
        return self.u8.take(pos, mode="clip")

    def word(self, pos: np.ndarray) -> np.ndarray:
        """The 8 bytes from each position on, as uint64 (zeros past the end)."""
        clipped = np.clip(pos, 0, self.last_word)
        # Fancy indexing, not `take`: take copies a strided source array whole first.
        words: np.ndarray = self.words[clipped].astype(np.uint64)
        past = pos - clipped
        if past.any():
            words <<= (np.minimum(past, WORD_BYTES) * 8).astype(np.uint64)
        return words


@dataclass(slots=True)
class _Parsed:
    """Fields of records parsed at given start positions; `ok` is False where the bytes
    there do not follow the record grammar up to the headers."""

    ok: np.ndarray
    headers_pos: np.ndarray
    offset_type: np.ndarray
    offset_pos: np.ndarray
    timestamp_deltas: np.ndarray
    key_start: np.ndarray
    key_length: np.ndarray
    key_null: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    value_null: np.ndarray


def _int_values(data: _Bytes, pos: np.ndarray, types: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, ok) of the ints whose type bytes are at `pos`."""
    fix = _IS_FIXINT.take(types)
    if fix.all():
        return _FIXINT_VALUE.take(types).astype(np.int64), fix
    words = data.word(pos + 1)
    shift = _INT_SHIFT.take(types).astype(np.uint64)
    values = (words >> shift).view(np.int64)
    signed = _IS_SIGNED.take(types)
    if signed.any():
        values = np.where(signed, words.view(np.int64) >> shift.view(np.int64), values)
    values = np.where(fix, _FIXINT_VALUE.take(types), values)
    # A uint64 above the int64 range cannot be an offset or timestamp delta.
    ok = (_INT_SIZE.take(types) > 0) & ~((types == UINT64) & (values < 0))
    return values, ok


def _bin_fields(
    data: _Bytes, pos: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(data start, length, null, ok) of the nil-or-bin elements at `pos`."""
    types = data.byte(pos)
    null = types == NIL
    if null.all():
        return pos + 1, np.zeros(len(pos), dtype=np.int64), null, null
    if (types == BIN8).all():
        return pos + 2, data.byte(pos + 1).astype(np.int64), null, ~null
    head = _BIN_HEAD.take(types)
    length = (data.word(pos + 1) >> _BIN_SHIFT.take(types).astype(np.uint64)).view(np.int64)
    length[null] = 0
    return pos + head, length, null, head > 0


def _parse(data: _Bytes, starts: np.ndarray) -> _Parsed:
    """Parse the first four items of the records starting at `starts`, all at once."""
    ok = data.byte(starts) == FIXARRAY_5
    offset_pos = starts + 1
    offset_type = data.byte(offset_pos)
    ts_pos = offset_pos + _INT_SIZE.take(offset_type)
    ok &= _INT_SIZE.take(offset_type) > 0
    ts_type = data.byte(ts_pos)
    timestamp_deltas, ts_ok = _int_values(data, ts_pos, ts_type)
    ok &= ts_ok
    key_start, key_length, key_null, key_ok = _bin_fields(data, ts_pos + _INT_SIZE.take(ts_type))
    ok &= key_ok
    value_start, value_length, value_null, value_ok = _bin_fields(data, key_start + key_length)
    ok &= value_ok
    return _Parsed(
        ok,
        value_start + value_length,
        offset_type,
        offset_pos,
        timestamp_deltas,
        key_start,
        key_length,
        key_null,
        value_start,
        value_length,
        value_null,
    )


def _exact_lengths(buf: bytes | memoryview, payload: Payload) -> np.ndarray | None:
    """Each record's byte length from msgspec (exact, one small object per record)."""
    try:
        raws = _RAW_RECORDS.decode(memoryview(buf)[payload.array_pos : payload.end])
    except msgspec.DecodeError:
        return None
    if len(raws) != payload.count:
        return None
    return np.fromiter(map(len, raws), dtype=np.int64, count=payload.count)


def scan_records(
    buf: bytes | memoryview, payloads: Sequence[Payload], *, empty_headers: bool
) -> RecordFields | None:
    """Locate every record of `payloads` (non-empty, in buffer order) in `buf`.

    With `empty_headers`, every record must have empty headers (the caller builds a
    null headers column). None means: decode these payloads the slow way.
    """
    if not payloads or len(buf) > MAX_SCAN_BUFFER_BYTES or len(buf) < WORD_BYTES:
        return None
    counts = np.fromiter((p.count for p in payloads), dtype=np.int64, count=len(payloads))
    if (counts <= 0).any():
        return None
    data = _Bytes(buf)
    first_pos = np.fromiter((p.start for p in payloads), dtype=np.int64, count=len(payloads))
    payload_end = np.fromiter((p.end for p in payloads), dtype=np.int64, count=len(payloads))
    first_index = np.cumsum(counts) - counts
    batch_index = np.repeat(np.arange(len(payloads)), counts)
    index_in_batch = np.arange(len(batch_index)) - first_index.take(batch_index)
    lengths, guessed = _guessed_lengths(
        data, payloads, first_pos, first_index, batch_index, index_in_batch
    )
    exact = np.zeros(len(payloads), dtype=np.bool_)
    pending = ~guessed
    for attempt in range(2):  # guessed boundaries, then exact ones where the guess failed
        if not _fill_exact_lengths(buf, payloads, pending, lengths, first_index, counts):
            return None
        exact |= pending
        ends = np.cumsum(lengths)
        starts = ends - lengths
        shift = (first_pos - starts.take(first_index)).take(batch_index)
        starts += shift
        ends += shift
        parsed = _parse(data, starts)
        headers_empty = (data.byte(parsed.headers_pos) == EMPTY_ARRAY) & (
            parsed.headers_pos + 1 == ends
        )
        if empty_headers or not exact.any():
            record_ok = parsed.ok & headers_empty
        else:
            # Exact boundaries: any well-formed headers item fills the rest of the record.
            record_ok = parsed.ok & np.where(
                exact[batch_index], parsed.headers_pos < ends, headers_empty
            )
        batch_ok = np.logical_and.reduceat(record_ok, first_index) & (
            ends[first_index + counts - 1] == payload_end
        )
        if batch_ok.all():
            return _fields(data, parsed, payloads, batch_index, index_in_batch, exact)
        if attempt or (exact & ~batch_ok).any():
            return None  # exact boundaries, and still not the record grammar
        pending = ~batch_ok
    return None


def _fill_exact_lengths(
    buf: bytes | memoryview,
    payloads: Sequence[Payload],
    which: np.ndarray,
    lengths: np.ndarray,
    first_index: np.ndarray,
    counts: np.ndarray,
) -> bool:
    """Overwrite the lengths of the `which` batches with exact ones; False if undecodable."""
    for b in np.flatnonzero(which).tolist():
        exact = _exact_lengths(buf, payloads[b])
        if exact is None:
            return False
        lengths[first_index[b] : first_index[b] + counts[b]] = exact
    return True


def _guessed_lengths(
    data: _Bytes,
    payloads: Sequence[Payload],
    first_pos: np.ndarray,
    first_index: np.ndarray,
    batch_index: np.ndarray,
    index_in_batch: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Record lengths if each batch's records are shaped like its first one, and which
    batches that guess may fit.

    Only dense batches whose first record has empty headers qualify (their offset
    deltas are the record indexes), and only if the guessed lengths add up to the
    payload's: varied records almost never do, and go to exact lengths at once
    instead of being parsed twice.
    """
    count = len(payloads)
    first = _parse(data, first_pos)
    first_length = first.headers_pos + 1 - first_pos
    lengths = first_length.take(batch_index)
    for bound, extra_bytes in _DELTA_EXTRA_BYTES:
        lengths += (index_in_batch >= bound) * extra_bytes
    payload_bytes = np.fromiter((p.end - p.start for p in payloads), dtype=np.int64, count=count)
    dense = np.fromiter((p.dense for p in payloads), dtype=np.bool_, count=count)
    guessed = (
        first.ok
        & dense
        & (data.byte(first.headers_pos) == EMPTY_ARRAY)
        & (np.add.reduceat(lengths, first_index) == payload_bytes)
    )
    return lengths, guessed


def _fields(
    data: _Bytes,
    parsed: _Parsed,
    payloads: Sequence[Payload],
    batch_index: np.ndarray,
    index_in_batch: np.ndarray,
    exact: np.ndarray,
) -> RecordFields | None:
    if all(p.dense for p in payloads):
        offset_deltas = index_in_batch
    else:
        offset_deltas, ok = _int_values(data, parsed.offset_pos, parsed.offset_type)
        if not ok.all():
            return None
    return RecordFields(
        batch_index,
        offset_deltas,
        parsed.timestamp_deltas,
        parsed.key_start,
        parsed.key_length,
        parsed.key_null,
        parsed.value_start,
        parsed.value_length,
        parsed.value_null,
        int(np.count_nonzero(exact)),
    )


def binary_column(
    buffer: pa.Buffer, starts: np.ndarray, lengths: np.ndarray, null: np.ndarray
) -> pa.Array:
    """An Arrow `binary` array of the byte ranges [start, start + length) of `buffer`.

    The ranges are increasing and disjoint, so viewed as one binary array whose items
    alternate between wanted ranges and the gaps between them, the wanted ones are the
    even items: Arrow's `take` copies them out in C, in one pass.
    """
    count = len(starts)
    nulls = int(np.count_nonzero(null))
    if nulls == count:
        return pa.nulls(count, pa.binary())
    bounds = np.empty(2 * count, dtype=np.int32)
    bounds[0::2] = starts
    bounds[1::2] = starts + lengths
    spans = pa.Array.from_buffers(pa.binary(), 2 * count - 1, [None, pa.py_buffer(bounds), buffer])
    taken = spans.take(pa.array(np.arange(0, 2 * count, 2, dtype=np.int64)))
    if nulls == 0:
        return taken
    validity = pa.py_buffer(np.packbits(~null, bitorder="little"))
    return pa.Array.from_buffers(
        pa.binary(), count, [validity, *taken.buffers()[1:]], null_count=nulls
    )
