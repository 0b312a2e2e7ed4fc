"""Building the offset map over a log's dirty section (Kafka's `buildOffsetMap`).

Batches are fed in offset order. Each keyed record at or past the first dirty offset
records its offset as the latest for its key. The map's `latest_offset` advances to
each fed batch's last offset and, after a whole segment, to just before the next
segment's base, so the cleaned range can pass offset gaps.

Keys are first gathered in a staging dict (C-level `dict.update`, no per-key Python)
and digested into the numpy map only when the staging dict reaches
`STAGING_KEYS_MAX` distinct keys, when the map might not take them, or when the
range ends. A bounded set of keys already digested lets a nearly full map keep
taking updates of known keys without hashing them again. A log with many updates to
few keys thus hashes each key about once per cleaning instead of once per record.

When the map cannot take a batch's new keys, the builder stops before that batch:
the cleaning covers only what was mapped and the next round continues from there.
Thread safety: none; one cleaner thread owns one builder.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, KeysView, Sequence
from itertools import compress, islice, repeat
from operator import add, attrgetter, ge, itemgetter
from typing import Any, cast

import numpy as np

from compaction.keys import KeyedRecord
from compaction.offset_map import OffsetMap
from protocol.batch import BatchHeader

__all__ = ["STAGING_KEYS_MAX", "MapBuilder", "OffsetMapTooSmall"]

# Distinct keys held as Python objects before digesting: bounds the staging dict to
# ~40 MiB with short keys while letting a log with up to 262,144 hot keys hash each once.
STAGING_KEYS_MAX = 1 << 18
# Staged keys digested per step of a flush: each step's C calls (a set update, numpy
# passes) then hold the GIL for a millisecond or so, not the 20 ms a whole staging
# area's worth takes on this machine, so the broker's event loop is not held up.
FLUSH_CHUNK_KEYS = 1 << 14


# Fields of a raw record tuple (protocol.batch: [offset_delta, ts_delta, key, value, headers]).
_DELTA = itemgetter(0)
_KEY = itemgetter(2)
_DELTA_OF = attrgetter("offset_delta")
_KEY_OF = attrgetter("key")


class OffsetMapTooSmall(Exception):
    """Not even the first dirty batch fits in the offset map: no progress is possible."""


class MapBuilder:
    """Feeds batches into an OffsetMap, tracking the end of the mapped range."""

    def __init__(self, offset_map: OffsetMap, first_dirty_offset: int) -> None:
        self.map = offset_map
        self.first_dirty_offset = first_dirty_offset
        self.records_mapped = 0
        # key -> latest offset, not yet digested into the map.
        self._staging: dict[bytes | None, int] = {}
        # How many staged keys may be new to the map (an upper bound).
        self._staged_new = 0
        # Keys known to be in the map already (a bounded cache, cleared when full).
        self._known: set[bytes | None] = {None}
        # Set once the map is near its fill limit: new keys are then counted exactly.
        self._tight = False
        offset_map.latest_offset = first_dirty_offset - 1

    @property
    def end_offset(self) -> int:
        """First offset past the mapped range (the next checkpoint value)."""
        return self.map.latest_offset + 1

    def add_batch(self, header: BatchHeader, records: Sequence[tuple[Any, ...]]) -> bool:
        """Map one batch; False (and nothing changed) when the map is full.

        `records` are the raw record tuples of the batch (`decode_payload`).
        """
        return self.add_keys(
            header.base_offset, header.last_offset, map(_DELTA, records), map(_KEY, records)
        )

    def add_records(
        self, base_offset: int, last_offset: int, records: Sequence[KeyedRecord]
    ) -> bool:
        """`add_batch` for the records of `keys.decode_keys` (what the cleaner feeds)."""
        if base_offset >= self.first_dirty_offset and self._surely_fits(len(records)):
            # The common case as one C-level pass, without intermediate containers.
            offsets = map(add, map(_DELTA_OF, records), repeat(base_offset))
            self._stage_all(zip(map(_KEY_OF, records), offsets, strict=True))
            self.records_mapped += len(records)
            self.map.latest_offset = max(self.map.latest_offset, last_offset)
            return True
        return self.add_keys(
            base_offset, last_offset, map(_DELTA_OF, records), map(_KEY_OF, records)
        )

    def add_keys(
        self,
        base_offset: int,
        last_offset: int,
        deltas: Iterable[int],
        keys: Iterable[bytes | None],
    ) -> bool:
        """Map the batch at `base_offset`..`last_offset` from its records' offset deltas
        and keys, in record order."""
        if last_offset < self.first_dirty_offset:
            return True
        keyed = tuple(keys)
        if keyed:
            offsets = list(map(add, deltas, repeat(base_offset)))
            if base_offset < self.first_dirty_offset:
                dirty = list(map(ge, offsets, repeat(self.first_dirty_offset)))
                keyed = tuple(compress(keyed, dirty))
                offsets = list(compress(offsets, dirty))
            if not self._stage(keyed, offsets):
                return False
            self.records_mapped += len(offsets)
        self.map.latest_offset = max(self.map.latest_offset, last_offset)
        return True

    def end_segment(self, next_offset: int) -> None:
        """A whole segment was fed: the range reaches up to `next_offset` - 1."""
        self.map.latest_offset = max(self.map.latest_offset, next_offset - 1)

    def finish(self) -> None:
        """Digest whatever is still staged."""
        self._flush()

    def _stage(self, keys: Sequence[bytes | None], offsets: list[int]) -> bool:
        """Stage a batch's keys if the map can surely take them; else flush and count exactly."""
        staging = self._staging
        if not self._tight:
            if self._surely_fits(len(keys)):
                self._stage_all(zip(keys, offsets, strict=True))
                return True
            # Near the fill limit from now on: count exactly, so known keys never force
            # a flush (each flush hashes every staged key).
            self._tight = True
            self._staged_new = len(set(staging).difference(self._known))
        # One argument per call: set.difference(x) walks the small side, while
        # difference(x, y) would walk all of y (the whole staging dict) every batch.
        fresh = set(keys).difference(self._known).difference(self._staging)
        if self.map.size + self._staged_new + len(fresh) > self.map.max_entries:
            self._flush()
            fresh = set(keys).difference(self._known)
            if self.map.size + len(fresh) > self.map.max_entries:
                return self._put_exactly(keys, offsets)
        staging.update(zip(keys, offsets, strict=True))
        self._staged_new += len(fresh)
        if len(staging) >= STAGING_KEYS_MAX:
            self._flush()
        return True

    def _surely_fits(self, count: int) -> bool:
        """Room for `count` more keys even if all are new (no set arithmetic needed)."""
        return not self._tight and self.map.size + self._staged_new + count <= self.map.max_entries

    def _stage_all(self, pairs: Iterable[tuple[bytes | None, int]]) -> None:
        """Stage (key, offset) pairs known to fit; `_staged_new` may overcount (keys
        already in the map count as new), which only makes a flush come sooner."""
        staging = self._staging
        before = len(staging)
        staging.update(pairs)
        self._staged_new += len(staging) - before
        if len(staging) >= STAGING_KEYS_MAX:
            self._flush()

    def _flush(self) -> None:
        """Digest the staged keys into the map, `FLUSH_CHUNK_KEYS` at a time."""
        staging = self._staging
        staging.pop(None, None)
        keys = cast("Iterator[bytes]", iter(staging.keys()))  # the unkeyed None is out
        values = iter(staging.values())  # the same order
        while chunk := list(islice(keys, FLUSH_CHUNK_KEYS)):
            offsets = np.fromiter(islice(values, len(chunk)), dtype=np.int64, count=len(chunk))
            self.map.put_digests(self.map.digest_keys(chunk), offsets, distinct=True)
            self._remember(chunk)
        staging.clear()
        self._staged_new = 0

    def _remember(self, keys: Iterable[bytes | None]) -> None:
        if len(self._known) > STAGING_KEYS_MAX:
            self._known = {None}
        self._known.update(keys)

    def _put_exactly(self, keys: Sequence[bytes | None], offsets: list[int]) -> bool:
        """The batch may fit if some of its keys are already mapped: count precisely."""
        latest = dict(zip(keys, offsets, strict=True))
        latest.pop(None, None)
        digests = self.map.digest_keys(cast("KeysView[bytes]", latest.keys()))  # None is out
        present = int(np.count_nonzero(self.map.get_digests(digests) >= 0))
        if len(latest) - present > self.map.free_entries:
            if self.end_offset <= self.first_dirty_offset:
                raise OffsetMapTooSmall(
                    f"a batch with {len(latest)} keys does not fit in an offset map of "
                    f"{self.map.max_entries} entries"
                )
            return False
        offsets_array = np.fromiter(latest.values(), np.int64, len(latest))
        self.map.put_digests(digests, offsets_array, distinct=True)
        self._remember(latest.keys())
        return True
