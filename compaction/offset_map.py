"""The cleaner's offset map: the latest offset of every key, in a fixed memory budget.

Invariant: for every key put since the last `clear()`, `get(key)` returns the largest
offset put for it; keys never put return -1. The map never holds more than
`max_entries` = floor(slots x load factor) keys, so probe chains stay short.

Layout: open addressing over three numpy arrays of `slots` entries (digest high
word, digest low word, offset: 24 bytes per slot, Kafka's SkimpyOffsetMap size).
A key is represented by its 128-bit BLAKE2b digest, keyed with a random salt per
map; bit 0 of the low word is forced to 1 so an all-zero slot always means empty.
Probing is double hashing: start at `hi % slots`, step `1 + lo % (slots - 1)`, with
`slots` prime so every probe sequence visits every slot.

Why a digest collision cannot silently drop a record in practice: two different keys
must share all 127 stored digest bits. BLAKE2b is a cryptographic hash, so the
chance for n keys is about n^2 / 2^128 (below 2^-64 for four billion keys), and the
per-map random salt means no producer can craft colliding keys in advance: the salt
is unknown outside the process and changes every cleaning. The map is also rebuilt
from the log at every cleaning, so no collision could persist across runs.

Inserts and lookups are vectorized: each call takes an array of digests and runs
the probe rounds in numpy, one round per probe depth, over the shrinking set of
unsettled keys. Thread safety: none; one cleaner thread owns one map.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable

import numpy as np

__all__ = [
    "DIGEST_BYTES",
    "ENTRY_BYTES",
    "OffsetMap",
    "OffsetMapFull",
]

DIGEST_BYTES = 16
# Two uint64 digest words + one int64 offset per slot.
ENTRY_BYTES = 24
# Smallest useful map: a few entries so a tiny test budget still works.
MIN_SLOTS = 3
# Salt length accepted by blake2b's `key` parameter (at most 64); 16 bytes is plenty.
SALT_BYTES = 16
_EMPTY = np.uint64(0)
# Slots scanned per numpy call in take_sorted_offsets: bounds its temporaries (a mask
# and a copy of one span's offsets, 9 MiB) and how long one call holds the GIL.
_SCAN_SLOTS = 1 << 20


class OffsetMapFull(Exception):
    """A put would take the map past its fill limit (a bug in the caller's accounting)."""


def _is_prime(n: int) -> bool:
    if n < 2:
        return False
    if n % 2 == 0:
        return n == 2
    f = 3
    while f * f <= n:
        if n % f == 0:
            return False
        f += 2
    return True


def _largest_prime_at_most(n: int) -> int:
    while not _is_prime(n):
        n -= 1
    return n


class OffsetMap:
    """Latest offset per key over a log's dirty section, in `memory_bytes` of numpy arrays."""

    def __init__(self, memory_bytes: int, load_factor: float, *, salt: bytes | None = None):
        if not 0.0 < load_factor <= 1.0:
            raise ValueError(f"load factor must be in (0, 1], not {load_factor}")
        raw_slots = memory_bytes // ENTRY_BYTES
        if raw_slots < MIN_SLOTS:
            raise ValueError(
                f"offset map needs at least {MIN_SLOTS * ENTRY_BYTES} bytes, got {memory_bytes}"
            )
        self.slots = _largest_prime_at_most(raw_slots)
        # Kafka's rule: at least one entry must fit; at most slots - 1 so probing ends.
        self.max_entries = min(max(int(self.slots * load_factor), 1), self.slots - 1)
        self._hi = np.zeros(self.slots, dtype=np.uint64)
        self._lo = np.zeros(self.slots, dtype=np.uint64)
        self._offset = np.zeros(self.slots, dtype=np.int64)
        self._salt = salt if salt is not None else os.urandom(SALT_BYTES)
        self.size = 0
        # Last offset covered by the map (Kafka's latestOffset); -1 when empty.
        self.latest_offset = -1
        # Set by take_sorted_offsets(): the arrays no longer form a map.
        self._taken = False

    @property
    def memory_bytes(self) -> int:
        """Bytes held by the three arrays."""
        return self._hi.nbytes + self._lo.nbytes + self._offset.nbytes

    @property
    def utilization(self) -> float:
        """Entries / slots (Kafka's buffer utilization)."""
        return self.size / self.slots

    @property
    def free_entries(self) -> int:
        return self.max_entries - self.size

    def clear(self) -> None:
        """Forget everything (zeroes the arrays) and draw a fresh salt."""
        self._hi.fill(0)
        self._lo.fill(0)
        self._offset.fill(0)
        self._salt = os.urandom(SALT_BYTES)
        self.size = 0
        self.latest_offset = -1
        self._taken = False

    def digest_keys(self, keys: Iterable[bytes]) -> np.ndarray:
        """(n, 2) uint64 digests of `keys` (salted BLAKE2b-128, low word bit 0 set)."""
        salt = self._salt
        blake = hashlib.blake2b
        joined = b"".join(blake(k, digest_size=DIGEST_BYTES, key=salt).digest() for k in keys)
        digests = np.frombuffer(joined, dtype=np.uint64).reshape(-1, 2).copy()
        digests[:, 1] |= np.uint64(1)
        return digests

    def _start_and_step(self, digests: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        slots = np.uint64(self.slots)
        start = digests[:, 0] % slots
        step = np.uint64(1) + digests[:, 1] % np.uint64(self.slots - 1)
        return start, step

    def put_digests(
        self, digests: np.ndarray, offsets: np.ndarray, *, distinct: bool = False
    ) -> int:
        """Record `offsets[i]` as the latest offset of `digests[i]`; returns new entries.

        Digests may repeat (the largest offset wins) unless the caller promises
        `distinct` (digests of a dict's keys), which skips a sort. Raises
        OffsetMapFull (and changes nothing) when the new keys could exceed
        `max_entries`: the caller checks `free_entries` first.
        """
        self._check_not_taken()
        o = np.asarray(offsets, dtype=np.int64)
        d = digests
        if len(d) == 0:
            return 0
        if not distinct:
            # Sort by digest then offset and keep the last of each run.
            order = np.lexsort((o, d[:, 1], d[:, 0]))
            d, o = d[order], o[order]
            last = np.ones(len(d), dtype=bool)
            last[:-1] = (d[1:, 0] != d[:-1, 0]) | (d[1:, 1] != d[:-1, 1])
            d, o = d[last], o[last]
        if len(d) > self.free_entries and len(d) - self._count_present(d) > self.free_entries:
            raise OffsetMapFull(
                f"{len(d)} keys do not fit: {self.size} of {self.max_entries} entries used"
            )
        hi, lo = d[:, 0], d[:, 1]
        pos, step = self._start_and_step(d)
        pending = np.arange(len(d))
        slots = np.uint64(self.slots)
        added = 0
        while pending.size:
            p = pos[pending]
            cur_lo = self._lo[p]
            same = (cur_lo == lo[pending]) & (self._hi[p] == hi[pending])
            if same.any():
                idx = pending[same]
                self._offset[pos[idx]] = np.maximum(self._offset[pos[idx]], o[idx])
            empty = cur_lo == _EMPTY
            if empty.any():
                idx = pending[empty]
                # Several new keys may race for one empty slot: the first one wins,
                # the others see it occupied next round and move on.
                _, first = np.unique(pos[idx], return_index=True)
                win = idx[first]
                self._hi[pos[win]] = hi[win]
                self._lo[pos[win]] = lo[win]
                self._offset[pos[win]] = o[win]
                added += len(win)
                settled = np.zeros(len(pending), dtype=bool)
                settled[same] = True
                settled[np.flatnonzero(empty)[first]] = True
            else:
                settled = same
            occupied = ~same & ~empty
            moving = pending[occupied]
            pos[moving] = (pos[moving] + step[moving]) % slots
            pending = pending[~settled]
        self.size += added
        return added

    def _probe(self, digests: np.ndarray) -> np.ndarray:
        """Slot of each digest, or -1 when absent."""
        self._check_not_taken()
        found = np.full(len(digests), -1, dtype=np.int64)
        if len(digests) == 0:
            return found
        hi, lo = digests[:, 0], digests[:, 1]
        pos, step = self._start_and_step(digests)
        pending = np.arange(len(digests))
        slots = np.uint64(self.slots)
        while pending.size:
            p = pos[pending]
            cur_lo = self._lo[p]
            same = (cur_lo == lo[pending]) & (self._hi[p] == hi[pending])
            found[pending[same]] = p[same].astype(np.int64)
            go_on = ~same & (cur_lo != _EMPTY)
            pending = pending[go_on]
            pos[pending] = (pos[pending] + step[pending]) % slots
        return found

    def _count_present(self, digests: np.ndarray) -> int:
        return int(np.count_nonzero(self._probe(digests) >= 0))

    def get_digests(self, digests: np.ndarray) -> np.ndarray:
        """Latest offset of each digest, -1 where absent."""
        slot = self._probe(digests)
        out = np.full(len(digests), -1, dtype=np.int64)
        hit = slot >= 0
        out[hit] = self._offset[slot[hit]]
        return out

    def take_sorted_offsets(self) -> np.ndarray:
        """Every mapped offset in ascending order (`size` of them); consumes the map.

        Each offset in the map is the latest of its key, so once the map is complete
        this array says which records survive without looking any key up: a mapped
        record survives iff its offset is in it. The offsets are gathered and sorted
        in place at the front of the map's own offset array (no second array of the
        map's size), so the slots no longer match their digests: every put or lookup
        afterwards raises, while `size`, `slots` and `memory_bytes` keep their values
        for the statistics. `clear()` makes the map usable again.
        """
        offsets = self._offset
        filled = 0
        # Move the occupied slots' offsets to the front, a bounded span at a time (the
        # copy of one span is the only extra memory), then sort just those: a map sized
        # for a long dirty range may hold far fewer keys than it has slots.
        for start in range(0, self.slots, _SCAN_SLOTS):
            part = slice(start, start + _SCAN_SLOTS)
            found = offsets[part][self._lo[part] != _EMPTY]
            offsets[filled : filled + len(found)] = found
            filled += len(found)
        assert filled == self.size, f"{filled} occupied slots, {self.size} entries"
        taken = offsets[:filled]
        taken.sort()  # numpy sorts without the GIL
        self._taken = True
        return taken

    def _check_not_taken(self) -> None:
        if self._taken:
            raise RuntimeError("the offset map was consumed by take_sorted_offsets()")

    def put(self, key: bytes, offset: int) -> None:
        """Put one key (convenience for tests and small callers)."""
        self.put_digests(self.digest_keys([key]), np.array([offset], dtype=np.int64))

    def get(self, key: bytes) -> int:
        """Latest offset of one key, -1 when absent."""
        return int(self.get_digests(self.digest_keys([key]))[0])
